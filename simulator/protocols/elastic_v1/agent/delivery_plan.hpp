// The spec personality's delivery of correlations to one agent's socket
// (issue 29). Pure logic, no I/O: host_agent.cpp does the sends and the looks.
//
// An agent reads its socket on its own schedule (EDOT Java every 20 ms, then
// until the queue is empty); the kernel queue holds max_dgram_qlen + 1
// datagrams (11) between reads. A correlation counts only if the agent reads
// it before it exports the transaction, which it does from the transaction's
// end + samples-delay-ms on. tracecorr never sees the end, only samples: the
// end is after the transaction's last sample (by the sample's own time, not
// when tracecorr read it) and, once every thread seen in it was sampled
// elsewhere, before the first of those samples. So a correlation has a *due*
// (last sample + samples-delay-ms: read before it, it is in time) and, once
// its transaction was seen left, a *late_after* (left + samples-delay-ms:
// read after it, the agent has had every right to export the transaction).
//
//  - AgentReads is what a sender can know of the agent's reading. A unix
//    datagram stays charged to its sender's socket until the receiver reads
//    it (SIOCOUTQ on the sender: the bytes still unread), so tracecorr sees
//    each read: when the agent reads, how often, how many datagrams the queue
//    took, and for every datagram whether it was read before its due.
//  - DeliveryPlan holds the counts per (trace, transaction, stack) until the
//    transaction looks finished (every thread seen in it moved on to another
//    record, or it went unsampled for `settle`) or until the last read before
//    its due, and offers them heaviest first; when more keys wait than the
//    reads before their dues can take, the keys that must go at the next read
//    are chosen by weight over the reads still to come (job sequencing with
//    deadlines), so the lightest are the ones that expire.
//  - capacity_bound is what a sender knowing every sample in advance could
//    have had read in time through the same reads: the figure the plan is
//    judged against, stated in the summary.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "elastic_v1/agent/correlation.hpp"

namespace tracecorr::elastic_v1::agent {

using DeliveryClock = std::chrono::steady_clock;  // CLOCK_MONOTONIC, as Sample::time_ns
using DeliveryTime = DeliveryClock::time_point;
using DeliveryDuration = DeliveryClock::duration;

struct DeliveryCounts {
  std::uint64_t messages = 0, samples = 0;
  void add(std::uint64_t n) {
    ++messages;
    samples += n;
  }
};

// ---- the agent's reading, as the sender sees it ----------------------------------
class AgentReads {
 public:
  // Reads closer together than this are one read of the agent (it reads until
  // the queue is empty; tracecorr refills it meanwhile).
  static constexpr auto kBurstGap = std::chrono::milliseconds(3);
  // Before any read was seen: how long a datagram is assumed to wait for one.
  static constexpr auto kUnknownReadWait = std::chrono::milliseconds(100);
  // Reads seen within this of a send are "at once" (an agent blocked in recv or poll).
  static constexpr auto kImmediate = std::chrono::milliseconds(2);

  struct Outcomes {
    DeliveryCounts in_time;      // read by due
    DeliveryCounts late;         // still unread after late_after: the agent may have exported its transaction
    DeliveryCounts unconfirmed;  // read between due and late_after (in time only if the transaction ran on
                                 // after its last sample), or never seen read (the run ended, the process exited)
  };

  // `capacity`: datagrams the queue is assumed to take until a refusal says (max_dgram_qlen + 1).
  explicit AgentReads(std::size_t capacity = 11) : capacity_(capacity == 0 ? 1 : capacity) {}

  // A datagram charging `charge` bytes to the socket (its kernel truesize),
  // carrying `samples` (0: a registration), in time until `due` and late after
  // `late_after` (DeliveryTime::max(): never known), was queued at `now`.
  void sent(std::uint64_t samples, DeliveryTime due, DeliveryTime late_after, std::uint64_t charge, DeliveryTime now);
  // The socket's unread bytes (SIOCOUTQ) at `now`. `purged`: the agent's
  // socket is gone (its process exited), so what left the queue was not read.
  void observe(std::uint64_t unread_bytes, DeliveryTime now, bool purged = false);
  // A send was refused (EAGAIN), and observe() was called right after: the
  // queue holds in_flight() of ours at most (unless that look saw a read).
  void refused();
  // Nothing more will be seen (end of run, exit): what is unread is unconfirmed.
  void abandon();

  std::size_t in_flight() const { return unread_.size(); }
  std::size_t capacity() const { return capacity_; }
  std::size_t room() const { return unread_.size() >= capacity_ ? 0 : capacity_ - unread_.size(); }
  bool reads_seen() const { return reads_ > 0; }
  std::uint64_t reads() const { return reads_; }
  // How long a datagram may wait for the agent's next read: the longest wait
  // seen over the recent reads (kUnknownReadWait before any).
  DeliveryDuration read_wait() const;
  bool reads_at_once() const { return reads_seen() && read_wait() <= kImmediate; }
  // The agent's period between reads, from reads that found a datagram
  // waiting since the read before (median); nullopt when none was seen.
  std::optional<DeliveryDuration> read_period() const;
  // When the agent is expected to read next (now, for one that reads at once or is overdue).
  DeliveryTime next_read(DeliveryTime now) const;
  // When a datagram queued now is expected to be read: behind the in_flight()
  // of ours ahead of it. An agent never seen to take more than its queue holds
  // in one read (it reads a batch, not until empty) takes capacity() per read,
  // so one queued behind a full queue waits a period more; a read in progress
  // is not counted on to take it (it may end at an empty queue first).
  DeliveryTime reaches(DeliveryTime now) const;
  // The agent took more in one read than its queue holds: it reads until empty while we refill.
  bool reads_until_empty() const { return most_per_read_ > capacity_; }
  // The earliest late_after among the unread: looking right after it tells late from unconfirmed.
  std::optional<DeliveryTime> next_check() const;
  const Outcomes& outcomes() const { return outcomes_; }
  std::size_t most_read_at_once() const { return most_per_read_; }
  // When each read seen began (the first kMaxReadsKept).
  static constexpr std::size_t kMaxReadsKept = 1 << 17;
  const std::vector<DeliveryTime>& read_starts() const { return read_starts_; }
  // When none of ours was unread (the first kMaxReadsKept such stretches; the
  // last one open until `now`): reads then were not seen, not absent.
  using Stretch = std::pair<DeliveryTime, DeliveryTime>;
  std::vector<Stretch> idle(DeliveryTime now) const;

 private:
  struct Unread {
    std::uint64_t samples;
    DeliveryTime due, late_after, queued;
    std::uint64_t charge;
  };
  void classify(const Unread& u, DeliveryTime now, bool purged);
  void on_read(DeliveryTime oldest_queued, std::size_t datagrams, DeliveryTime now);

  std::size_t capacity_;
  std::deque<Unread> unread_;
  std::uint64_t unread_bytes_ = 0;
  DeliveryTime last_look_{};
  bool last_look_read_ = false;  // the latest observe() saw a read
  std::uint64_t reads_ = 0;
  DeliveryTime last_read_end_{};  // the latest read seen (a read lasts while the agent finds datagrams)
  std::size_t this_read_ = 0, most_per_read_ = 0;
  std::deque<DeliveryDuration> waits_, periods_;  // recent
  std::vector<DeliveryTime> read_starts_;
  std::vector<Stretch> idle_;
  std::optional<DeliveryTime> idle_since_ = DeliveryTime{};  // none unread since (nullopt: some are)
  Outcomes outcomes_;
};

// ---- the plan ----------------------------------------------------------------------
struct PlanOptions {
  DeliveryDuration samples_delay = std::chrono::milliseconds(1000);
  DeliveryDuration settle = std::chrono::milliseconds(200);  // unsampled this long: the transaction ended
  std::size_t max_keys = 65536;     // pending keys; beyond, the lightest is dropped (queue_full)
  std::size_t max_threads = 4096;   // threads followed for "moved on"; others settle by time only
  std::size_t max_history = 65536;  // keys remembered for capacity_bound
};

struct PlanStats {
  std::uint64_t samples = 0;  // added
  DeliveryCounts expired;     // not read-able before due: never sent
  DeliveryCounts queue_full;  // more pending keys than max_keys: the lightest went
  DeliveryCounts unsendable;  // no socket, refused, or the process exited
};

struct Offer {
  CorrelationKey key;
  std::uint16_t count = 0;
  DeliveryTime due;
  DeliveryTime late_after = DeliveryTime::max();  // max: its transaction was not seen left
};

// Whether `offer` queued now would be read by its due. An offer chosen a
// moment ago may no longer be: the agent began a read meanwhile, and a
// datagram sent while it reads queues behind the batch it takes.
inline bool readable_in_time(const Offer& offer, const AgentReads& reads, DeliveryTime now) {
  return offer.due >= reads.reaches(now);
}

// What the reads of one run could have carried (see capacity_bound).
struct CapacityBound {
  bool limited = false;                 // false: the socket limited nothing (every sample is the bound)
  std::uint64_t samples = 0;            // at most this many could have been read in time
  std::uint64_t correlated = 0;         // of these
  DeliveryDuration read_period{};       // the reads assumed: one every read_period ...
  std::size_t datagrams_per_read = 0;   // ... taking this many datagrams each
  std::uint64_t keys = 0;               // (trace, transaction, stack) keys considered
  bool history_overflow = false;        // more keys than max_history: the bound covers the first ones only
};

class DeliveryPlan {
 public:
  explicit DeliveryPlan(PlanOptions options = {}) : options_(options) {}

  // One correlated sample of `key` taken at `when` on thread `tid`. Returns
  // true when it settled a transaction (its thread moved on): worth acting now.
  bool add(const CorrelationKey& key, pid_t tid, DeliveryTime when);
  // Thread `tid` was sampled at `when` outside any transaction (its record
  // cleared or gone). Returns true when that settled the transaction it was in.
  bool left(pid_t tid, DeliveryTime when);
  // Drops what is past due (it could no longer be read in time): as expired,
  // or as unsendable when there was no socket to send it on.
  void expire(DeliveryTime now, bool sendable = true);
  // What to send now, best first, at most `limit`: the keys the reads still
  // to come cannot take later, then settled keys by count. `final`: the run is
  // ending, every pending key is offered.
  std::vector<Offer> choose(DeliveryTime now, const AgentReads& reads, std::size_t limit, bool final = false) const;
  // The key as it stands now (its count may have grown since it was offered), or nullopt if nothing is pending.
  std::optional<Offer> current(const CorrelationKey& key) const;
  void sent(const Offer& offer);         // it went out: its count leaves the plan
  void unsendable(const Offer& offer);   // it cannot be sent (refused, no socket)
  void abandon();                        // everything pending is unsendable (the process exited)
  // The run ends at `horizon`: no read after it will take anything, so keys
  // due later compete for the reads before it.
  void ends_at(DeliveryTime horizon) { horizon_ = horizon; }
  // When choose() may have something new to say (settling, urgency, expiry).
  DeliveryTime next_action(DeliveryTime now, const AgentReads& reads) const;

  const PlanStats& stats() const { return stats_; }
  std::uint64_t pending_samples() const { return pending_samples_; }
  std::size_t pending_keys() const { return pending_.size(); }
  // Where the reads seen so far put the ceiling (`end`: the last moment a datagram could be read).
  CapacityBound bound(const AgentReads& reads, DeliveryTime end) const;

 private:
  struct TransactionKey {
    TraceId trace{};
    SpanId transaction{};
    auto operator<=>(const TransactionKey&) const = default;
  };
  struct Transaction {
    DeliveryTime last_sample{};
    std::size_t threads_in = 0;  // followed threads whose latest sample is in it
    DeliveryTime left{};         // when the last of them was first sampled elsewhere ({}: not seen)
    std::size_t pending_keys = 0;
    bool unfollowed = false;     // sampled on a thread beyond max_threads: settles by time only
  };
  struct Pending {
    std::uint64_t count = 0;
  };
  struct History {
    DeliveryTime first{};
    std::uint64_t samples = 0;
  };
  static TransactionKey transaction_of(const CorrelationKey& k) { return {k.trace_id, k.transaction_id}; }
  DeliveryTime due(const Transaction& t) const { return t.last_sample + options_.samples_delay; }
  bool settled(const Transaction& t, DeliveryTime now) const;
  DeliveryDuration lead(const AgentReads& reads) const;
  DeliveryDuration read_margin(const AgentReads& reads, DeliveryDuration period) const;
  DeliveryTime late_after(const Transaction& t) const;
  bool follow_thread(pid_t tid, const TransactionKey& now_in, DeliveryTime when);
  bool leave(std::unordered_map<pid_t, TransactionKey>::iterator thread, DeliveryTime when);
  void enter(const TransactionKey& tk);
  void drop_lightest();
  void forget(std::map<CorrelationKey, Pending>::iterator it);

  PlanOptions options_;
  std::map<CorrelationKey, Pending> pending_;
  std::map<TransactionKey, Transaction> transactions_;  // those with pending keys or followed threads
  std::unordered_map<pid_t, TransactionKey> threads_;
  std::uint64_t pending_samples_ = 0;
  std::map<CorrelationKey, History> history_;
  std::map<TransactionKey, DeliveryTime> last_sample_;  // of every transaction in history_
  bool history_overflow_ = false;
  DeliveryTime horizon_ = DeliveryTime::max();
  PlanStats stats_;
};

// The most samples a sender knowing them all in advance could have had read
// in time: a key (weight: its samples) can be carried by one datagram read at
// any read between its first sample and its due; the agent read at `reads`
// (ascending), each read taking `per_read` datagrams. Exact (greedy by weight
// over a transversal matroid, augmenting paths over the reads' intervals);
// an upper bound on what any sender can do, since a sender that splits a key
// into several datagrams uses more reads for the same samples.
struct BoundJob {
  DeliveryTime first, due;
  std::uint64_t samples;
};
std::uint64_t capacity_bound(const std::vector<BoundJob>& jobs, const std::vector<DeliveryTime>& reads,
                             std::size_t per_read);
// The reads a run had: those seen, and where none was seen for longer than
// 1.5 periods while none of our datagrams was unread (`idle`: a read then
// leaves no trace), one every `period`. A stretch with datagrams unread and no
// read is an agent that did not read: no read is assumed there.
std::vector<DeliveryTime> reads_of_run(const std::vector<DeliveryTime>& seen,
                                       const std::vector<AgentReads::Stretch>& idle, DeliveryTime start,
                                       DeliveryTime end, DeliveryDuration period);

}  // namespace tracecorr::elastic_v1::agent

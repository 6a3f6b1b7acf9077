// The host agent's sends to agents' sockets, on a thread of their own
// (issue 29). The sampling loop hands it samples and socket paths; the thread
// sleeps in epoll on every agent's socket (EPOLLOUT, edge-triggered: a unix
// datagram is charged to its sender until read, so each read by an agent
// wakes it) and acts for one process at a time, at that process's own
// moments: when its agent read (it refills the queue at once, which an agent
// that reads until the queue is empty takes in the same read), when one of its
// transactions settled, when a key must go, when an unread datagram's due
// passed. A rescan of a thousand processes, or a slow sampler poll, delays
// no send.
//
// Spec personality: a DeliveryPlan and an AgentReads per process
// (delivery_plan.hpp). ebpf-profiler personality: what that profiler does,
// one message per sample sent at once and dropped on EAGAIN; its reads are
// watched the same way, so its late and unconfirmed counts are measured too.
#pragma once

#include <sys/types.h>

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "elastic_v1/agent/correlation.hpp"
#include "elastic_v1/agent/delivery_plan.hpp"
#include "tracecorr/fd.hpp"
#include "tracecorr/socket.hpp"

namespace tracecorr::elastic_v1::agent {

class Deliverer {
 public:
  struct Options {
    Personality personality = Personality::Spec;
    std::uint32_t samples_delay_ms = 1000;
    std::string host_id;
    PlanOptions plan;
    std::function<void(const std::string&)> notice;  // from either thread
    // Reader defects (reader_defects.hpp), for conformance kill matrices only:
    bool skip_registration = false;  // no-registration, MSG-01: correlations without the registration first
    bool count_one_more = false;     // wrong-counts, MSG-08: each correlation's count one more than its samples
  };
  // What the summary says of one process's socket.
  struct Figures {
    bool connected = false, registered = false;
    std::uint64_t registrations_sent = 0, registrations_lost = 0;
    std::uint64_t messages_sent = 0, samples_sent = 0;
    std::uint64_t messages_lost = 0, samples_lost = 0;  // ebpf-profiler: EAGAIN; spec: expired + queue_full
    std::uint64_t send_errors = 0, samples_unsendable = 0;
    std::uint64_t samples_late = 0, samples_unconfirmed = 0, samples_pending = 0;
  };
  using Id = std::uint64_t;  // one per process examined (a pid can be reused)
  static constexpr std::size_t kMaxTransactionsListed = 65536;  // in sent(), per process
  static constexpr std::size_t kMaxStacksListed = 1 << 20;        // (transaction, stack) pairs in sent()

  explicit Deliverer(Options options);
  ~Deliverer();
  Deliverer(const Deliverer&) = delete;
  Deliverer& operator=(const Deliverer&) = delete;

  Id open(pid_t pid);  // a process to deliver to (no socket yet)
  // Connects to the socket `path` names in the process's root and, for the
  // spec personality, registers (MSG-01). Replaces any previous socket.
  Status connect(Id id, const std::string& path);
  void disconnect(Id id);         // a re-published storage: talk to it afresh
  bool connected(Id id) const;
  void register_again(Id id);     // spec: a registration the queue refused is retried
  // One correlated sample: planned (spec) or sent now (ebpf-profiler).
  void add(Id id, const CorrelationKey& key, pid_t tid, DeliveryTime when);
  // Thread `tid` was sampled outside any transaction: the one it was in may be complete.
  void left(Id id, pid_t tid, DeliveryTime when);
  void retire(Id id);             // the process exited or exec'd: what is pending is unsendable
  // The end of a run: every pending key is offered and the agents' reads are
  // awaited up to `patience`; what is left then is abandoned. Ends the thread.
  void finish(DeliveryDuration patience);
  // The run will end at `horizon` (a --duration's end + the final patience):
  // the plans place what is pending on the reads before it.
  void ends_at(DeliveryTime horizon);

  Figures figures(Id id) const;
  // Per process: where every correlated sample went and the bound it is held to.
  nlohmann::json delivery_json(Id id) const;
  // How long the sending thread, woken (an agent read, a key's moment), waited
  // for a CPU before it could act (its schedstat): in all, and at once at the
  // worst. A wait longer than an agent's period between reads is a read the
  // thread could not refill for: what the machine, not the plan, kept from it.
  struct CpuWait {
    DeliveryDuration total{}, longest{};
    std::uint64_t wakes = 0;
  };
  CpuWait cpu_wait() const;
  // Per transaction of the process: the counts sent per stack trace id.
  std::map<std::pair<TraceId, SpanId>, std::map<StackTraceId, std::uint64_t>> sent(Id id) const;

  struct Target;  // deliverer.cpp

 private:
  void loop();
  void turn(Target& t, DeliveryTime now);
  void look(Target& t, DeliveryTime now, bool again = false);
  bool send_registration(Target& t, DeliveryTime now);
  bool send_one(Target& t, const Offer& offer, DeliveryTime now);
  void list_sent(Target& t, const Offer& offer);
  void drop_socket(Target& t, const std::string& why);
  void wake();
  void note_cpu_wait(DeliveryDuration waited);
  std::uint64_t charge(std::size_t datagram_length);

  Options options_;
  mutable std::mutex mu_;
  std::condition_variable settled_;  // finish() waits on it
  std::map<Id, std::unique_ptr<Target>> targets_;
  Id next_id_ = 1;
  std::map<std::size_t, std::uint64_t> charges_;  // datagram length -> bytes charged per datagram
  UniqueFd epoll_, wake_;
  bool finishing_ = false, stopping_ = false;
  DeliveryTime finished_at_{};
  DeliveryTime ends_at_ = DeliveryTime::max();
  CpuWait cpu_wait_;
  std::thread thread_;
};

}  // namespace tracecorr::elastic_v1::agent

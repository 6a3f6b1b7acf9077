// The host agent's pure logic: judging a record read from a thread (TLS-08,
// TLS-09), naming a stack (128-bit stack trace id), and aggregating samples
// into correlation messages (MSG-08). No I/O here; see host_agent.hpp.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "tracecorr/ids.hpp"
#include "elastic_v1/wire.hpp"

namespace tracecorr::elastic_v1::agent {

// ---- personalities -----------------------------------------------------------
enum class Personality {
  Spec,          // registration (MSG-01), aggregated counts per flush interval (MSG-08)
  EbpfProfiler,  // what the OTel eBPF profiler does today: no registration, one message per sample
};
const char* to_string(Personality p);  // "spec", "ebpf-profiler"
bool parse_personality(std::string_view text, Personality& out);

// ---- records -------------------------------------------------------------------
enum class RecordVerdict {
  Correlate,    // valid, trace present, non-zero ids
  ValidZero,    // valid == 0: the agent was updating it; ignore everything (TLS-08)
  TraceAbsent,  // trace_present == 0: no trace on the thread; ids ignored (TLS-09)
  BadMinor,     // layout minor version 0 (never valid, TLS-02): nothing can be trusted
  ZeroIds,      // trace present but an all-zero trace or transaction id (not a W3C id)
};
const char* to_string(RecordVerdict v);  // "correlate", "valid_zero", ...

struct JudgedRecord {
  RecordVerdict verdict = RecordVerdict::ValidZero;
  elastic_v1::TlsRecord record;  // decoded fields (meaningful only for Correlate)
};
JudgedRecord judge_record(std::span<const std::uint8_t> bytes);  // Elastic v1 bytes, as its layout reads them

// ---- stack trace ids -------------------------------------------------------------
// XXH3-128 of the frame addresses (little-endian u64 each, innermost first),
// in xxHash's canonical (big-endian) byte order. Same frames, same id.
StackTraceId stack_trace_id(std::span<const std::uint64_t> frames);

// ---- aggregation ----------------------------------------------------------------
struct CorrelationKey {
  TraceId trace_id{};
  SpanId transaction_id{};
  StackTraceId stack_trace_id{};
  auto operator<=>(const CorrelationKey&) const = default;
};

// Messages carrying `count` samples for `key`: ceil(count / 65535) of them,
// since the count field is a u16 (MSG-08). count 0 yields none.
std::vector<elastic_v1::Correlation> correlation_messages(const CorrelationKey& key, std::uint64_t count);

// (trace id, transaction id, stack trace id) -> samples since the last report.
class Aggregator {
 public:
  void add(const CorrelationKey& key, std::uint64_t samples = 1);
  // The pending counts as messages (in key order), leaving the aggregator empty.
  std::vector<elastic_v1::Correlation> drain();
  bool empty() const { return counts_.empty(); }
  std::size_t keys() const { return counts_.size(); }
  std::uint64_t pending_samples() const { return pending_; }

 private:
  std::map<CorrelationKey, std::uint64_t> counts_;
  std::uint64_t pending_ = 0;
};

// ---- delivery ------------------------------------------------------------------
// The spec personality's bounded user-space queue between the aggregator and
// the agent's socket. The agent's kernel queue holds only
// net.unix.max_dgram_qlen datagrams and is drained when the agent polls (EDOT
// Java: every 20 ms), so a flush interval's messages cannot all be sent at
// once: they wait here until the socket accepts (POLLOUT), the fullest
// messages first, and are dropped only when they could no longer arrive in
// time: past `due`, the transaction's last sample + samples-delay-ms, the
// earliest moment the agent may export it.
struct DeliveryCounts {
  std::uint64_t messages = 0, samples = 0;
  void add(std::uint64_t n) {
    ++messages;
    samples += n;
  }
};

struct DeliveryStats {
  DeliveryCounts delivered;      // sent before due
  DeliveryCounts late;           // of delivered: waited longer than a flush interval for the socket
  DeliveryCounts expired;        // dropped: the socket did not accept them before due
  DeliveryCounts queue_full;     // dropped: the bounded queue was full (the least-count message goes)
  DeliveryCounts unsendable;     // dropped: no socket, the send was refused, or the process exited
};

class DeliveryQueue {
 public:
  using Clock = std::chrono::steady_clock;
  struct Entry {
    CorrelationKey key;
    std::uint16_t count = 0;
    Clock::time_point queued;  // when the first of its samples entered the queue
    Clock::time_point due;
  };

  explicit DeliveryQueue(std::size_t capacity) : capacity_(capacity == 0 ? 1 : capacity) {}

  // Queues `count` samples of `key`. A queued message of the same key takes
  // them (up to the u16 count field; due becomes the later one). When the
  // queue is full, the message with the fewest samples is dropped.
  void add(const CorrelationKey& key, std::uint64_t count, Clock::time_point now, Clock::time_point due);
  // Drops every message past due.
  void expire(Clock::time_point now);
  // The message to send next (the most samples, then the earliest due), or nullopt.
  std::optional<Entry> front() const;
  // The front message was sent at `now`; `late_after`: longer than this in the queue counts as late.
  void sent(Clock::time_point now, std::chrono::milliseconds late_after);
  // The front message cannot be sent (no socket, refused): dropped as unsendable.
  void unsendable();
  // Drops everything as unsendable (the process exited).
  void abandon();

  bool empty() const { return entries_.empty(); }
  std::size_t size() const { return entries_.size(); }
  std::uint64_t queued_samples() const;
  const DeliveryStats& stats() const { return stats_; }

 private:
  using Order = std::pair<int, Clock::time_point>;  // (-count, due): std::map's first is the front
  void erase(std::map<std::pair<Order, CorrelationKey>, Entry>::iterator it);

  std::size_t capacity_;
  std::map<std::pair<Order, CorrelationKey>, Entry> entries_;
  std::map<CorrelationKey, std::pair<Order, CorrelationKey>> by_key_;
  DeliveryStats stats_;
};

}  // namespace tracecorr::elastic_v1::agent

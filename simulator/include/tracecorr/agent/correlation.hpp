// The host agent's pure logic: judging a record read from a thread (TLS-08,
// TLS-09), naming a stack (128-bit stack trace id), and aggregating samples
// into correlation messages (MSG-08). No I/O here; see host_agent.hpp.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "tracecorr/ids.hpp"
#include "tracecorr/wire.hpp"

namespace tracecorr::agent {

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
  wire::TlsRecord record;  // decoded fields (meaningful only for Correlate)
};
JudgedRecord judge_record(const wire::TlsRecordBytes& bytes);

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
std::vector<wire::Correlation> correlation_messages(const CorrelationKey& key, std::uint64_t count);

// (trace id, transaction id, stack trace id) -> samples since the last report.
class Aggregator {
 public:
  void add(const CorrelationKey& key, std::uint64_t samples = 1);
  // The pending counts as messages (in key order), leaving the aggregator empty.
  std::vector<wire::Correlation> drain();
  bool empty() const { return counts_.empty(); }
  std::size_t keys() const { return counts_.size(); }
  std::uint64_t pending_samples() const { return pending_; }

 private:
  std::map<CorrelationKey, std::uint64_t> counts_;
  std::uint64_t pending_ = 0;
};

}  // namespace tracecorr::agent

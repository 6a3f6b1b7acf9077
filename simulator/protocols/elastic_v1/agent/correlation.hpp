// The host agent's pure logic: judging a record read from a thread (TLS-08,
// TLS-09), naming a stack (128-bit stack trace id), and aggregating samples
// into correlation messages (MSG-08). No I/O here; see host_agent.hpp.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "tracecorr/ids.hpp"
#include "tracecorr/sampled_protocol.hpp"
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
// How the host agent applies the reader rules to a record. The default is
// the conforming reader; each field set is one reader defect
// (reader_defects.hpp: `tracecorr agent --reader-defect`, for conformance
// kill matrices), set only by the host agent's part.
struct RecordPolicy {
  bool ignore_valid = false;          // ignores-valid, TLS-08: valid 0 read as if 1
  bool ignore_trace_present = false;  // ignores-trace-present, TLS-09: trace_present 0 still gives its ids
};
// Elastic v1 bytes, as its layout reads them.
JudgedRecord judge_record(std::span<const std::uint8_t> bytes, const RecordPolicy& policy = {});
// The record as an exported observation's context (the host agent's OTLP
// profiles): a link (trace id, the active span's id) and the trace flags
// when the record is one to correlate and names a span; otherwise none.
// Elastic's record names no attributes.
RecordContext record_context(std::span<const std::uint8_t> bytes, const RecordPolicy& policy = {});

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

// Delivery of these messages to an agent's socket: delivery_plan.hpp.

}  // namespace tracecorr::elastic_v1::agent

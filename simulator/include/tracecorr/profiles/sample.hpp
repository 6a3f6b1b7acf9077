// A profiler's output as the judges read it, whatever carried it: OTLP
// profiles over gRPC or HTTP (decode.hpp), or JSON lines (json_lines.hpp).
//
// One ProfileSample is one observation: a thread seen at one time. OTLP
// aggregates (one Sample with many `timestamps_unix_nano`, or one value and no
// timestamp); the decoder unfolds that into one ProfileSample per timestamp, so
// a judge never cares how the exporter batched. What several observations of
// one OTLP Sample share (its attributes, stack, resource, profile) is shared,
// not copied: 100 000 samples of a few threads cost their fixed fields only.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tracecorr/ids.hpp"
#include "tracecorr/otlp.hpp"

namespace tracecorr::profiles {

// What carried a sample to tracecorr.
enum class Source { OtlpGrpc, OtlpHttp, JsonLines };
inline constexpr std::size_t kSourceCount = 3;
std::string_view to_string(Source source);  // "otlp-grpc", "otlp-http", "json-lines"

// The clock a sample's time is read on. OTLP's is always Unix; a JSON-lines
// adapter may give CLOCK_MONOTONIC (what eBPF's bpf_ktime_get_ns reads).
enum class Clock { Unix, Monotonic };
std::string_view to_string(Clock clock);  // "unix", "monotonic"

struct SampleTime {
  std::uint64_t nanos = 0;
  Clock clock = Clock::Unix;
  bool operator==(const SampleTime&) const = default;
};

// The span a sample was linked to: OTLP's Link (trace id, span id), or a
// JSON line's trace_id and span_id. Kept as sent, all-zero ids included (a
// reader that reports a zero context is evidence too).
struct SampleLink {
  TraceId trace_id{};
  SpanId span_id{};
  bool operator==(const SampleLink&) const = default;
};

// What the profile a sample came in says of all its samples (OTLP's Profile
// and its scope; a JSON-lines source has none of it).
struct ProfileInfo {
  std::string sample_type;  // "samples", "events", ...
  std::string sample_unit;  // "count", "nanoseconds", ...
  std::string period_type;
  std::string period_unit;
  std::int64_t period = 0;
  std::uint64_t time_unix_nano = 0;  // the profile's start
  std::uint64_t duration_nano = 0;
  std::string scope_name;
  std::string scope_version;
  bool operator==(const ProfileInfo&) const = default;
};

// Instruction addresses (OTLP Location.address), leaf first.
using Stack = std::vector<std::uint64_t>;

struct ProfileSample {
  // nullopt: an aggregated value that carried no timestamp (OTLP `values`
  // without `timestamps_unix_nano`): only the profile's time range places it.
  std::optional<SampleTime> time;
  std::int64_t value = 1;  // the observation's value; 1 when the export gave timestamps only
  std::optional<std::int64_t> pid;  // `process.pid`: the sample's attribute, else its resource's
  std::optional<std::int64_t> tid;  // `thread.id` (a sample attribute)
  std::optional<SampleLink> link;   // nullopt: no link (OTLP link_index 0)
  std::optional<std::uint8_t> trace_flags;  // W3C trace flags; JSON lines only (OTLP's Link has none)
  // The sample's attributes by name, `thread.id` and `process.pid` included;
  // its resource's; its stack (null: none sent); its profile. Null
  // attributes or resource mean none.
  std::shared_ptr<const otlp::Attributes> attributes;
  std::shared_ptr<const otlp::Attributes> resource;
  std::shared_ptr<const Stack> stack;
  std::shared_ptr<const ProfileInfo> profile;
  // Arrival: filled by the store (store.hpp) from the export that carried it.
  Source source = Source::OtlpGrpc;
  std::size_t export_index = 0;
  std::chrono::steady_clock::time_point received_at{};
  std::chrono::system_clock::time_point received_at_system{};

  bool has_stack() const { return stack && !stack->empty(); }
  const otlp::AttributeValue* attribute(std::string_view key) const;
  const otlp::AttributeValue* resource_attribute(std::string_view key) const;
};

// Whether two samples say the same about the profiled thread: time, value,
// pid, tid, link, flags, attributes, resource, stack and profile compared by
// value (shared or not), arrival ignored. What a round trip must keep.
bool same_observation(const ProfileSample& a, const ProfileSample& b);

// The semantic-convention names the decoders read pid and tid from.
inline constexpr char kProcessPid[] = "process.pid";
inline constexpr char kThreadId[] = "thread.id";

}  // namespace tracecorr::profiles

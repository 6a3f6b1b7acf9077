// What records read from a writer are judged against: the spans it exported
// to the session's receiver, found by their ids, and the clock that puts a
// read (taken on CLOCK_MONOTONIC) among the spans' start and end times (the
// writer's CLOCK_REALTIME, unix ns). Shared by every protocol whose records
// name spans.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tracecorr/ids.hpp"
#include "tracecorr/otlp.hpp"

namespace tracecorr::conform {

// The spans the writer exported, by their ids (the last export of an id wins).
class ExportedSpans {
 public:
  explicit ExportedSpans(const std::vector<otlp::ReceivedSpan>& spans);
  const otlp::ReceivedSpan* find(const TraceId& trace, const SpanId& span) const;
  // OTLP's flags field is optional: exporters that predate it send none,
  // which reads as 0 on every span. Some span carrying a bit says it is sent.
  bool carry_flags() const { return carry_flags_; }

 private:
  std::map<std::pair<TraceId, SpanId>, const otlp::ReceivedSpan*> by_ids_;
  bool carry_flags_ = false;
};

// CLOCK_REALTIME minus CLOCK_MONOTONIC as tracecorr measured it when its reads
// began and when they ended, and how far the two together can be from the
// truth (tracecorr::wall_minus_monotonic). A read's time on the spans' clock
// is its monotonic time plus `at_start_ns`; the two offsets differ only when
// the wall clock was stepped meanwhile (NTP slews both clocks alike).
struct ReadClock {
  std::int64_t at_start_ns = 0;
  std::int64_t at_end_ns = 0;
  std::int64_t uncertainty_ns = 0;
  std::int64_t unix_ns(std::uint64_t monotonic_ns) const { return static_cast<std::int64_t>(monotonic_ns) + at_start_ns; }
};

// Why reads cannot be placed among exported times within `tolerated_ns`: the
// wall clock could not be placed on the monotonic one that closely, or it was
// stepped while the reads ran. nullopt: they can.
std::optional<std::string> incomparable(const ReadClock& clock, std::int64_t tolerated_ns);

}  // namespace tracecorr::conform

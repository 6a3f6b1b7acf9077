#include "tracecorr/conform/exported_spans.hpp"

#include <cstdlib>

namespace tracecorr::conform {

ExportedSpans::ExportedSpans(const std::vector<otlp::ReceivedSpan>& spans) {
  for (const auto& s : spans) {
    by_ids_[{s.trace_id, s.span_id}] = &s;
    carry_flags_ = carry_flags_ || s.flags != 0;
  }
}

const otlp::ReceivedSpan* ExportedSpans::find(const TraceId& trace, const SpanId& span) const {
  auto it = by_ids_.find({trace, span});
  return it == by_ids_.end() ? nullptr : it->second;
}

std::optional<std::string> incomparable(const ReadClock& clock, std::int64_t tolerated_ns) {
  auto ms = [](std::int64_t ns) { return std::to_string(ns / 1000000) + " ms"; };
  if (clock.uncertainty_ns > tolerated_ns)
    return "the wall clock could not be placed on the monotonic one within " + ms(tolerated_ns) +
           " (tracecorr's clock reads were " + ms(clock.uncertainty_ns) +
           " apart at best): read times and exported times are not comparable";
  const std::int64_t step = clock.at_end_ns - clock.at_start_ns;
  if (std::llabs(step) > tolerated_ns + clock.uncertainty_ns)
    return "the wall clock was stepped by " + ms(step) + " while the threads were read: read times and exported times "
           "are not comparable";
  return std::nullopt;
}

}  // namespace tracecorr::conform

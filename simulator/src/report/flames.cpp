#include "tracecorr/report/flames.hpp"

#include <algorithm>
#include <map>

#include "tracecorr/ids.hpp"

namespace tracecorr::report {

using namespace tracecorr::conform;

std::optional<std::pair<TraceId, SpanId>> context_of(const Sample& r, const watch::ActiveTraceOf& active_trace) {
  if (r.error != SampleError::Ok || !r.record || !active_trace) return std::nullopt;
  auto trace = active_trace(*r.record);
  if (!trace) return std::nullopt;
  return std::make_pair(trace->trace_id, trace->context_id);
}

StackSample stack_sample_of(const Sample& r, Symbolizer& symbols, const watch::ActiveTraceOf& active_trace) {
  StackSample sample;
  sample.tid = r.tid;
  sample.time_ns = r.time_ns;
  sample.context = context_of(r, active_trace);
  // Frames past the first are return addresses: named by the call before them.
  for (std::size_t i = 0; i < r.frames.size(); ++i) sample.frames.push_back(symbols.name(r.frames[i], i > 0));
  return sample;
}

StacksFigure stacks_figure_of(const StackSamples& samples, StacksCaption caption) {
  StacksFigure out;
  out.caption = std::move(caption);
  out.source = samples.source;
  out.samples = samples.samples.size();
  std::map<std::pair<TraceId, SpanId>, std::map<std::vector<std::string>, std::uint64_t>> by_context;
  for (const auto& sample : samples.samples) {
    if (!sample.context) {
      ++out.samples_without_context;
      continue;
    }
    std::vector<std::string> outermost_first(sample.frames.rbegin(), sample.frames.rend());
    ++by_context[*sample.context][outermost_first];
  }
  out.contexts_total = by_context.size();
  for (const auto& [key, stacks] : by_context) {
    ContextStacks t;
    t.trace_id = to_hex(key.first);
    t.context_id = to_hex(key.second);
    for (const auto& [frames, count] : stacks) {
      t.samples += count;
      t.stacks.push_back({frames, count});
    }
    std::stable_sort(t.stacks.begin(), t.stacks.end(), [](const auto& a, const auto& b) { return a.count > b.count; });
    if (t.stacks.size() > kMaxStacksPerContext) t.stacks.resize(kMaxStacksPerContext);
    out.contexts.push_back(std::move(t));
  }
  std::stable_sort(out.contexts.begin(), out.contexts.end(),
                   [](const auto& a, const auto& b) { return a.samples > b.samples; });
  if (out.contexts.size() > kMaxStackContexts) out.contexts.resize(kMaxStackContexts);
  return out;
}

}  // namespace tracecorr::report

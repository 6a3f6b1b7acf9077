// Stack samples -> the HTML report's flame graphs. Shared by the conform run
// (samples a suite's scenario took, e.g. probes/elastic_v1/scenarios.cpp) and
// `tracecorr agent --html` (the host agent's own samples).
#pragma once

#include "tracecorr/conform/figures.hpp"
#include "tracecorr/conform/session.hpp"
#include "tracecorr/sampler.hpp"
#include "tracecorr/symbols.hpp"

namespace tracecorr::report {

// The context (trace id, context id) a sample's record named, if any:
// `active_trace` (the protocol's) reads it from the record's bytes.
std::optional<std::pair<TraceId, SpanId>> context_of(const Sample& sample, const watch::ActiveTraceOf& active_trace);

// A sample with its frames named and the context its record named, if
// any. Needs the sampled process alive (its maps).
conform::StackSample stack_sample_of(const Sample& sample, Symbolizer& symbols, const watch::ActiveTraceOf& active_trace);

// Groups samples by context (outermost frame first), keeps the
// kMaxStackContexts with the most samples, each bounded; `caption` is the
// package's (its word for a context).
conform::StacksFigure stacks_figure_of(const conform::StackSamples& samples, conform::StacksCaption caption = {});

}  // namespace tracecorr::report

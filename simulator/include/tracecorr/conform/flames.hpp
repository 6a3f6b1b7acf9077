// Stack samples -> the HTML report's flame graphs. Shared by the conform run
// (samples taken in the enabled session, probes/scenarios.cpp) and
// `tracecorr agent --html` (the host agent's own samples).
#pragma once

#include "tracecorr/conform/figures.hpp"
#include "tracecorr/conform/session.hpp"
#include "tracecorr/sampler.hpp"
#include "tracecorr/symbols.hpp"

namespace tracecorr::conform {

// The transaction a sample's record held (valid and trace present), if any.
std::optional<std::pair<TraceId, SpanId>> transaction_of(const Sample& sample);

// A sample with its frames named and the transaction its record held (valid
// and trace present), if any. Needs the sampled process alive (its maps).
StackSample stack_sample_of(const Sample& sample, Symbolizer& symbols);

// Groups samples by transaction (outermost frame first), keeps the
// kMaxFlameTransactions with the most samples, each bounded.
FlameGraphs flame_graphs_of(const StackSamples& samples);

}  // namespace tracecorr::conform

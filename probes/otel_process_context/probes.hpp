// The OTEP 4719 suite's probes and the suite itself (suite.cpp).
#pragma once

#include <memory>
#include <vector>

#include "tracecorr/conform/suite.hpp"

namespace tracecorr::otel_process_context {

// mapping (one look at the context: PCTX-01..06, 12, 15..18), seqlock
// (07..10), naming (13, 14), fork (11).
std::vector<std::unique_ptr<conform::Probe>> make_probes();
const conform::Suite& suite();

}  // namespace tracecorr::otel_process_context

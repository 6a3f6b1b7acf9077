// The OTEP 4947 suite's probes and the suite itself (suite.cpp).
#pragma once

#include <memory>
#include <vector>

#include "tracecorr/conform/suite.hpp"

namespace tracecorr::otel_thread_context {

// variable (TCTX-01..05), reference data (06..10), record (11..20),
// publication (21..28).
std::vector<std::unique_ptr<conform::Probe>> make_probes();
const conform::Suite& suite();

}  // namespace tracecorr::otel_thread_context

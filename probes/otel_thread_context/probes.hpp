// The OTEP 4947 suite's probes, one file per area with its judges beside it
// (<area>_probe.cpp), the catalogue (probes.cpp) and the suite itself
// (suite.cpp).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "evidence.hpp"
#include "tracecorr/conform/suite.hpp"

namespace tracecorr::otel_thread_context {

// A probe over one session's facts (the engine's: not applicable, every
// requirement, when that session did not run).
using SessionProbe = conform::SessionFactsProbe<ThreadContextFacts>;

// "TCTX-<first>" .. "TCTX-<last>", leaving out `except` (0: none).
std::vector<std::string> requirement_range(int first, int last, int except = 0);

// One factory per area: variable (TCTX-01..05), reference data (06..10),
// record (11..20), detach (27), publication (21..26, 28).
std::unique_ptr<conform::Probe> make_variable_probe();
std::unique_ptr<conform::Probe> make_reference_probe();
std::unique_ptr<conform::Probe> make_record_probe();
std::unique_ptr<conform::Probe> make_detach_probe();
std::unique_ptr<conform::Probe> make_publication_probe();

std::vector<std::unique_ptr<conform::Probe>> make_probes();
const conform::Suite& suite();

}  // namespace tracecorr::otel_thread_context

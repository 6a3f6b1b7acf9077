// The OTEP 4719 suite's probes, one file per area with its judges beside it
// (<area>_probe.cpp), the catalogue and what the probes share (probes.cpp),
// and the suite itself (suite.cpp).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "evidence.hpp"
#include "tracecorr/conform/suite.hpp"

namespace tracecorr::otel_process_context {

// One factory per area: mapping (one look at the context: PCTX-01..06, 12,
// 15..18), seqlock (07..10), naming (13, 14), fork (11).
std::unique_ptr<conform::Probe> make_mapping_probe();
std::unique_ptr<conform::Probe> make_seqlock_probe();
std::unique_ptr<conform::Probe> make_naming_probe();
std::unique_ptr<conform::Probe> make_fork_probe();

std::vector<std::unique_ptr<conform::Probe>> make_probes();
const conform::Suite& suite();

// The facts of every session of this suite that ran (watched, then read).
std::vector<const ContextFacts*> sessions_run(const conform::SessionSet& sessions);
// Each requirement not applicable: it needs the watched session (attach mode runs none).
std::vector<Finding> needs_watched_session(const std::vector<std::string>& ids);
// Each requirement not applicable: no session of the suite ran.
std::vector<Finding> none_ran(const std::vector<std::string>& ids);

}  // namespace tracecorr::otel_process_context

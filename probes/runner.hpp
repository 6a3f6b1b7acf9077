// The conformance run: opens the sessions the selected requirements need,
// runs their scenarios, lets the probes judge, and builds the result model.
#pragma once

#include <cstdio>
#include <string>
#include <vector>

#include "scenarios.hpp"
#include "tracecorr/conform/result.hpp"
#include "tracecorr/conform/session.hpp"

namespace tracecorr::conform {

struct RunOptions {
  TargetSpec target;
  std::vector<std::string> only;  // requirement ids or areas ("ELF"); empty: every agent requirement
  bool strict = false;
  ScenarioOptions scenario;
  std::string personality = "spec";
  std::FILE* progress = stderr;   // one line per session; nullptr: quiet
};

// The agent-role requirements the run judges (profiler-role ones are
// tracecorr agent's, tested by its own tests), filtered by `only`.
std::vector<std::string> selected_requirements(const std::vector<std::string>& only);
// `only` with each area name ("ELF", "TLS") replaced by the ids in that area.
std::vector<std::string> expand_areas(const std::vector<std::string>& only);

// Errors are usage errors (an unknown id, a filter matching nothing); the
// environment failing (cannot launch) is recorded as Error verdicts.
Expected<RunResult> run_conformance(const RunOptions& options);

}  // namespace tracecorr::conform

// The conformance run: opens the sessions the selected requirements need,
// runs the protocol suite's scenarios, lets its probes judge, and builds the
// result model. Protocol-neutral: what a protocol adds comes through its
// Suite (suite.hpp).
#pragma once

#include <cstdio>
#include <string>
#include <vector>

#include "tracecorr/conform/result.hpp"
#include "tracecorr/conform/session.hpp"
#include "tracecorr/conform/suite.hpp"

namespace tracecorr::conform {

struct RunOptions {
  TargetSpec target;
  // The protocol judged (ProtocolSpec::id); empty: the only registered one.
  std::string protocol;
  std::vector<std::string> only;  // requirement ids or areas ("ELF"); empty: every agent requirement
  bool strict = false;
  ScenarioOptions scenario;
  std::FILE* progress = stderr;   // one line per session; nullptr: quiet
  // Sessions run at once (each its own target, receiver and socket directory);
  // 0: two per CPU (one at a time when the load average is already at the
  // CPU count), at most one per session. Results and reports keep the
  // suite's session order whatever finishes first.
  unsigned jobs = 0;
};

// The suite `protocol` names (empty: the only one); an error names the choices.
Expected<const Suite*> choose_suite(const std::string& protocol);

// `--protocol auto`: the suite whose protocol the target publishes. An
// attached process is asked directly; a command is launched once (its whole
// process tree, stopped as a group afterwards) and watched until a process
// publishes or `target.discovery_timeout` passes. With --gdbstub (a qemu-user
// guest held for its debugger) nothing is launched: only a suite that reads
// thread pointers can use it. `why` says how the choice was made.
// Requirements or areas in `only` choose their suite without a launch.
// Errors are kNotFound: the target published nothing tracecorr knows.
Expected<const Suite*> detect_suite(const TargetSpec& target, const std::vector<std::string>& only, std::string& why);

// The agent-role requirements of `suite` the run judges (profiler-role ones
// are tracecorr agent's, tested by its own tests), filtered by `only`.
std::vector<std::string> selected_requirements(const Suite& suite, const std::vector<std::string>& only);
// `only` with each area name ("ELF", "TLS") replaced by the ids in that area.
std::vector<std::string> expand_areas(const Suite& suite, const std::vector<std::string>& only);

// Of options.scenario.settings the run keeps the suite's own options; those
// not given take their defaults.
// Errors are usage errors (an unknown id, a filter matching nothing, a
// setting the suite refuses); the environment failing (cannot launch) is
// recorded as Error verdicts.
Expected<RunResult> run_conformance(const RunOptions& options);

}  // namespace tracecorr::conform

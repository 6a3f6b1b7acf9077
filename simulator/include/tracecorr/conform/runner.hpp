// The conformance run: chooses the protocols to judge (named, or every one
// the target publishes), opens the sessions the selected requirements need,
// runs each suite's scenarios, lets its probes judge, and builds the result
// model with a section per protocol. Protocol-neutral: what a protocol adds
// comes through its Suite (suite.hpp).
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
  // The protocols judged: "" or "auto" (every one the target publishes), one
  // ProtocolSpec::id, or several joined by "," ("elastic-v1,otel-process-context").
  std::string protocol;
  std::vector<std::string> only;  // requirement ids or areas ("AREA"); empty: every agent requirement
  bool strict = false;
  ScenarioOptions scenario;
  std::FILE* progress = stderr;   // one line per session; nullptr: quiet
  // Sessions run at once (each its own target, receiver and socket directory);
  // 0: two per CPU (one at a time when the load average is already at the
  // CPU count), at most one per session. Results and reports keep the
  // suites' session order whatever finishes first.
  unsigned jobs = 0;
};

// The suite `protocol` names (empty: the only one); an error names the choices.
Expected<const Suite*> choose_suite(const std::string& protocol);

// A protocol `--protocol auto` found the target publishing.
struct DetectedProtocol {
  const Suite* suite = nullptr;
  std::string chosen_by;       // "a trial launch: pid 42 publishes it"
  std::string not_applicable;  // published under a schema or layout the suite does not read: what was seen
};

// `--protocol auto`: every protocol the target publishes. An attached process
// is asked directly; a command is launched once (its whole process tree,
// stopped as a group afterwards) and watched until a process publishes one
// or `target.discovery_timeout` passes, then until the tree has run
// kMoreProtocolsCpu more (between kMoreProtocolsWall's bounds) for the others;
// `note` says how long and what was not seen. With --gdbstub (a qemu-user
// guest held for its debugger) nothing is launched: only a suite that reads
// thread pointers can use it. Errors are kNotFound: the target published
// nothing tracecorr knows.
Expected<std::vector<DetectedProtocol>> detect_protocols(const TargetSpec& target, std::string& note);

// The agent-role requirements of `suite` the run judges (profiler-role ones
// are tracecorr agent's, tested by its own tests), filtered by `only`.
std::vector<std::string> selected_requirements(const Suite& suite, const std::vector<std::string>& only);
// `only` with each area name ("AREA") replaced by the ids in that area.
std::vector<std::string> expand_areas(const Suite& suite, const std::vector<std::string>& only);

// Every protocol chosen (named, owning an --only token, or detected) is
// judged in one run: the sessions of every suite overlap, and the result has
// a section per protocol (RunResult::protocols). Of options.scenario.settings
// each suite keeps its own options; those not given take their defaults.
// Errors are usage errors (an unknown id or protocol, a filter matching
// nothing, a setting a suite refuses) or kNotFound (auto found nothing); the
// environment failing (cannot launch) is recorded as Error verdicts.
Expected<RunResult> run_conformance(const RunOptions& options);

}  // namespace tracecorr::conform

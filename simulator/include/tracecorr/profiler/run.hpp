// The profiler-mode run (`tracecorr conform --profiler`): intake up, stage
// launched, profiler launched (or found), samples awaited, everything
// stopped in the order that keeps the journals covering every sample, then
// each reader suite's probes judge. The result is the writer side's model
// (result.hpp), so every report format and the gate work unchanged.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "tracecorr/profiler/reader_suite.hpp"
#include "tracecorr/conform/result.hpp"

namespace tracecorr::profiler {

struct ProfilerRunOptions {
  // Launch mode: the profiler's command (it gets OTEL_EXPORTER_OTLP_* naming
  // tracecorr's receiver); attach mode: its pid. One of the two.
  std::vector<std::string> command;
  std::optional<pid_t> profiler_pid;
  std::string otlp_protocol = "http/protobuf";  // or "grpc": what the launched profiler is told
  // Fixed ports for a profiler started by hand (0: ephemeral).
  std::uint16_t grpc_port = 0;
  std::uint16_t http_port = 0;
  std::string json_lines;  // a file, FIFO or "-" the profiler's adapter writes samples to ("": none)
  std::vector<std::string> protocols;  // ProtocolSpec ids; empty: every reader suite
  std::vector<std::string> only;       // requirement ids or areas; empty: every profiler requirement
  bool strict = false;
  StageOptions stage;
  // The stage's writers' niceness (setpriority before their exec), when
  // positive: on a machine whose CPUs they fill (an emulated one), the
  // intake and the profiler keep up (the arm64 guest's intake, starved by
  // eighteen busy writers, let every export of the profiler time out).
  int stage_nice = 0;
  // The stage ends once every member has `samples_per_member` samples
  // taken in (with their exports), or after `max_stage` (then what was
  // judged below its minimum is inconclusive, with the figures).
  std::size_t samples_per_member = 40;
  // ...and not before the profiler has watched it this long since its first
  // sample arrived: several of every member's hazard cycles (a key appended
  // late recurs; a reader that never refreshes meets one after it started).
  std::chrono::milliseconds min_observed{6'000};
  std::chrono::milliseconds max_stage{45'000};
  std::chrono::milliseconds tolerance{20};
  // After SIGTERM, how long the profiler may take to flush and exit.
  std::chrono::milliseconds flush_grace{6'000};
  std::FILE* progress = stderr;
};

// Errors are usage errors (an unknown protocol or id, no command and no
// pid); what fails while running becomes Error verdicts and notes.
Expected<conform::RunResult> run_profiler_conformance(const ProfilerRunOptions& options);

// Judges collected evidence (what run_profiler_conformance does after the
// stage; tests hand-build the evidence): one result per selected
// requirement, in registry order.
std::vector<conform::RequirementResult> judge_readers(const ReaderEvidence& evidence, const std::vector<const ReaderSuite*>& suites,
                                             const std::vector<std::string>& only, bool strict);
// Each member's samples (MemberEvidence::samples) from the evidence's, by
// pid, afresh: what the run does before judging, and hand-built tests too.
void attach_samples(ReaderEvidence& evidence);

}  // namespace tracecorr::profiler

// The conformance result model: one RequirementResult per requirement judged,
// gathered in a RunResult that every report (console, JUnit, JSON) renders.
//
// Verdicts follow the requirement's level: a failed MUST is a Fail; a failed
// SHOULD is a Warn unless the run is strict; a failed MAY is always a Warn (it
// is optional by definition). Error means the kit or the environment failed,
// not the target.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tracecorr/conform/figures.hpp"
#include "tracecorr/error.hpp"
#include "tracecorr/finding.hpp"
#include "tracecorr/exit_code.hpp"
#include "tracecorr/protocol.hpp"

namespace tracecorr::conform {

inline constexpr std::string_view kReportSchema = "tracecorr-report/1";
// The kit's version, as every report names it.
inline constexpr std::string_view kToolVersion = "tracecorr " TRACECORR_VERSION;

enum class Verdict { Pass, Fail, Warn, Skip, Error };
std::string_view to_string(Verdict verdict);  // "pass", "fail", "warn", "skip", "error"


// What applying the expectations file did to a result.
enum class ExpectationStatus {
  None,              // not listed
  ExpectedFailure,   // XFAIL: listed and still failing; does not fail the gate
  UnexpectedPass,    // XPASS: listed but passes now; a stale entry fails the gate
  NotEvaluated,      // listed, but skipped or errored: nothing to conclude
};
std::string_view to_string(ExpectationStatus status);  // "", "xfail", "xpass", "not-evaluated"

struct RequirementResult {
  std::string id;  // "ATTR-02"
  Level level = Level::Must;
  Role role = Role::Agent;
  std::string role_name;  // the registry's word for it ("agent", "writer"); "" when unknown
  std::string words;   // the registry's summary of the requirement
  std::string area;    // "ATTR"
  std::string source;  // section of the reference it comes from
  Verdict verdict = Verdict::Skip;
  std::string reason;  // one line: why this verdict
  std::vector<Evidence> evidence;
  // What a pass rests on: how many observations the probe judged (spans,
  // messages, record reads, facts examined) and the least a pass needs (the
  // probe's declaration). enforce_evidence_minimum() turns a pass below it
  // into an inconclusive Error that states both numbers.
  std::size_t evidence_count = 0;
  std::size_t evidence_minimum = 1;
  std::string probe;  // the probe that judged it
  std::chrono::nanoseconds duration{0};
  std::string repeat_command;  // one shell line that re-runs just this requirement
  ExpectationStatus expectation = ExpectationStatus::None;
  std::string expectation_reason;  // from the expectations file
};

// A RequirementResult filled from the registry (level, words, area, source,
// role); an unknown id is an Error.
Expected<RequirementResult> make_result(std::string_view id);
// The ids that are not in the registry, in the order given (empty: all known).
// The CLI turns a non-empty answer into a usage error (exit 2).
std::vector<std::string> validate_ids(const std::vector<std::string>& ids);

// The verdict for a requirement that was (not) met, given its level.
Verdict judge(Level level, bool met, bool strict);
// No pass without evidence: a Pass whose evidence_count is below its
// evidence_minimum becomes an Error ("inconclusive: ..."), naming the count.
void enforce_evidence_minimum(RequirementResult& result);
// Re-levels a result whose probe said Fail: SHOULD -> Warn (unless strict), MAY -> Warn.
void apply_level(RequirementResult& result, bool strict);

struct ExpectationOutcome {
  std::string id;
  std::string reason;
  ExpectationStatus status = ExpectationStatus::NotEvaluated;
};

struct TargetDescription {
  std::string description;  // "java -jar app.jar" or "pid 4242"
  std::optional<std::int64_t> pid;
  std::string arch;  // "x86_64", "aarch64"
};

struct RunResult {
  std::string tool_version;
  std::string schema_version = std::string(kReportSchema);
  TargetDescription target;
  std::string protocol;     // the protocol judged (ProtocolSpec::id, "elastic-v1")
  std::string personality;  // which agent behaviour was assumed ("java", "generic", ...)
  bool strict = false;
  std::chrono::system_clock::time_point started{};
  std::chrono::system_clock::time_point finished{};
  std::vector<RequirementResult> results;
  std::vector<ExpectationOutcome> expectations;
  std::map<std::string, std::uint64_t> counters;  // "messages_sent", "spans_received", ...
  Figures figures;  // what the HTML report draws (figures.hpp)
  // What the user should know that is no verdict: which process of the
  // launched tree was judged and why, the agent's socket capacity, settings
  // advice. One line each.
  std::vector<std::string> notes;
};

struct Summary {
  std::size_t passed = 0, failed = 0, warnings = 0, skipped = 0, errors = 0;
  std::size_t expected_failures = 0;  // XFAIL: failed, but listed in the expectations file
  std::size_t stale_expectations = 0; // XPASS
};
Summary summarize(const RunResult& run);
// "12 passed, 1 failed, 2 warnings, 3 skipped, 0 errors" (+ ", 1 expected failures, 1 stale expectations" when any).
std::string summary_line(const Summary& summary);

// The gate. Strict also fails on SHOULD warnings; MAY warnings never fail it.
int exit_code(const RunResult& run, bool strict);
// Whether this result fails the gate (XFAIL does not, XPASS does).
bool fails_gate(const RequirementResult& result, bool strict);

// Quotes one argument for a POSIX shell (for repeat commands).
std::string shell_quote(std::string_view argument);
std::string shell_join(const std::vector<std::string>& argv);

// Results in registry order (area, then id), the order every report uses.
std::vector<const RequirementResult*> in_registry_order(const RunResult& run);
// Areas in registry order with their description: {"ELF", "native library: ..."}.
std::vector<std::pair<std::string, std::string>> registry_areas();

// RFC 3339 UTC with milliseconds: "2024-05-01T12:00:00.123Z".
std::string format_utc(std::chrono::system_clock::time_point when);

}  // namespace tracecorr::conform

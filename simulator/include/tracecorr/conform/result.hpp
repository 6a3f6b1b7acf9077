// The conformance result model: one RequirementResult per requirement judged,
// gathered in a RunResult that every report (console, JUnit, JSON, HTML)
// renders. A run judges one protocol or several (ProtocolRun: one section
// each); every result names its protocol.
//
// Verdicts follow the requirement's level: a failed MUST is a Fail; a failed
// SHOULD is a Warn unless the run is strict; a failed MAY is always a Warn (it
// is optional by definition). Error means the kit or the environment failed,
// not the target.
//
// No pass on nothing: a run that judged nothing (every verdict a skip or an
// error), a protocol named on the command line that judged nothing, or an
// --only token none of whose requirements was judged makes the gate an error
// (unjudged(), exit 3), whatever the verdicts say.
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

inline constexpr std::string_view kReportSchema = "tracecorr-report/2";
// The schema before protocol sections (one protocol per run); still read back.
inline constexpr std::string_view kReportSchemaV1 = "tracecorr-report/1";
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
  std::string id;  // "AREA-NN"
  std::string protocol;  // the protocol whose registry defines it ("elastic-v1"); "" when unknown
  Level level = Level::Must;
  Role role = Role::Agent;
  std::string role_name;  // the registry's word for it ("agent", "writer"); "" when unknown
  std::string words;   // the registry's summary of the requirement
  std::string area;    // "AREA"
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

// One protocol of a run: how it came to be judged, and whether it could be.
struct ProtocolRun {
  std::string id;  // ProtocolSpec::id
  // Named by the user (--protocol, or --only naming its requirements): a
  // protocol named that judged nothing fails the gate as an error.
  bool named = false;
  // Why it is in the run, for people: "--protocol", "--only AREA-NN", or what
  // the detection saw ("a trial launch: pid 42 publishes it").
  std::string chosen_by;
  // Announced but published under a schema or layout tracecorr does not read:
  // what was seen (the schema string, ...). Its requirements are skipped
  // with this as the reason, never failed; "" when the protocol was read.
  std::string not_applicable;
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
  // The protocols judged, ids joined by "," ("elastic-v1"; "otel-process-context,otel-thread-context").
  std::string protocol;
  // One section per protocol, in the order judged. Empty in a run made
  // without them (a schema-1 report read back, a RunResult built by hand):
  // protocols_of() then derives them from the results.
  std::vector<ProtocolRun> protocols;
  // --only as given (requirement ids and areas); each must judge something.
  std::vector<std::string> only;
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
Summary summarize(const std::vector<const RequirementResult*>& results);  // one protocol's (results_of)
// "judged" (some verdict judged its requirement), "not-applicable" (found
// under a schema or layout tracecorr does not read) or "nothing-judged".
std::string_view protocol_status(const RunResult& run, const ProtocolRun& protocol);
// "12 passed, 1 failed, 2 warnings, 3 skipped, 0 errors" (+ ", 1 expected failures, 1 stale expectations" when any).
std::string summary_line(const Summary& summary);

// A verdict that judged the requirement: pass, fail or warn (skip and error
// judged nothing).
bool judged(const RequirementResult& result);
// The run's protocol sections: run.protocols, or when it has none, one per
// protocol its results name (run.protocol's first when they name none).
std::vector<ProtocolRun> protocols_of(const RunResult& run);
// The results of one protocol (results naming no protocol belong to the
// run's only one), in registry order.
std::vector<const RequirementResult*> results_of(const RunResult& run, std::string_view protocol);
// Why the gate cannot pass on what was judged, one line each: the run judged
// nothing; a protocol named, or found readable, judged nothing (a protocol
// found under another schema is listed as not applicable, no error unless
// named); an --only token none of whose requirements was judged. Empty when
// something was judged everywhere it had to be.
std::vector<std::string> unjudged(const RunResult& run);

// The gate. Strict also fails on SHOULD warnings; MAY warnings never fail it.
// 1 on a failure, else 3 on an error verdict or anything unjudged(), else 0.
int exit_code(const RunResult& run, bool strict);
// Whether this result fails the gate (XFAIL does not, XPASS does).
bool fails_gate(const RequirementResult& result, bool strict);

// Quotes one argument for a POSIX shell (for repeat commands).
std::string shell_quote(std::string_view argument);
std::string shell_join(const std::vector<std::string>& argv);

// Results in registry order (area, then id), the order every report uses.
std::vector<const RequirementResult*> in_registry_order(const RunResult& run);
// Areas in registry order with their description: {"AREA", "what it covers"}.
std::vector<std::pair<std::string, std::string>> registry_areas();

// RFC 3339 UTC with milliseconds: "2024-05-01T12:00:00.123Z".
std::string format_utc(std::chrono::system_clock::time_point when);

}  // namespace tracecorr::conform

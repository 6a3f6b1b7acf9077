#include "tracecorr/conform/result.hpp"

#include <algorithm>
#include <ctime>
#include <nlohmann/json.hpp>

namespace tracecorr::conform {

std::string_view to_string(Verdict verdict) {
  switch (verdict) {
    case Verdict::Pass: return "pass";
    case Verdict::Fail: return "fail";
    case Verdict::Warn: return "warn";
    case Verdict::Skip: return "skip";
    case Verdict::Error: return "error";
  }
  return "error";
}

std::string_view to_string(ExpectationStatus status) {
  switch (status) {
    case ExpectationStatus::None: return "";
    case ExpectationStatus::ExpectedFailure: return "xfail";
    case ExpectationStatus::UnexpectedPass: return "xpass";
    case ExpectationStatus::NotEvaluated: return "not-evaluated";
  }
  return "";
}

Expected<RequirementResult> make_result(std::string_view id) {
  const Requirement* r = find_requirement(id);
  if (!r) return make_error("unknown requirement id \"" + std::string(id) + "\"", "the registered protocols' registries");
  RequirementResult result;
  result.id = r->id;
  if (const ProtocolSpec* p = protocol_of_requirement(id)) result.protocol = std::string(p->id);
  result.level = r->level;
  result.role = r->role;
  result.role_name = std::string(r->role_name);
  result.words = r->summary;
  result.area = r->area;
  result.source = r->source;
  return result;
}

std::vector<std::string> validate_ids(const std::vector<std::string>& ids) {
  std::vector<std::string> unknown;
  for (const auto& id : ids)
    if (!find_requirement(id)) unknown.push_back(id);
  return unknown;
}

Verdict judge(Level level, bool met, bool strict) {
  if (met) return Verdict::Pass;
  if (level == Level::Must) return Verdict::Fail;
  if (level == Level::Should && strict) return Verdict::Fail;
  return Verdict::Warn;
}

void apply_level(RequirementResult& result, bool strict) {
  if (result.verdict == Verdict::Fail || result.verdict == Verdict::Warn)
    result.verdict = judge(result.level, false, strict);
}

void enforce_evidence_minimum(RequirementResult& result) {
  if (result.verdict != Verdict::Pass || result.evidence_count >= result.evidence_minimum) return;
  result.verdict = Verdict::Error;
  result.reason = "inconclusive: a pass needs at least " + std::to_string(result.evidence_minimum) +
                  " observation(s), this run judged " + std::to_string(result.evidence_count) +
                  (result.reason.empty() ? std::string() : " (" + result.reason + ")");
}

bool fails_gate(const RequirementResult& result, bool strict) {
  if (result.expectation == ExpectationStatus::UnexpectedPass) return true;
  if (result.expectation == ExpectationStatus::ExpectedFailure) return false;
  if (result.verdict == Verdict::Fail) return true;
  // A warning on a SHOULD fails a strict gate even if the probe judged it leniently.
  return strict && result.verdict == Verdict::Warn && result.level != Level::May;
}

Summary summarize(const RunResult& run) {
  std::vector<const RequirementResult*> all;
  for (const auto& r : run.results) all.push_back(&r);
  return summarize(all);
}

Summary summarize(const std::vector<const RequirementResult*>& results) {
  Summary s;
  for (const auto* result : results) {
    const auto& r = *result;
    if (r.expectation == ExpectationStatus::ExpectedFailure) {
      ++s.expected_failures;
      continue;
    }
    if (r.expectation == ExpectationStatus::UnexpectedPass) ++s.stale_expectations;
    switch (r.verdict) {
      case Verdict::Pass: ++s.passed; break;
      case Verdict::Fail: ++s.failed; break;
      case Verdict::Warn: ++s.warnings; break;
      case Verdict::Skip: ++s.skipped; break;
      case Verdict::Error: ++s.errors; break;
    }
  }
  return s;
}

std::string summary_line(const Summary& s) {
  std::string line = std::to_string(s.passed) + " passed, " + std::to_string(s.failed) + " failed, " +
                     std::to_string(s.warnings) + " warnings, " + std::to_string(s.skipped) + " skipped, " +
                     std::to_string(s.errors) + " errors";
  if (s.expected_failures) line += ", " + std::to_string(s.expected_failures) + " expected failures";
  if (s.stale_expectations) line += ", " + std::to_string(s.stale_expectations) + " stale expectations";
  return line;
}

bool judged(const RequirementResult& result) {
  return result.verdict == Verdict::Pass || result.verdict == Verdict::Fail || result.verdict == Verdict::Warn;
}

std::vector<ProtocolRun> protocols_of(const RunResult& run) {
  if (!run.protocols.empty()) return run.protocols;
  std::vector<ProtocolRun> out;
  auto add = [&](const std::string& id) {
    if (!id.empty() && std::none_of(out.begin(), out.end(), [&](const ProtocolRun& p) { return p.id == id; }))
      out.push_back({id, false, "", ""});
  };
  for (const auto* r : in_registry_order(run)) add(r->protocol);
  if (out.empty()) add(run.protocol.substr(0, run.protocol.find(',')));
  return out;
}

std::vector<const RequirementResult*> results_of(const RunResult& run, std::string_view protocol) {
  const auto sections = protocols_of(run);
  // A result that names no protocol (built by hand, an old report) is the only protocol's.
  const bool only_one = sections.size() == 1 && sections.front().id == protocol;
  std::vector<const RequirementResult*> out;
  for (const auto* r : in_registry_order(run))
    if (r->protocol == protocol || (r->protocol.empty() && only_one)) out.push_back(r);
  return out;
}

namespace {

constexpr std::size_t kReasonQuoted = 240;

// "28 skipped of 28 requirements (AREA-01: no module defines ...)": what a
// set of results that judged nothing shows, with the first one's reason.
std::string nothing_judged(const std::vector<const RequirementResult*>& results) {
  if (results.empty()) return "no requirement was selected";
  std::size_t skipped = 0, errors = 0;
  for (const auto* r : results) (r->verdict == Verdict::Skip ? skipped : errors) += 1;
  std::string reason = results.front()->reason;
  if (reason.size() > kReasonQuoted) reason = reason.substr(0, kReasonQuoted) + "...";
  std::string counts;
  if (skipped) counts += std::to_string(skipped) + " skipped";
  if (errors) counts += (counts.empty() ? "" : ", ") + std::to_string(errors) + " in error";
  return counts + " of " + std::to_string(results.size()) + " requirement" + (results.size() == 1 ? "" : "s") + " (" +
         results.front()->id + " " + std::string(to_string(results.front()->verdict)) + ": " + reason + ")";
}

// Results matching an --only token: the id itself, or every id of the area.
std::vector<const RequirementResult*> results_for_token(const RunResult& run, const std::string& token) {
  std::vector<const RequirementResult*> out;
  for (const auto* r : in_registry_order(run))
    if (r->id == token || r->area == token) out.push_back(r);
  return out;
}

bool any_judged(const std::vector<const RequirementResult*>& results) {
  return std::any_of(results.begin(), results.end(), [](const RequirementResult* r) { return judged(*r); });
}

}  // namespace

std::vector<std::string> unjudged(const RunResult& run) {
  std::vector<const RequirementResult*> all = in_registry_order(run);
  const auto sections = protocols_of(run);
  if (!any_judged(all)) {
    // One line says it all: the run judged nothing, and why.
    std::string why;
    for (const auto& p : sections)
      if (!p.not_applicable.empty()) why += (why.empty() ? "" : "; ") + p.id + " not applicable: " + p.not_applicable;
    return {"nothing was judged: " + (why.empty() ? nothing_judged(all) : why)};
  }
  std::vector<std::string> lines;
  for (const auto& p : sections) {
    auto results = results_of(run, p.id);
    if (any_judged(results)) continue;
    if (!p.named && !p.not_applicable.empty()) continue;  // found under another schema: listed, not an error
    lines.push_back(p.id + (p.chosen_by.empty() ? "" : " (" + p.chosen_by + ")") + " judged nothing: " +
                    (p.not_applicable.empty() ? nothing_judged(results) : "not applicable: " + p.not_applicable));
  }
  for (const auto& token : run.only) {
    auto results = results_for_token(run, token);
    if (!results.empty() && !any_judged(results))
      lines.push_back("--only " + token + " judged nothing: " + nothing_judged(results));
  }
  return lines;
}

std::string_view protocol_status(const RunResult& run, const ProtocolRun& protocol) {
  if (!protocol.not_applicable.empty()) return "not-applicable";
  return any_judged(results_of(run, protocol.id)) ? "judged" : "nothing-judged";
}

int exit_code(const RunResult& run, bool strict) {
  bool failed = false, errored = false;
  for (const auto& r : run.results) {
    failed = failed || fails_gate(r, strict);
    errored = errored || r.verdict == Verdict::Error;
  }
  for (const auto& e : run.expectations) failed = failed || e.status == ExpectationStatus::UnexpectedPass;
  if (failed) return kExitFailure;
  if (errored || !unjudged(run).empty()) return kExitEnvironment;
  return kExitOk;
}

std::string shell_quote(std::string_view argument) {
  if (!argument.empty() && std::all_of(argument.begin(), argument.end(), [](unsigned char c) {
        return std::isalnum(c) || std::string_view("-_./=:,+@%").find(static_cast<char>(c)) != std::string_view::npos;
      }))
    return std::string(argument);
  std::string quoted = "'";
  for (char c : argument) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return quoted + "'";
}

std::string shell_join(const std::vector<std::string>& argv) {
  std::string line;
  for (const auto& a : argv) line += (line.empty() ? "" : " ") + shell_quote(a);
  return line;
}

std::vector<const RequirementResult*> in_registry_order(const RunResult& run) {
  auto rank = [](const RequirementResult& r) { return requirement_rank(r.id); };
  std::vector<const RequirementResult*> ordered;
  for (const auto& r : run.results) ordered.push_back(&r);
  std::stable_sort(ordered.begin(), ordered.end(),
                   [&](const RequirementResult* a, const RequirementResult* b) { return rank(*a) < rank(*b); });
  return ordered;
}

std::vector<std::pair<std::string, std::string>> registry_areas() {
  // The generated headers have no area table; the raw registries do, and
  // ordered_json keeps each registry's order (the order reports group by).
  static const auto areas = [] {
    std::vector<std::pair<std::string, std::string>> out;
    for (const ProtocolSpec* p : protocols()) {
      auto registry = nlohmann::ordered_json::parse(p->registry_json, nullptr, false);
      if (registry.is_discarded() || !registry.contains("areas") || !registry["areas"].is_object()) continue;
      for (const auto& [name, description] : registry["areas"].items())
        if (description.is_string()) out.emplace_back(name, description.get<std::string>());
    }
    return out;
  }();
  return areas;
}

std::string format_utc(std::chrono::system_clock::time_point when) {
  auto millis = std::chrono::duration_cast<std::chrono::milliseconds>(when.time_since_epoch()).count();
  std::time_t seconds = static_cast<std::time_t>(millis / 1000);
  std::tm tm{};
  gmtime_r(&seconds, &tm);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
                tm.tm_hour, tm.tm_min, tm.tm_sec, static_cast<int>(millis % 1000));
  return buf;
}

}  // namespace tracecorr::conform

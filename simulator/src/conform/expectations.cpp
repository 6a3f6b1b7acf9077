#include "tracecorr/conform/expectations.hpp"

#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

namespace tracecorr::conform {
namespace {

using json = nlohmann::ordered_json;
constexpr std::size_t kMaxExpectationsFileBytes = 1 << 20;
constexpr char kTodoReason[] = "TODO: explain";

bool failing(Verdict verdict) { return verdict == Verdict::Fail || verdict == Verdict::Warn; }

}  // namespace

Expected<Expectations> parse_expectations(std::string_view text, std::string_view origin) {
  std::string where(origin);
  json document;
  try {
    document = json::parse(text.begin(), text.end());
  } catch (const json::exception& e) {
    return make_error(std::string("not valid JSON: ") + e.what(), where);
  }
  if (!document.is_object()) return make_error("expected a JSON object {\"version\": 1, \"expected_failures\": [...]}", where);
  for (const auto& [key, value] : document.items())
    if (key != "version" && key != "expected_failures")
      return make_error("unknown key \"" + key + "\" (expected \"version\" and \"expected_failures\")", where);
  if (!document.contains("version") || !document["version"].is_number_integer() || document["version"].get<int>() != 1)
    return make_error("\"version\" must be 1", where);
  Expectations out;
  if (!document.contains("expected_failures")) return out;
  const json& entries = document["expected_failures"];
  if (!entries.is_array()) return make_error("\"expected_failures\" must be an array", where);
  std::set<std::string> seen;
  for (std::size_t i = 0; i < entries.size(); ++i) {
    std::string at = where + ": expected_failures[" + std::to_string(i) + "]";
    const json& entry = entries[i];
    if (!entry.is_object()) return make_error("expected an object {\"id\": ..., \"reason\": ...}", at);
    for (const auto& [key, value] : entry.items())
      if (key != "id" && key != "reason") return make_error("unknown key \"" + key + "\"", at);
    if (!entry.contains("id") || !entry["id"].is_string()) return make_error("missing \"id\"", at);
    std::string id = entry["id"].get<std::string>();
    at += " (" + id + ")";
    if (!find_requirement(id)) return make_error("unknown requirement id \"" + id + "\"; see `tracecorr list`", at);
    if (!seen.insert(id).second) return make_error("listed twice", at);
    if (!entry.contains("reason") || !entry["reason"].is_string())
      return make_error("missing \"reason\": say why the failure is expected", at);
    std::string reason = entry["reason"].get<std::string>();
    if (reason.find_first_not_of(" \t\r\n") == std::string::npos)
      return make_error("empty \"reason\": say why the failure is expected", at);
    out.expected_failures.push_back({std::move(id), std::move(reason)});
  }
  return out;
}

Expected<Expectations> load_expectations(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return make_error("cannot open", path.string());
  std::string text;
  text.resize(kMaxExpectationsFileBytes + 1);
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<std::size_t>(in.gcount()));
  if (text.size() > kMaxExpectationsFileBytes)
    return make_error("larger than " + std::to_string(kMaxExpectationsFileBytes) + " bytes", path.string());
  return parse_expectations(text, path.string());
}

void apply_expectations(RunResult& run, const Expectations& expectations) {
  run.expectations.clear();
  for (const auto& expected : expectations.expected_failures) {
    ExpectationOutcome outcome{expected.id, expected.reason, ExpectationStatus::NotEvaluated};
    for (auto& result : run.results) {
      if (result.id != expected.id) continue;
      if (failing(result.verdict))
        outcome.status = ExpectationStatus::ExpectedFailure;
      else if (result.verdict == Verdict::Pass)
        outcome.status = ExpectationStatus::UnexpectedPass;
      else
        outcome.status = ExpectationStatus::NotEvaluated;
      result.expectation = outcome.status;
      result.expectation_reason = expected.reason;
    }
    run.expectations.push_back(std::move(outcome));
  }
}

std::string update_expectations(const RunResult& run, const Expectations& previous) {
  std::map<std::string, std::string> reasons;
  for (const auto& e : previous.expected_failures) reasons[e.id] = e.reason;
  std::set<std::string> evaluated, failures;
  for (const auto& r : run.results) {
    if (r.verdict == Verdict::Pass || failing(r.verdict)) evaluated.insert(r.id);
    if (failing(r.verdict)) failures.insert(r.id);
  }
  json entries = json::array();
  // Registry order, so the file diffs cleanly run after run.
  for (const Requirement* requirement : all_requirements()) {
    std::string id(requirement->id);
    bool keep = failures.count(id) || (reasons.count(id) && !evaluated.count(id));
    if (!keep) continue;
    auto it = reasons.find(id);
    entries.push_back({{"id", id}, {"reason", it != reasons.end() ? it->second : kTodoReason}});
  }
  json document = {{"version", 1}, {"expected_failures", entries}};
  return document.dump(2, ' ', false, json::error_handler_t::replace) + "\n";
}

}  // namespace tracecorr::conform

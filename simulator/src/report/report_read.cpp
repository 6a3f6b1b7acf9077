// Reading a JSON report (spec/report-schema-v2.json, or a version-1 report:
// one protocol, no sections) back into the result model, so `tracecorr
// report --html` renders what `conform --json` saved.
#include <nlohmann/json.hpp>

#include "figures_json.hpp"
#include "tracecorr/report/report.hpp"
#include "tracecorr/ids.hpp"

namespace tracecorr::report {

using namespace tracecorr::conform;
namespace {

using json = nlohmann::ordered_json;

constexpr std::size_t kMaxReportBytes = 64u << 20;
constexpr std::size_t kMaxResults = 4096;
constexpr std::size_t kMaxEvidence = 64;
constexpr std::size_t kMaxEvidenceBytes = 1u << 20;
constexpr std::size_t kMaxProtocols = 64;

std::string str(const json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

template <typename Enum, std::size_t N>
Expected<Enum> one_of(const json& j, const char* key, const std::array<Enum, N>& values, const std::string& where) {
  std::string name = str(j, key);
  for (Enum v : values)
    if (to_string(v) == name) return v;
  return make_error("unknown " + std::string(key) + " \"" + printable_text(name) + "\"", where);
}

std::vector<std::uint8_t> bytes_from_hex(const std::string& hex) {
  std::vector<std::uint8_t> out;
  auto nibble = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  for (std::size_t i = 0; i + 1 < hex.size() && out.size() < kMaxEvidenceBytes; i += 2) {
    int hi = nibble(hex[i]), lo = nibble(hex[i + 1]);
    if (hi < 0 || lo < 0) break;
    out.push_back(static_cast<std::uint8_t>(hi << 4 | lo));
  }
  return out;
}

std::chrono::system_clock::time_point parse_utc(const std::string& text) {
  std::tm tm{};
  int ms = 0;
  if (std::sscanf(text.c_str(), "%d-%d-%dT%d:%d:%d.%dZ", &tm.tm_year, &tm.tm_mon, &tm.tm_mday, &tm.tm_hour, &tm.tm_min,
                  &tm.tm_sec, &ms) < 6)
    return {};
  tm.tm_year -= 1900;
  tm.tm_mon -= 1;
  return std::chrono::system_clock::from_time_t(timegm(&tm)) + std::chrono::milliseconds(ms);
}

// One result of "results": `at` names it in errors; `run` gives a version-1
// result its protocol.
Expected<RequirementResult> read_result(const json& r, const std::string& at, const RunResult& run) {
  if (!r.is_object()) return make_error("not an object", at);
  RequirementResult result;
  result.id = str(r, "id");
  if (result.id.empty()) return make_error("no \"id\"", at);
  // Version 1 names no protocol per result: the registry's, else the run's.
  result.protocol = str(r, "protocol");
  if (result.protocol.empty())
    if (const ProtocolSpec* p = protocol_of_requirement(result.id)) result.protocol = std::string(p->id);
  if (result.protocol.empty()) result.protocol = run.protocol.substr(0, run.protocol.find(','));
  if (r.contains("evidence_count") && r["evidence_count"].is_number_unsigned())
    result.evidence_count = r["evidence_count"].get<std::size_t>();
  auto level = one_of(r, "level", std::array{Level::Must, Level::Should, Level::May}, at);
  if (!level) return level.error();
  result.level = *level;
  auto role = one_of(r, "role", std::array{Role::Agent, Role::Profiler}, at);
  if (!role) return role.error();
  result.role = *role;
  result.role_name = str(r, "role_name");
  auto verdict = one_of(r, "verdict",
                        std::array{Verdict::Pass, Verdict::Fail, Verdict::Warn, Verdict::Skip, Verdict::Error}, at);
  if (!verdict) return verdict.error();
  result.verdict = *verdict;
  result.area = str(r, "area");
  result.source = str(r, "source");
  result.words = str(r, "words");
  result.reason = str(r, "reason");
  result.probe = str(r, "probe");
  result.repeat_command = str(r, "repeat_command");
  if (r.contains("duration_ms") && r["duration_ms"].is_number())
    result.duration = std::chrono::nanoseconds(static_cast<std::int64_t>(r["duration_ms"].get<double>() * 1e6));
  if (r.contains("expectation") && r["expectation"].is_object()) {
    auto status = one_of(r["expectation"], "status",
                         std::array{ExpectationStatus::ExpectedFailure, ExpectationStatus::UnexpectedPass,
                                    ExpectationStatus::NotEvaluated},
                         at + ".expectation");
    if (!status) return status.error();
    result.expectation = *status;
    result.expectation_reason = str(r["expectation"], "reason");
  }
  if (r.contains("evidence") && r["evidence"].is_array()) {
    for (const auto& e : r["evidence"]) {
      if (result.evidence.size() >= kMaxEvidence || !e.is_object()) break;
      Evidence evidence{str(e, "label"), str(e, "expected"), str(e, "actual"), bytes_from_hex(str(e, "bytes_hex")), {}};
      if (e.contains("fields") && e["fields"].is_array())
        for (const auto& f : e["fields"]) {
          if (!f.is_object() || evidence.fields.size() >= 256) break;
          DecodedField field;
          field.offset = f.contains("offset") && f["offset"].is_number_unsigned() ? f["offset"].get<std::size_t>() : 0;
          field.size = f.contains("size") && f["size"].is_number_unsigned() ? f["size"].get<std::size_t>() : 0;
          field.name = str(f, "name");
          field.value = str(f, "value");
          evidence.fields.push_back(std::move(field));
        }
      result.evidence.push_back(std::move(evidence));
    }
  }
  return result;
}

// The protocol sections, --only, and the notes (version 2; a version-1
// report has none: protocols_of() derives its one section).
void read_sections(const json& doc, RunResult& run) {
  if (doc.contains("protocols") && doc["protocols"].is_array())
    for (const auto& p : doc["protocols"]) {
      if (!p.is_object() || run.protocols.size() >= kMaxProtocols) break;
      ProtocolRun section;
      section.id = str(p, "id");
      section.named = p.contains("named") && p["named"].is_boolean() && p["named"].get<bool>();
      section.chosen_by = str(p, "chosen_by");
      section.not_applicable = str(p, "not_applicable");
      if (!section.id.empty()) run.protocols.push_back(std::move(section));
    }
  if (doc.contains("only") && doc["only"].is_array())
    for (const auto& token : doc["only"])
      if (token.is_string() && run.only.size() < kMaxResults) run.only.push_back(token.get<std::string>());
  if (doc.contains("notes") && doc["notes"].is_array())
    for (const auto& note : doc["notes"])
      if (note.is_string() && run.notes.size() < kMaxResults) run.notes.push_back(note.get<std::string>());
}

}  // namespace

Expected<RunResult> parse_json_report(std::string_view text, std::string_view origin) {
  std::string where(origin);
  if (text.size() > kMaxReportBytes)
    return make_error("report is " + std::to_string(text.size()) + " bytes, more than the " +
                          std::to_string(kMaxReportBytes) + " read", where);
  json doc = json::parse(text.begin(), text.end(), nullptr, false);
  if (doc.is_discarded() || !doc.is_object()) return make_error("not a JSON object", where);
  const std::string schema = str(doc, "schema");
  if (schema != kReportSchema && schema != kReportSchemaV1)
    return make_error("schema is \"" + printable_text(schema) + "\", not \"" + std::string(kReportSchema) + "\" (or \"" +
                          std::string(kReportSchemaV1) + "\")",
                      where);
  RunResult run;
  run.schema_version = schema;
  if (doc.contains("tool") && doc["tool"].is_object()) run.tool_version = str(doc["tool"], "version");
  if (doc.contains("target") && doc["target"].is_object()) {
    const auto& t = doc["target"];
    run.target.description = str(t, "description");
    run.target.arch = str(t, "arch");
    if (t.contains("pid") && t["pid"].is_number_integer()) run.target.pid = t["pid"].get<std::int64_t>();
  }
  run.protocol = str(doc, "protocol");
  run.personality = str(doc, "personality");
  run.strict = doc.contains("strict") && doc["strict"].is_boolean() && doc["strict"].get<bool>();
  run.started = parse_utc(str(doc, "started"));
  run.finished = parse_utc(str(doc, "finished"));
  if (!doc.contains("results") || !doc["results"].is_array()) return make_error("no \"results\" array", where);
  std::size_t index = 0;
  for (const auto& r : doc["results"]) {
    std::string at = where + ": results[" + std::to_string(index++) + "]";
    if (run.results.size() >= kMaxResults) return make_error("more than " + std::to_string(kMaxResults) + " results", at);
    auto result = read_result(r, at, run);
    if (!result) return result.error();
    run.results.push_back(std::move(*result));
  }
  if (doc.contains("expectations") && doc["expectations"].is_array())
    for (const auto& e : doc["expectations"]) {
      if (!e.is_object() || run.expectations.size() >= kMaxResults) break;
      auto status = one_of(e, "status",
                           std::array{ExpectationStatus::None, ExpectationStatus::ExpectedFailure,
                                      ExpectationStatus::UnexpectedPass, ExpectationStatus::NotEvaluated},
                           where + ": expectations");
      run.expectations.push_back({str(e, "id"), str(e, "reason"), status ? *status : ExpectationStatus::NotEvaluated});
    }
  if (doc.contains("counters") && doc["counters"].is_object())
    for (const auto& [name, value] : doc["counters"].items()) {
      if (run.counters.size() >= kMaxResults) break;
      if (value.is_number_unsigned()) run.counters[name] = value.get<std::uint64_t>();
    }
  if (doc.contains("figures")) run.figures = figures_from_json(doc["figures"]);
  read_sections(doc, run);
  return run;
}

}  // namespace tracecorr::report

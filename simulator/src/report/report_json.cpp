// JSON report, described by spec/report-schema-v2.json.
#include <nlohmann/json.hpp>

#include "figures_json.hpp"
#include "tracecorr/report/report.hpp"
#include "tracecorr/ids.hpp"

namespace tracecorr::report {

using namespace tracecorr::conform;
namespace {

using json = nlohmann::ordered_json;

double milliseconds(std::chrono::nanoseconds d) { return std::chrono::duration<double, std::milli>(d).count(); }

json summary_json(const Summary& s) {
  return {{"passed", s.passed},   {"failed", s.failed},
          {"warnings", s.warnings}, {"skipped", s.skipped},
          {"errors", s.errors},   {"expected_failures", s.expected_failures},
          {"stale_expectations", s.stale_expectations}};
}

// One section per protocol: how it was chosen and what it came to.
json protocols_json(const RunResult& run) {
  json out = json::array();
  for (const auto& p : protocols_of(run))
    out.push_back({{"id", json_text(p.id)},
                   {"named", p.named},
                   {"chosen_by", json_text(p.chosen_by)},
                   {"status", protocol_status(run, p)},
                   {"not_applicable", p.not_applicable.empty() ? json(nullptr) : json(json_text(p.not_applicable))},
                   {"summary", summary_json(summarize(results_of(run, p.id)))}});
  return out;
}

json evidence_json(const Evidence& e) {
  json fields = json::array();
  for (const auto& f : e.fields)
    fields.push_back({{"offset", f.offset}, {"size", f.size}, {"name", json_text(f.name)}, {"value", json_text(f.value)}});
  return {{"label", json_text(e.label)},
          {"expected", json_text(e.expected)},
          {"actual", json_text(e.actual)},
          {"bytes_hex", to_hex(e.bytes)},
          {"fields", fields}};
}

}  // namespace

std::string render_json(const RunResult& run) {
  Summary s = summarize(run);
  int code = exit_code(run, run.strict);
  json results = json::array();
  for (const auto* r : in_registry_order(run)) {
    json evidence = json::array();
    for (const auto& e : r->evidence) evidence.push_back(evidence_json(e));
    json expectation = nullptr;
    if (r->expectation != ExpectationStatus::None)
      expectation = {{"status", to_string(r->expectation)}, {"reason", json_text(r->expectation_reason)}};
    results.push_back({{"id", json_text(r->id)},
                       {"protocol", json_text(r->protocol)},
                       {"level", to_string(r->level)},
                       {"role", to_string(r->role)},
                       {"role_name", r->role_name.empty() ? std::string(to_string(r->role)) : r->role_name},
                       {"area", json_text(r->area)},
                       {"source", json_text(r->source)},
                       {"words", json_text(r->words)},
                       {"verdict", to_string(r->verdict)},
                       {"gate_failure", fails_gate(*r, run.strict)},
                       {"reason", json_text(r->reason)},
                       {"evidence_count", r->evidence_count},
                       {"probe", json_text(r->probe)},
                       {"duration_ms", milliseconds(r->duration)},
                       {"repeat_command", json_text(r->repeat_command)},
                       {"expectation", expectation},
                       {"evidence", evidence}});
  }
  json expectations = json::array();
  for (const auto& e : run.expectations)
    expectations.push_back({{"id", json_text(e.id)}, {"reason", json_text(e.reason)}, {"status", to_string(e.status)}});
  json counters = json::object();
  for (const auto& [name, value] : run.counters) counters[json_text(name)] = value;
  json unjudged_lines = json::array();
  for (const auto& line : unjudged(run)) unjudged_lines.push_back(json_text(line));
  json only = json::array();
  for (const auto& token : run.only) only.push_back(json_text(token));
  json target = {{"description", json_text(run.target.description)},
                 {"pid", run.target.pid ? json(*run.target.pid) : json(nullptr)},
                 {"arch", json_text(run.target.arch)}};
  json document = {
      {"schema", kReportSchema},
      {"tool", {{"name", "tracecorr"}, {"version", json_text(run.tool_version)}}},
      {"target", target},
      {"protocol", json_text(run.protocol)},
      {"personality", json_text(run.personality)},
      {"strict", run.strict},
      {"started", format_utc(run.started)},
      {"finished", format_utc(run.finished)},
      {"duration_ms", milliseconds(run.finished - run.started)},
      {"summary", summary_json(s)},
      {"gate", {{"exit_code", code}, {"passed", code == kExitOk}, {"unjudged", unjudged_lines}}},
      {"protocols", protocols_json(run)},
      {"only", only},
      {"results", results},
      {"expectations", expectations},
      {"counters", counters},
      {"figures", figures_to_json(run.figures)}};
  json notes = json::array();
  for (const auto& note : run.notes) notes.push_back(json_text(note));
  document["notes"] = notes;
  return document.dump(2, ' ', false, json::error_handler_t::replace) + "\n";
}

}  // namespace tracecorr::report

// Console report in the manner of h2spec.
#include <algorithm>
#include <map>

#include "tracecorr/report/report.hpp"

namespace tracecorr::report {

using namespace tracecorr::conform;
namespace {

struct Style {
  bool on;
  std::string wrap(std::string_view code, std::string_view text) const {
    if (!on) return std::string(text);
    return "\x1b[" + std::string(code) + "m" + std::string(text) + "\x1b[0m";
  }
};

std::string_view mark(Verdict verdict) {
  switch (verdict) {
    case Verdict::Pass: return "✔";
    case Verdict::Fail: return "✘";
    case Verdict::Warn: return "!";
    case Verdict::Skip: return "-";
    case Verdict::Error: return "E";
  }
  return "?";
}

std::string_view colour(Verdict verdict) {
  switch (verdict) {
    case Verdict::Pass: return "32";   // green
    case Verdict::Fail: return "31";   // red
    case Verdict::Warn: return "33";   // yellow
    case Verdict::Skip: return "36";   // cyan
    case Verdict::Error: return "35";  // magenta
  }
  return "0";
}

void render_details(std::string& out, const RequirementResult& r, const ConsoleOptions& options, const Style& style) {
  const std::string pad = "        ";
  out += "      -> " + printable_text(r.words) + "\n";
  out += pad + style.wrap("2", "(" + std::string(to_string(r.level)) + ", " + printable_text(r.source) + ")") + "\n";
  for (const auto& e : r.evidence) {
    if (!e.label.empty()) out += pad + printable_text(e.label) + ":\n";
    if (!e.expected.empty() || !e.actual.empty()) {
      out += pad + "Expected: " + style.wrap("32", printable_text(e.expected)) + "\n";
      out += pad + "  Actual: " + style.wrap("31", printable_text(e.actual)) + "\n";
    }
    if (!e.bytes.empty()) {
      out += pad + "Bytes (" + std::to_string(e.bytes.size()) + "):\n";
      out += hex_dump(e.bytes, options.max_hex_bytes, pad + "  ");
      for (const auto& f : e.fields) {
        char where[48];
        std::snprintf(where, sizeof where, "+%-4zu %3zu  ", f.offset, f.size);
        out += pad + "  " + where + printable_text(f.name) + " = " + printable_text(f.value) + "\n";
      }
    }
  }
  if (!r.repeat_command.empty()) out += pad + "Repeat: " + printable_text(r.repeat_command) + "\n";
}

void render_line(std::string& out, const RequirementResult& r, const ConsoleOptions& options, const Style& style) {
  bool xfail = r.expectation == ExpectationStatus::ExpectedFailure;
  bool xpass = r.expectation == ExpectationStatus::UnexpectedPass;
  if (r.verdict == Verdict::Pass && !xpass && !options.show_passes) return;
  std::string line = "  " + style.wrap(xfail ? "2" : colour(r.verdict), mark(r.verdict)) + " " + printable_text(r.id) +
                     " [" + std::string(to_string(r.level)) + "] ";
  line += printable_text(r.reason.empty() ? r.words : r.reason);
  if (xfail) line += style.wrap("2", " (expected failure: " + printable_text(r.expectation_reason) + ")");
  if (xpass) line += style.wrap("31", " (stale expectation: remove it; it passes now)");
  out += line + "\n";
  bool detailed = r.verdict == Verdict::Fail || r.verdict == Verdict::Warn || r.verdict == Verdict::Error;
  if (detailed && !xfail) render_details(out, r, options, style);
}

// Results grouped by area, in registry order.
void render_areas(std::string& out, const std::vector<const RequirementResult*>& ordered, const ConsoleOptions& options,
                  const Style& style) {
  std::map<std::string, std::vector<const RequirementResult*>> by_area;
  for (const auto* r : ordered) by_area[r->area].push_back(r);
  auto areas = registry_areas();
  // Results in an area the registry does not list still get shown, last.
  for (const auto& [area, results] : by_area) {
    bool known = false;
    for (const auto& a : areas) known = known || a.first == area;
    if (!known) areas.emplace_back(area, "");
  }
  for (const auto& [area, description] : areas) {
    auto it = by_area.find(area);
    if (it == by_area.end()) continue;
    out += style.wrap("1", printable_text(area)) + (description.empty() ? "" : " — " + printable_text(description)) + "\n";
    for (const auto* r : it->second) render_line(out, *r, options, style);
    out += "\n";
  }
}

// "== otel-thread-context — OpenTelemetry thread context (a trial launch: pid 42 publishes it)",
// then what it came to; a protocol found not applicable says so in one line.
void render_section_heading(std::string& out, const RunResult& run, const ProtocolRun& p,
                            const std::vector<const RequirementResult*>& results, const Style& style) {
  const ProtocolSpec* spec = find_protocol(p.id);
  out += style.wrap("1", "== " + printable_text(p.id) + (spec ? " — " + std::string(spec->title) : "")) +
         (p.chosen_by.empty() ? "" : " (" + printable_text(p.chosen_by) + ")") + "\n";
  if (!p.not_applicable.empty()) {
    out += "  " + style.wrap(colour(Verdict::Skip), mark(Verdict::Skip)) + " not applicable: " +
           printable_text(p.not_applicable) + " (" + std::to_string(results.size()) + " requirements not judged)\n\n";
    return;
  }
  out += "  " + std::string(protocol_status(run, p)) + ": " + summary_line(summarize(results)) + "\n\n";
}

}  // namespace

std::string render_console(const RunResult& run, const ConsoleOptions& options) {
  Style style{options.color};
  std::string out;
  out += style.wrap("1", "tracecorr conform") + " " + printable_text(run.tool_version) + " — " +
         printable_text(run.target.description.empty() ? "(no target)" : run.target.description);
  if (!run.target.arch.empty()) out += " (" + printable_text(run.target.arch) + ")";
  if (!run.protocol.empty()) out += ", " + printable_text(run.protocol);
  if (!run.personality.empty()) out += ", personality " + printable_text(run.personality);
  if (run.strict) out += ", strict";
  out += "\n\n";

  // One section per protocol when the run judged several (or found one not
  // applicable); a one-protocol run reads as before: its areas.
  const auto sections = protocols_of(run);
  const bool sectioned =
      sections.size() > 1 || std::any_of(sections.begin(), sections.end(), [](const ProtocolRun& p) {
        return !p.not_applicable.empty();
      });
  std::vector<const RequirementResult*> shown;
  for (const auto& p : sections) {
    auto results = results_of(run, p.id);
    shown.insert(shown.end(), results.begin(), results.end());
    if (sectioned) render_section_heading(out, run, p, results, style);
    if (p.not_applicable.empty()) render_areas(out, results, options, style);
  }
  // Results of no listed protocol (a hand-built run) still get shown, last.
  std::vector<const RequirementResult*> rest;
  for (const auto* r : in_registry_order(run))
    if (std::find(shown.begin(), shown.end(), r) == shown.end()) rest.push_back(r);
  render_areas(out, rest, options, style);
  bool stale_heading = false;
  for (const auto& e : run.expectations) {
    if (e.status != ExpectationStatus::UnexpectedPass && e.status != ExpectationStatus::NotEvaluated) continue;
    if (!stale_heading) out += style.wrap("1", "Expectations") + "\n";
    stale_heading = true;
    out += "  " + printable_text(e.id) + ": " +
           (e.status == ExpectationStatus::UnexpectedPass ? "passes now: stale expectation, remove it"
                                                          : "listed but not evaluated in this run") +
           " (" + printable_text(e.reason) + ")\n";
  }
  if (stale_heading) out += "\n";
  if (!run.notes.empty()) {
    out += style.wrap("1", "Notes") + "\n";
    for (const auto& note : run.notes) out += "  " + printable_text(note) + "\n";
    out += "\n";
  }
  if (!run.counters.empty()) {
    out += style.wrap("2", "Counters:");
    for (const auto& [name, value] : run.counters) out += style.wrap("2", " " + printable_text(name) + "=" + std::to_string(value));
    out += "\n";
  }
  for (const auto& line : unjudged(run)) out += style.wrap("31", "not judged: " + printable_text(line)) + "\n";
  Summary summary = summarize(run);
  std::string_view summary_colour = exit_code(run, run.strict) == kExitOk ? "32" : "31";
  out += style.wrap(summary_colour, summary_line(summary)) + "\n";
  return out;
}

}  // namespace tracecorr::report

// JUnit XML: <testsuites>, a <testsuite> per area (registry order, so the
// protocols of a multi-protocol run follow each other; each names its
// protocol), a <testcase> per requirement. Warnings pass (unless they fail a
// strict gate) and are noted in <system-out>; XFAIL is <skipped>; XPASS is a
// <failure>. A run that judged nothing where it had to (unjudged()) ends
// with a testsuite "gate" of one <error> per reason, so a CI that reads only
// the XML does not pass it either.
#include <map>

#include "tracecorr/report/report.hpp"

namespace tracecorr::report {

using namespace tracecorr::conform;
namespace {

// Escapes for attribute values and text. printable_text has already made the
// text valid UTF-8 without the control characters XML 1.0 forbids.
std::string xml(std::string_view raw) { return markup_text(raw, true); }

// Element text keeps newlines literally (readable in CI viewers).
std::string xml_text(std::string_view raw) {
  std::string out = xml(raw);
  std::string readable;
  for (std::size_t i = 0; i < out.size(); ++i) {
    if (out.compare(i, 5, "&#10;") == 0) {
      readable += '\n';
      i += 4;
    } else {
      readable += out[i];
    }
  }
  return readable;
}

std::string seconds(std::chrono::nanoseconds d) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f", std::chrono::duration<double>(d).count());
  return buf;
}

std::string details(const RequirementResult& r) {
  std::string text = r.id + " [" + std::string(to_string(r.level)) + "] " + r.words + "\n";
  text += "(source: " + r.source + ")\n";
  if (!r.reason.empty()) text += "Reason: " + r.reason + "\n";
  for (const auto& e : r.evidence) {
    if (!e.label.empty()) text += e.label + ":\n";
    if (!e.expected.empty() || !e.actual.empty()) text += "  Expected: " + e.expected + "\n    Actual: " + e.actual + "\n";
    if (!e.bytes.empty()) {
      text += "  Bytes (" + std::to_string(e.bytes.size()) + "):\n" + hex_dump(e.bytes, 256, "    ");
      for (const auto& f : e.fields)
        text += "    +" + std::to_string(f.offset) + " (" + std::to_string(f.size) + ") " + f.name + " = " + f.value + "\n";
    }
  }
  if (!r.repeat_command.empty()) text += "Repeat: " + r.repeat_command + "\n";
  return text;
}

void property(std::string& out, std::string_view indent, std::string_view name, std::string_view value) {
  out += std::string(indent) + "<property name=\"" + xml(name) + "\" value=\"" + xml(value) + "\"/>\n";
}

struct Counts {
  std::size_t tests = 0, failures = 0, errors = 0, skipped = 0;
  std::chrono::nanoseconds time{0};
};

enum class Outcome { Passed, Failed, Errored, Skipped };

Outcome outcome(const RequirementResult& r, bool strict) {
  if (r.expectation == ExpectationStatus::ExpectedFailure) return Outcome::Skipped;
  if (fails_gate(r, strict)) return Outcome::Failed;
  if (r.verdict == Verdict::Error) return Outcome::Errored;
  if (r.verdict == Verdict::Skip) return Outcome::Skipped;
  return Outcome::Passed;
}

// The reasons the gate cannot pass on what was judged, as errors.
std::string gate_suite(const RunResult& run) {
  const auto lines = unjudged(run);
  if (lines.empty()) return {};
  std::string out = "  <testsuite name=\"gate\" tests=\"" + std::to_string(lines.size()) + "\" failures=\"0\" errors=\"" +
                    std::to_string(lines.size()) + "\" skipped=\"0\" time=\"0.000\" timestamp=\"" +
                    xml(format_utc(run.started)) + "\">\n";
  for (const auto& line : lines)
    out += "    <testcase name=\"something judged\" classname=\"tracecorr.gate\" time=\"0.000\">\n      <error message=\"" +
           xml(line) + "\" type=\"nothing-judged\">" + xml_text(line) + "</error>\n    </testcase>\n";
  return out + "  </testsuite>\n";
}

}  // namespace

std::string render_junit(const RunResult& run) {
  std::map<std::string, std::vector<const RequirementResult*>> by_area;
  std::map<std::string, Counts> counts;
  Counts total;
  for (const auto* r : in_registry_order(run)) {
    by_area[r->area].push_back(r);
    Counts& c = counts[r->area];
    for (Counts* k : {&c, &total}) {
      ++k->tests;
      k->time += r->duration;
      switch (outcome(*r, run.strict)) {
        case Outcome::Failed: ++k->failures; break;
        case Outcome::Errored: ++k->errors; break;
        case Outcome::Skipped: ++k->skipped; break;
        case Outcome::Passed: break;
      }
    }
  }
  auto areas = registry_areas();
  for (const auto& [area, results] : by_area) {
    bool known = false;
    for (const auto& a : areas) known = known || a.first == area;
    if (!known) areas.emplace_back(area, "");
  }

  const std::size_t unjudged_count = unjudged(run).size();  // the gate suite's errors
  total.tests += unjudged_count;
  total.errors += unjudged_count;
  std::string out = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  out += "<testsuites name=\"tracecorr conform\" tests=\"" + std::to_string(total.tests) + "\" failures=\"" +
         std::to_string(total.failures) + "\" errors=\"" + std::to_string(total.errors) + "\" skipped=\"" +
         std::to_string(total.skipped) + "\" time=\"" + seconds(run.finished - run.started) + "\">\n";
  for (const auto& [area, description] : areas) {
    auto it = by_area.find(area);
    if (it == by_area.end()) continue;
    const Counts& c = counts[area];
    out += "  <testsuite name=\"" + xml(area) + "\" tests=\"" + std::to_string(c.tests) + "\" failures=\"" +
           std::to_string(c.failures) + "\" errors=\"" + std::to_string(c.errors) + "\" skipped=\"" +
           std::to_string(c.skipped) + "\" time=\"" + seconds(c.time) + "\" timestamp=\"" +
           xml(format_utc(run.started)) + "\">\n";
    out += "    <properties>\n";
    property(out, "      ", "area_description", description);
    property(out, "      ", "schema", run.schema_version);
    property(out, "      ", "tool_version", run.tool_version);
    property(out, "      ", "target", run.target.description);
    property(out, "      ", "arch", run.target.arch);
    property(out, "      ", "protocol", it->second.front()->protocol.empty() ? run.protocol : it->second.front()->protocol);
    property(out, "      ", "personality", run.personality);
    property(out, "      ", "strict", run.strict ? "true" : "false");
    out += "    </properties>\n";
    for (const auto* r : it->second) {
      out += "    <testcase name=\"" + xml(r->id + ": " + r->words) + "\" classname=\"tracecorr." + xml(r->area) +
             "\" time=\"" + seconds(r->duration) + "\">\n";
      out += "      <properties>\n";
      property(out, "        ", "requirement", r->id);
      property(out, "        ", "protocol", r->protocol);
      property(out, "        ", "level", to_string(r->level));
      property(out, "        ", "role", to_string(r->role));
      property(out, "        ", "source", r->source);
      property(out, "        ", "verdict", to_string(r->verdict));
      if (!r->probe.empty()) property(out, "        ", "probe", r->probe);
      if (!r->repeat_command.empty()) property(out, "        ", "repeat_command", r->repeat_command);
      if (r->expectation != ExpectationStatus::None) {
        property(out, "        ", "expectation", to_string(r->expectation));
        property(out, "        ", "expectation_reason", r->expectation_reason);
      }
      out += "      </properties>\n";
      switch (outcome(*r, run.strict)) {
        case Outcome::Failed: {
          std::string message = r->expectation == ExpectationStatus::UnexpectedPass
                                    ? "stale expectation: remove it (" + r->expectation_reason + ")"
                                    : r->reason;
          out += "      <failure message=\"" + xml(message) + "\" type=\"" + std::string(to_string(r->level)) + "\">" +
                 xml_text(details(*r)) + "</failure>\n";
          break;
        }
        case Outcome::Errored:
          out += "      <error message=\"" + xml(r->reason) + "\" type=\"error\">" + xml_text(details(*r)) + "</error>\n";
          break;
        case Outcome::Skipped: {
          std::string message = r->expectation == ExpectationStatus::ExpectedFailure
                                    ? "expected failure: " + r->expectation_reason
                                    : r->reason;
          out += "      <skipped message=\"" + xml(message) + "\"/>\n";
          break;
        }
        case Outcome::Passed:
          if (r->verdict == Verdict::Warn)
            out += "      <system-out>WARNING: " + xml_text(details(*r)) + "</system-out>\n";
          break;
      }
      out += "    </testcase>\n";
    }
    out += "  </testsuite>\n";
  }
  out += gate_suite(run);
  out += "</testsuites>\n";
  return out;
}

}  // namespace tracecorr::report

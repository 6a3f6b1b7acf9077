// The conformance result model, its renderers and the runner (probes/runner.hpp).
#include <pybind11/chrono.h>
#include <pybind11/stl.h>

#include "common.hpp"
#include "tracecorr/conform/runner.hpp"
#include "tracecorr/conform/expectations.hpp"
#include "tracecorr/report/report.hpp"
#include "tracecorr/conform/result.hpp"

namespace tracecorr::python {

void bind_conform(py::module_& m) {
  using namespace tracecorr::conform;

  py::enum_<Verdict>(m, "Verdict")
      .value("PASS", Verdict::Pass)
      .value("FAIL", Verdict::Fail)
      .value("WARN", Verdict::Warn)
      .value("SKIP", Verdict::Skip)
      .value("ERROR", Verdict::Error)
      .def("__str__", [](Verdict v) { return std::string(to_string(v)); });
  py::enum_<ExpectationStatus>(m, "ExpectationStatus")
      .value("NONE", ExpectationStatus::None)
      .value("EXPECTED_FAILURE", ExpectationStatus::ExpectedFailure)
      .value("UNEXPECTED_PASS", ExpectationStatus::UnexpectedPass)
      .value("NOT_EVALUATED", ExpectationStatus::NotEvaluated);

  py::class_<DecodedField>(m, "DecodedField")
      .def(py::init<>())
      .def_readwrite("offset", &DecodedField::offset)
      .def_readwrite("size", &DecodedField::size)
      .def_readwrite("name", &DecodedField::name)
      .def_readwrite("value", &DecodedField::value);

  py::class_<Evidence>(m, "Evidence", "What a verdict rests on: expected vs actual, raw bytes with decoded fields.")
      .def(py::init<>())
      .def_readwrite("label", &Evidence::label)
      .def_readwrite("expected", &Evidence::expected)
      .def_readwrite("actual", &Evidence::actual)
      .def_property(
          "bytes", [](const Evidence& e) { return to_bytes(e.bytes); },
          [](Evidence& e, const py::bytes& b) { e.bytes = from_bytes(b); })
      .def_readwrite("fields", &Evidence::fields);

  py::class_<RequirementResult>(m, "RequirementResult", "The verdict on one requirement.")
      .def_readwrite("id", &RequirementResult::id)
      .def_readwrite("protocol", &RequirementResult::protocol, "The protocol whose registry defines it (\"elastic-v1\").")
      .def_readwrite("level", &RequirementResult::level)
      .def_readwrite("role", &RequirementResult::role)
      .def_readwrite("words", &RequirementResult::words)
      .def_readwrite("area", &RequirementResult::area)
      .def_readwrite("source", &RequirementResult::source)
      .def_readwrite("verdict", &RequirementResult::verdict)
      .def_readwrite("reason", &RequirementResult::reason)
      .def_readwrite("evidence", &RequirementResult::evidence)
      .def_readwrite("evidence_count", &RequirementResult::evidence_count)
      .def_readwrite("evidence_minimum", &RequirementResult::evidence_minimum)
      .def_readwrite("probe", &RequirementResult::probe)
      .def_readwrite("duration", &RequirementResult::duration)
      .def_readwrite("repeat_command", &RequirementResult::repeat_command)
      .def_readwrite("expectation", &RequirementResult::expectation)
      .def_readwrite("expectation_reason", &RequirementResult::expectation_reason)
      .def("__repr__", [](const RequirementResult& r) {
        return "<RequirementResult " + r.id + " " + std::string(to_string(r.verdict)) + ">";
      });
  m.def(
      "make_result", [](const std::string& id) { return unwrap(make_result(id)); }, py::arg("id"),
      "A RequirementResult filled from the registry; TracecorrError for an unknown id.");
  m.def("judge", &judge, py::arg("level"), py::arg("met"), py::arg("strict") = false,
        "The verdict for a requirement that was (not) met, given its level.");
  m.def("apply_level", &apply_level, py::arg("result"), py::arg("strict") = false,
        "Re-levels a Fail: SHOULD -> WARN (unless strict), MAY -> WARN.");
  m.def("fails_gate", &fails_gate, py::arg("result"), py::arg("strict") = false);

  py::class_<ProtocolRun>(m, "ProtocolRun", "One protocol of a run: how it was chosen, and whether it could be judged.")
      .def(py::init<>())
      .def_readwrite("id", &ProtocolRun::id)
      .def_readwrite("named", &ProtocolRun::named, "Named by --protocol or --only: judging nothing is an error.")
      .def_readwrite("chosen_by", &ProtocolRun::chosen_by)
      .def_readwrite("not_applicable", &ProtocolRun::not_applicable,
                     "What was seen when it was announced under a schema tracecorr does not read; \"\" when read.")
      .def("__repr__", [](const ProtocolRun& p) { return "<ProtocolRun " + p.id + ">"; });

  py::class_<TargetDescription>(m, "TargetDescription")
      .def(py::init<>())
      .def_readwrite("description", &TargetDescription::description)
      .def_readwrite("pid", &TargetDescription::pid)
      .def_readwrite("arch", &TargetDescription::arch);

  py::class_<ExpectationOutcome>(m, "ExpectationOutcome")
      .def_readwrite("id", &ExpectationOutcome::id)
      .def_readwrite("reason", &ExpectationOutcome::reason)
      .def_readwrite("status", &ExpectationOutcome::status);

  py::class_<RunResult>(m, "RunResult", "One conformance run: the model every report renders.")
      .def(py::init<>())
      .def_readwrite("tool_version", &RunResult::tool_version)
      .def_readonly("schema_version", &RunResult::schema_version)
      .def_readwrite("target", &RunResult::target)
      .def_readwrite("protocol", &RunResult::protocol, "The protocols judged, ids joined by \",\".")
      .def_readwrite("protocols", &RunResult::protocols, "One ProtocolRun per protocol (a copy: assign back).")
      .def_readwrite("only", &RunResult::only)
      .def_readwrite("notes", &RunResult::notes)
      .def_readwrite("personality", &RunResult::personality)
      .def_readwrite("strict", &RunResult::strict)
      .def_readwrite("started", &RunResult::started)
      .def_readwrite("finished", &RunResult::finished)
      .def_readwrite("results", &RunResult::results,
                     "A copy of the results: change one, then assign the list back (or use add_result).")
      .def_readwrite("expectations", &RunResult::expectations)
      .def_readwrite("counters", &RunResult::counters)
      .def(
          "add_result", [](RunResult& r, const RequirementResult& x) { r.results.push_back(x); }, py::arg("result"))
      .def(
          "result", [](const RunResult& r, const std::string& id) -> std::optional<RequirementResult> {
            for (const auto& x : r.results)
              if (x.id == id) return x;
            return std::nullopt;
          },
          py::arg("id"), "The (first) result for this requirement id, or None.");

  m.def(
      "summarize",
      [](const RunResult& run) {
        auto s = summarize(run);
        py::dict d;
        d["passed"] = s.passed;
        d["failed"] = s.failed;
        d["warnings"] = s.warnings;
        d["skipped"] = s.skipped;
        d["errors"] = s.errors;
        d["expected_failures"] = s.expected_failures;
        d["stale_expectations"] = s.stale_expectations;
        return d;
      },
      py::arg("run"));
  m.def(
      "summary_line", [](const RunResult& run) { return summary_line(summarize(run)); }, py::arg("run"),
      "'12 passed, 1 failed, 2 warnings, 3 skipped, 0 errors'");
  m.def("exit_code", &exit_code, py::arg("run"), py::arg("strict") = false,
        "The gate: 0 ok, 1 failure or stale expectation, 3 environment error or nothing judged (see unjudged).");
  m.def("unjudged", &unjudged, py::arg("run"),
        "Why the gate cannot pass on what was judged, one line each (the run, a protocol named, an --only token "
        "that judged nothing); empty when something was judged everywhere it had to be.");
  m.def("protocols_of", &protocols_of, py::arg("run"),
        "The run's protocol sections (derived from its results when it has none).");
  m.def(
      "protocol_status",
      [](const RunResult& run, const ProtocolRun& p) { return std::string(protocol_status(run, p)); }, py::arg("run"),
      py::arg("protocol"), "\"judged\", \"not-applicable\" or \"nothing-judged\".");
  m.def(
      "results_of",
      [](const RunResult& run, const std::string& protocol) {
        std::vector<RequirementResult> out;
        for (const auto* r : results_of(run, protocol)) out.push_back(*r);
        return out;
      },
      py::arg("run"), py::arg("protocol"), "The results of one protocol, in registry order (copies).");
  m.def(
      "render_console",
      [](const RunResult& run, bool color, bool show_passes) {
        report::ConsoleOptions o;
        o.color = color;
        o.show_passes = show_passes;
        return report::render_console(run, o);
      },
      py::arg("run"), py::arg("color") = false, py::arg("show_passes") = true);
  m.def("render_junit", &report::render_junit, py::arg("run"));
  m.def("render_json", &report::render_json, py::arg("run"), "JSON matching spec/report-schema-v2.json.");
  m.def("render_html", &report::render_html, py::arg("run"),
        "One self-contained HTML page: summary, every requirement with its evidence, pictures.");
  m.def(
      "write_text_file", [](const std::string& path, const std::string& text) { check(report::write_text_file(path, text)); },
      py::arg("path"), py::arg("text"), "Replaces the file atomically.");
  m.def(
      "apply_expectations_file",
      [](RunResult& run, const std::string& path) { apply_expectations(run, unwrap(load_expectations(path))); },
      py::arg("run"), py::arg("path"), "Marks listed failures XFAIL and stale entries XPASS (tracecorr conform --expect).");
  m.def(
      "selected_requirements",
      [](const std::vector<std::string>& only, const std::string& protocol) {
        return selected_requirements(*unwrap(choose_suite(protocol)), only);
      },
      py::arg("only") = std::vector<std::string>{}, py::arg("protocol") = "",
      "The agent-role requirement ids a run of `protocol` (default: the only one) judges, filtered by `only`.");

  m.def(
      "run_conformance",
      [](std::vector<std::string> command, std::optional<pid_t> pid, std::vector<std::string> only, bool strict,
         const std::string& personality, double time_scale, const std::string& gdbstub, std::uint16_t otlp_port,
         bool quiet, const std::string& protocol, std::map<std::string, std::string> options) {
        RunOptions o;
        o.target.command = std::move(command);
        o.target.pid = pid;
        o.target.gdbstub = gdbstub;
        o.target.otlp_port = otlp_port;
        o.only = std::move(only);
        o.strict = strict;
        o.protocol = protocol;
        o.progress = quiet ? nullptr : stderr;
        // `personality` is kept as a keyword for compatibility: it is a suite
        // option like any other in `options` (tracecorr conform --NAME).
        options.try_emplace("personality", personality);
        o.scenario.settings = std::move(options);
        if (auto suite = choose_suite(protocol))
          if (auto st = (*suite)->check(o.scenario); !st) throw py::value_error(st.error().message());
        o.scenario.time_scale = time_scale;
        std::optional<Expected<RunResult>> r;
        {
          py::gil_scoped_release nogil;
          r.emplace(run_conformance(o));
        }
        return unwrap(std::move(*r));
      },
      py::arg("command") = std::vector<std::string>{}, py::arg("pid") = std::nullopt,
      py::arg("only") = std::vector<std::string>{}, py::arg("strict") = false, py::arg("personality") = "spec",
      py::arg("time_scale") = 1.0, py::arg("gdbstub") = "", py::arg("otlp_port") = 0, py::arg("quiet") = true,
      py::arg("protocol") = "", py::arg("options") = std::map<std::string, std::string>{},
      "The `tracecorr conform` run (GIL released). Give command (launch mode) or pid (attach mode); protocol "
      "(default: auto, every one the target publishes; or ids joined by \",\") and the suites' options "
      "(tracecorr conform --NAME VALUE). "
      "TracecorrError for usage errors (unknown id); environment failures are ERROR verdicts.");
}

}  // namespace tracecorr::python

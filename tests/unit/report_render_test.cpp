// Console, JUnit and JSON reports rendered from one RunResult. The JUnit and
// JSON outputs are also parsed by real parsers (xml.etree, jsonschema) in
// tests/py/test_reports.py, from the files ReportSamples.Write produces.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include "report_test_support.hpp"
#include "tracecorr/conform/expectations.hpp"
#include "tracecorr/report/report.hpp"

namespace tracecorr::conform {

using namespace tracecorr::report;
namespace {

using test_support::sample_run;

bool has_raw_control(std::string_view text) {
  for (unsigned char c : text)
    if ((c < 0x20 && c != '\n') || c == 0x7f) return true;
  return false;
}

std::size_t count(std::string_view text, std::string_view needle) {
  std::size_t n = 0;
  for (std::size_t at = text.find(needle); at != std::string_view::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

TEST(ConsoleReport, OneLinePerRequirementWithMarksGroupedByArea) {
  std::string out = render_console(sample_run());
  EXPECT_NE(out.find("  ✔ LOAD-01 [MUST]"), std::string::npos) << out;
  EXPECT_NE(out.find("  ✘ NAME-02 [MUST] test.stack_ids is a string"), std::string::npos) << out;
  EXPECT_NE(out.find("  ! WIRE-05 [SHOULD]"), std::string::npos);
  EXPECT_NE(out.find("  - OPTS-02 [MAY]"), std::string::npos);
  EXPECT_NE(out.find("  E SLOT-07 [SHOULD]"), std::string::npos);
  // Areas in registry order: LOAD before SLOT before WIRE before NAME before OPTS.
  std::size_t load = out.find("\nLOAD"), slot = out.find("\nSLOT"), wire = out.find("\nWIRE"), name = out.find("\nNAME"),
              opts = out.find("\nOPTS");
  EXPECT_NE(opts, std::string::npos) << out;
  EXPECT_LT(load, slot);
  EXPECT_LT(slot, wire);
  EXPECT_LT(wire, name);
  EXPECT_LT(name, opts);
  EXPECT_NE(out.find("1 passed, 1 failed, 1 warnings, 1 skipped, 1 errors\n"), std::string::npos);
}

TEST(ConsoleReport, FailureShowsWordsExpectedActualBytesAndRepeatCommand) {
  std::string out = render_console(sample_run());
  EXPECT_NE(out.find("-> The type of `test.stack_ids` is string-array."), std::string::npos) << out;
  EXPECT_NE(out.find("Expected: string-array"), std::string::npos);
  EXPECT_NE(out.find("  Actual: string \"YLQguzhR2dR6y5M9vnA5mw\""), std::string::npos);
  EXPECT_NE(out.find("0000  01 00 01 00 4b f9 2f 35 77 b3 4d a6 a3 ce 92 9d  |....K./5w.M.....|"), std::string::npos)
      << out;
  EXPECT_NE(out.find("trace_id = 4bf92f3577b34da6a3ce929d0e0e4736"), std::string::npos);
  EXPECT_NE(out.find("Repeat: tracecorr conform --only NAME-02 -- java -jar 'app jar'"), std::string::npos);
}

TEST(ConsoleReport, NoColourUnlessAskedAndHostileBytesAreEscaped) {
  std::string plain = render_console(sample_run());
  EXPECT_FALSE(has_raw_control(plain)) << "a terminal escape or control byte reached the console report";
  EXPECT_NE(plain.find("\\x1b[31m red \\xff\\xfe"), std::string::npos) << plain;
  ConsoleOptions colour;
  colour.color = true;
  EXPECT_NE(render_console(sample_run(), colour).find("\x1b[31m"), std::string::npos);
}

TEST(ConsoleReport, XfailAndXpassAreMarked) {
  RunResult run = sample_run();
  apply_expectations(run, Expectations{1, {{"NAME-02", "agent sends a string"}, {"LOAD-01", "fixed since"}}});
  std::string out = render_console(run);
  EXPECT_NE(out.find("(expected failure: agent sends a string)"), std::string::npos) << out;
  EXPECT_NE(out.find("stale expectation: remove it"), std::string::npos);
  EXPECT_NE(out.find("1 stale expectations"), std::string::npos);
}

TEST(JunitReport, SuitesPerAreaCasesPerRequirementAndEscapedEvidence) {
  std::string xml = render_junit(sample_run());
  EXPECT_EQ(xml.rfind("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n", 0), 0u);
  EXPECT_NE(xml.find("<testsuites name=\"tracecorr conform\" tests=\"5\" failures=\"1\" errors=\"1\" skipped=\"1\""),
            std::string::npos)
      << xml;
  EXPECT_EQ(count(xml, "<testsuite "), 5u);
  EXPECT_EQ(count(xml, "<testcase "), 5u);
  EXPECT_EQ(count(xml, "<testcase "), count(xml, "</testcase>"));
  EXPECT_EQ(count(xml, "<failure "), 1u);
  EXPECT_EQ(count(xml, "<error "), 1u);
  EXPECT_EQ(count(xml, "<skipped "), 1u);
  EXPECT_NE(xml.find("<system-out>WARNING: WIRE-05"), std::string::npos);  // a warning passes, noted
  EXPECT_FALSE(has_raw_control(xml));
  EXPECT_EQ(xml.find("<tag"), std::string::npos) << "evidence markup was not escaped";
  EXPECT_NE(xml.find("&lt;tag attr=&quot;x&quot;&gt;&amp;amp;"), std::string::npos);
}

TEST(JunitReport, StrictTurnsShouldWarningsIntoFailures) {
  RunResult run = sample_run();
  run.strict = true;
  std::string xml = render_junit(run);
  EXPECT_EQ(count(xml, "<failure "), 2u);
}

TEST(JsonReport, CarriesSchemaSummaryGateAndEvidence) {
  auto doc = nlohmann::json::parse(render_json(sample_run()));
  EXPECT_EQ(doc["schema"], "tracecorr-report/2");
  EXPECT_EQ(doc["summary"]["failed"], 1);
  EXPECT_EQ(doc["gate"]["exit_code"], 1);
  EXPECT_EQ(doc["target"]["pid"], 4242);
  EXPECT_EQ(doc["started"], "2023-11-14T22:13:20.000Z");
  ASSERT_EQ(doc["results"].size(), 5u);
  const auto& attr = doc["results"][3];  // registry order: LOAD, SLOT, WIRE, NAME, OPTS
  EXPECT_EQ(attr["id"], "NAME-02");
  EXPECT_EQ(attr["verdict"], "fail");
  EXPECT_EQ(attr["evidence"][1]["bytes_hex"], "010001004bf92f3577b34da6a3ce929d0e0e4736ff");
  EXPECT_EQ(attr["evidence"][1]["fields"][2]["name"], "trace_id");
}

// Two protocols: the tests' own, judged, and one found under another schema.
RunResult sectioned_run() {
  RunResult run = sample_run();
  run.protocol = std::string(tracecorr::test_support::kTestProtocolId) + ",other-protocol";
  run.protocols = {{std::string(tracecorr::test_support::kTestProtocolId), false, "a trial launch: pid 4242 publishes it", ""},
                   {"other-protocol", false, "a trial launch: pid 4242 announces it", "schema other_v1_dev; variable x"}};
  return run;
}

TEST(JsonReport, CarriesAProtocolPerResultAndASectionPerProtocol) {
  auto doc = nlohmann::json::parse(render_json(sectioned_run()));
  for (const auto& r : doc["results"]) EXPECT_EQ(r["protocol"], tracecorr::test_support::kTestProtocolId);
  ASSERT_EQ(doc["protocols"].size(), 2u);
  EXPECT_EQ(doc["protocols"][0]["status"], "judged");
  EXPECT_EQ(doc["protocols"][0]["summary"]["failed"], 1);
  EXPECT_EQ(doc["protocols"][1]["status"], "not-applicable");
  EXPECT_EQ(doc["protocols"][1]["not_applicable"], "schema other_v1_dev; variable x");
  EXPECT_EQ(doc["gate"]["unjudged"].size(), 0u);
}

TEST(JsonReport, NothingJudgedIsInTheGate) {
  RunResult run = sample_run();
  for (auto& r : run.results) r.verdict = Verdict::Skip;
  auto doc = nlohmann::json::parse(render_json(run));
  EXPECT_EQ(doc["gate"]["exit_code"], 3);
  ASSERT_EQ(doc["gate"]["unjudged"].size(), 1u);
  EXPECT_EQ(doc["gate"]["unjudged"][0].get<std::string>().rfind("nothing was judged: 5 skipped of 5", 0), 0u);
}

TEST(ConsoleReport, ASectionPerProtocolWhenSeveral) {
  std::string out = render_console(sectioned_run());
  auto ours = out.find("== " + std::string(tracecorr::test_support::kTestProtocolId));
  auto other = out.find("== other-protocol (a trial launch: pid 4242 announces it)");
  ASSERT_NE(ours, std::string::npos) << out;
  ASSERT_NE(other, std::string::npos) << out;
  EXPECT_LT(ours, other);
  EXPECT_NE(out.find("  judged: 1 passed, 1 failed, 1 warnings, 1 skipped, 1 errors"), std::string::npos) << out;
  EXPECT_NE(out.find("  - not applicable: schema other_v1_dev; variable x (0 requirements not judged)"), std::string::npos)
      << out;
  // One protocol: no section headings, as before.
  EXPECT_EQ(render_console(sample_run()).find("== "), std::string::npos);
}

TEST(ConsoleReport, SaysWhyNothingWasJudgedBeforeTheSummary) {
  RunResult run = sample_run();
  run.results = {test_support::result("OPTS-02", Verdict::Skip, "the agent does not support auto mode")};
  std::string out = render_console(run);
  auto line = out.find("not judged: nothing was judged: 1 skipped of 1 requirement (OPTS-02 skip: the agent does not");
  ASSERT_NE(line, std::string::npos) << out;
  EXPECT_LT(line, out.find("0 passed, 0 failed, 0 warnings, 1 skipped, 0 errors"));
}

TEST(JunitReport, NothingJudgedIsAnErrorCase) {
  RunResult run = sample_run();
  run.results = {test_support::result("OPTS-02", Verdict::Skip, "not applicable")};
  std::string xml = render_junit(run);
  EXPECT_NE(xml.find("<testsuite name=\"gate\" tests=\"1\" failures=\"0\" errors=\"1\""), std::string::npos) << xml;
  EXPECT_NE(xml.find("type=\"nothing-judged\""), std::string::npos);
  EXPECT_NE(xml.find("<testsuites name=\"tracecorr conform\" tests=\"2\" failures=\"0\" errors=\"1\""), std::string::npos)
      << xml;
  EXPECT_EQ(render_junit(sample_run()).find("name=\"gate\""), std::string::npos);
  EXPECT_NE(render_junit(sample_run()).find("<property name=\"protocol\" value=\"tracecorr-test\"/>"), std::string::npos);
}

// Writes the sample reports that tests/py/test_reports.py validates (it runs
// this test with TRACECORR_REPORT_SAMPLE_DIR set), and the registry of the
// tests' protocol they judge by; without it, into a
// temporary directory, so that under ctest the writing itself is checked.
TEST(ReportSamples, Write) {
  const char* dir = std::getenv("TRACECORR_REPORT_SAMPLE_DIR");
  std::filesystem::path out = dir ? std::filesystem::path(dir)
                                  : std::filesystem::temp_directory_path() /
                                        ("tracecorr-report-samples-" + std::to_string(::getpid()));
  std::filesystem::create_directories(out);
  RunResult plain = sample_run();
  RunResult with_expectations = sample_run();
  apply_expectations(with_expectations, Expectations{1, {{"NAME-02", "agent <sends> a \"string\""}, {"LOAD-01", "stale"}}});
  RunResult empty;
  RunResult sectioned = sectioned_run();
  RunResult skipped = sample_run();  // every verdict a skip: the gate's error (exit 3)
  for (auto& r : skipped.results) r.verdict = Verdict::Skip;
  skipped.only = {"LOAD", "OPTS-02"};
  for (auto [name, run] : {std::pair{"plain", &plain}, std::pair{"expectations", &with_expectations},
                           std::pair{"empty", &empty}, std::pair{"sectioned", &sectioned},
                           std::pair{"skipped", &skipped}}) {
    ASSERT_TRUE(write_text_file(out / (std::string(name) + ".json"), render_json(*run)).ok());
    ASSERT_TRUE(write_text_file(out / (std::string(name) + ".xml"), render_junit(*run)).ok());
    ASSERT_TRUE(write_text_file(out / (std::string(name) + ".txt"), render_console(*run)).ok());
  }
  // The registry the samples' requirements come from, for the schema tests' id checks.
  ASSERT_TRUE(write_text_file(out / "registry.json", std::string(tracecorr::test_support::test_protocol().registry_json)).ok());
  for (const char* file : {"plain.json", "plain.xml", "plain.txt", "expectations.json", "empty.xml", "registry.json"})
    EXPECT_GT(std::filesystem::file_size(out / file), 0u) << file;
  if (!dir) std::filesystem::remove_all(out);
}

}  // namespace
}  // namespace tracecorr::conform

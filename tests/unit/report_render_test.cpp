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
#include "tracecorr/conform/report.hpp"

namespace tracecorr::conform {
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
  EXPECT_NE(out.find("  ✔ ELF-01 [MUST]"), std::string::npos) << out;
  EXPECT_NE(out.find("  ✘ ATTR-02 [MUST] the stack trace ids attribute is a string"), std::string::npos) << out;
  EXPECT_NE(out.find("  ! MSG-05 [SHOULD]"), std::string::npos);
  EXPECT_NE(out.find("  - CONF-02 [MAY]"), std::string::npos);
  EXPECT_NE(out.find("  E TLS-07 [SHOULD]"), std::string::npos);
  // Areas in registry order: ELF before TLS before MSG before ATTR before CONF.
  std::size_t elf = out.find("\nELF"), tls = out.find("\nTLS"), msg = out.find("\nMSG"), attr = out.find("\nATTR"),
              conf = out.find("\nCONF");
  EXPECT_LT(elf, tls);
  EXPECT_LT(tls, msg);
  EXPECT_LT(msg, attr);
  EXPECT_LT(attr, conf);
  EXPECT_NE(out.find("1 passed, 1 failed, 1 warnings, 1 skipped, 1 errors\n"), std::string::npos);
}

TEST(ConsoleReport, FailureShowsWordsExpectedActualBytesAndRepeatCommand) {
  std::string out = render_console(sample_run());
  // The requirement's words, as its registry has them.
  const Requirement* attr = find_requirement("ATTR-02");
  ASSERT_TRUE(attr != nullptr && !attr->summary.empty());
  EXPECT_NE(out.find("-> " + std::string(attr->summary) + "\n"), std::string::npos) << out;
  EXPECT_NE(out.find("Expected: string-array"), std::string::npos);
  EXPECT_NE(out.find("  Actual: string \"YLQguzhR2dR6y5M9vnA5mw\""), std::string::npos);
  EXPECT_NE(out.find("0000  01 00 01 00 4b f9 2f 35 77 b3 4d a6 a3 ce 92 9d  |....K./5w.M.....|"), std::string::npos)
      << out;
  EXPECT_NE(out.find("trace_id = 4bf92f3577b34da6a3ce929d0e0e4736"), std::string::npos);
  EXPECT_NE(out.find("Repeat: tracecorr conform --only ATTR-02 -- java -jar 'app jar'"), std::string::npos);
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
  apply_expectations(run, Expectations{1, {{"ATTR-02", "agent sends a string"}, {"ELF-01", "fixed since"}}});
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
  EXPECT_NE(xml.find("<system-out>WARNING: MSG-05"), std::string::npos);  // a warning passes, noted
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
  EXPECT_EQ(doc["schema"], "tracecorr-report/1");
  EXPECT_EQ(doc["summary"]["failed"], 1);
  EXPECT_EQ(doc["gate"]["exit_code"], 1);
  EXPECT_EQ(doc["target"]["pid"], 4242);
  EXPECT_EQ(doc["started"], "2023-11-14T22:13:20.000Z");
  ASSERT_EQ(doc["results"].size(), 5u);
  const auto& attr = doc["results"][3];  // registry order: ELF, TLS, MSG, ATTR, CONF
  EXPECT_EQ(attr["id"], "ATTR-02");
  EXPECT_EQ(attr["verdict"], "fail");
  EXPECT_EQ(attr["evidence"][1]["bytes_hex"], "010001004bf92f3577b34da6a3ce929d0e0e4736ff");
  EXPECT_EQ(attr["evidence"][1]["fields"][2]["name"], "trace_id");
}

// Writes the sample reports that tests/py/test_reports.py validates (it runs
// this test with TRACECORR_REPORT_SAMPLE_DIR set); without it, into a
// temporary directory, so that under ctest the writing itself is checked.
TEST(ReportSamples, Write) {
  const char* dir = std::getenv("TRACECORR_REPORT_SAMPLE_DIR");
  std::filesystem::path out = dir ? std::filesystem::path(dir)
                                  : std::filesystem::temp_directory_path() /
                                        ("tracecorr-report-samples-" + std::to_string(::getpid()));
  std::filesystem::create_directories(out);
  RunResult plain = sample_run();
  RunResult with_expectations = sample_run();
  apply_expectations(with_expectations, Expectations{1, {{"ATTR-02", "agent <sends> a \"string\""}, {"ELF-01", "stale"}}});
  RunResult empty;
  for (auto [name, run] : {std::pair{"plain", &plain}, std::pair{"expectations", &with_expectations},
                           std::pair{"empty", &empty}}) {
    ASSERT_TRUE(write_text_file(out / (std::string(name) + ".json"), render_json(*run)).ok());
    ASSERT_TRUE(write_text_file(out / (std::string(name) + ".xml"), render_junit(*run)).ok());
    ASSERT_TRUE(write_text_file(out / (std::string(name) + ".txt"), render_console(*run)).ok());
  }
  for (const char* file : {"plain.json", "plain.xml", "plain.txt", "expectations.json", "empty.xml"})
    EXPECT_GT(std::filesystem::file_size(out / file), 0u) << file;
  if (!dir) std::filesystem::remove_all(out);
}

}  // namespace
}  // namespace tracecorr::conform

// The HTML report: self-contained, every requirement named, hostile strings
// escaped everywhere (text, attributes, SVG), pictures drawn from the
// figures, and a saved JSON report renders to the same page.
#include <gtest/gtest.h>
#include <unistd.h>

#include <regex>

#include <nlohmann/json.hpp>

#include "report_test_support.hpp"
#include "tracecorr/report/report.hpp"
#include "tracecorr/symbols.hpp"

namespace tracecorr::conform {

using namespace tracecorr::report;
namespace {

const std::string kHostile = std::string("</svg><script>alert(1)</script>\"'&\x01\x1b[31m\xff", 45);

// A test protocol's captions: the engine draws whatever words it is handed.
ScatterFigure scatter_captioned() {
  ScatterFigure f;
  f.caption = {"lag", "WIRE-01", "Lag timing", "nothing to draw", "lag of each item", "item ended (s)", "lag (ms)",
               "lag", "roots", "leaves", "baseline, never held", "hold in force", "hold unclear: not judged"};
  return f;
}

RecordStoresFigure record_stores_captioned() {
  return {{"slot", "SLOT-01", "slot update timeline", "no store watched", "one column per state"}, {}};
}

RunResult run_with_figures() {
  RunResult run = test_support::sample_run();
  Figures& f = run.figures;
  ScatterFigure scatter = scatter_captioned();
  for (int i = 0; i < 6; ++i) {
    scatter.points.push_back({"enabled", "root " + std::to_string(i) + " " + kHostile, true, 100.0 * i, 1000 + 10.0 * i,
                              i < 5 ? std::optional<double>(1000) : std::nullopt});
    scatter.points.push_back({"enabled", "leaf " + std::to_string(i), false, 100.0 * i, 3.0 + i, 1000});
  }
  f.scatters.push_back(scatter);
  f.record_stores = record_stores_captioned();
  for (unsigned i = 0; i < 5; ++i)
    f.record_stores->stores.push_back({"enabled", 77, 0x7f0000001000, i, 0.1 * i, i % 2, i ? "valid" : "", 0x401000 + i, i == 3});
  ContextStacks flame;
  flame.trace_id = "4bf92f3577b34da6a3ce929d0e0e4736";
  flame.context_id = "00f067aa0ba902b7";
  flame.stacks = {{{"main (app)", "work (libwork.so)", "spin (libwork.so)"}, 30},
                  {{"main (app)", "work (libwork.so)", kHostile}, 10},
                  {{"main (app)", "idle (app)"}, 5}};
  flame.samples = 45;
  f.stacks.caption = {"Where each request's time went", "request", "requests"};
  f.stacks.source = "a test's samples";
  f.stacks.samples = 50;
  f.stacks.samples_without_context = 5;
  f.stacks.contexts_total = 1;
  f.stacks.contexts.push_back(flame);
  f.timelines.push_back({"enabled", 3000, {{10, "registration", "delay 300 ms"}, {20, "message", kHostile}}});
  return run;
}

std::size_t count(const std::string& text, const std::string& needle) {
  std::size_t n = 0;
  for (auto at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

TEST(HtmlReport, NamesEveryRequirementWithVerdictAndSummary) {
  RunResult run = run_with_figures();
  std::string page = render_html(run);
  for (const auto& r : run.results) {
    EXPECT_NE(page.find("id=\"req-" + r.id + "\""), std::string::npos) << r.id;
  }
  EXPECT_NE(page.find("data-verdict=\"fail\""), std::string::npos);
  EXPECT_NE(page.find(std::string(tracecorr::test_support::kTestProtocolTitle) + " (" + std::string(tracecorr::test_support::kTestProtocolId) + ")"), std::string::npos);
  EXPECT_NE(page.find("0.1.0-test"), std::string::npos);
  EXPECT_NE(page.find("id=\"exit-code\"><b>1</b>"), std::string::npos);  // NAME-02 failed
  // Evidence decoded field by field, with the field's own bytes.
  EXPECT_NE(page.find("<td>trace_id</td><td class=\"mono\">4bf92f3577b34da6a3ce929d0e0e4736</td>"), std::string::npos);
  EXPECT_NE(page.find("tracecorr conform --only NAME-02"), std::string::npos);
}

TEST(HtmlReport, SelfContainedAndHostileStringsEscaped) {
  std::string page = render_html(run_with_figures());
  EXPECT_EQ(count(page, "<script"), 1u);  // only the report's own filter script
  EXPECT_EQ(page.find("<tag"), std::string::npos);
  EXPECT_EQ(page.find("alert(1)</script>"), std::string::npos);
  EXPECT_NE(page.find("&lt;/svg&gt;&lt;script&gt;alert(1)&lt;/script&gt;"), std::string::npos);
  EXPECT_EQ(page.find('\x1b'), std::string::npos);
  EXPECT_EQ(page.find('\x01'), std::string::npos);
  EXPECT_EQ(page.find("\xff"), std::string::npos);
  EXPECT_EQ(page.find(std::string(1, '\0')), std::string::npos);
  // No network: nothing is loaded from anywhere.
  EXPECT_EQ(page.find(" src="), std::string::npos);
  EXPECT_EQ(page.find("http://"), std::string::npos);
  EXPECT_EQ(page.find("https://"), std::string::npos);
  EXPECT_EQ(page.find("@import"), std::string::npos);
  EXPECT_EQ(page.find("url("), std::string::npos);
}

// Counter names come from a saved report as much as from the run: escaped
// like every other string (they were printed raw into the summary table).
TEST(HtmlReport, CounterNamesAreEscaped) {
  RunResult run = run_with_figures();
  run.counters[kHostile] = 7;
  run.counters["<img src=x onerror=alert(2)>"] = 8;
  std::string page = render_html(run);
  EXPECT_EQ(count(page, "<script"), 1u);
  EXPECT_EQ(page.find("<img"), std::string::npos);
  EXPECT_NE(page.find("&lt;img src=x onerror=alert(2)&gt;"), std::string::npos);
}

// The CSP allows the page's own script by its hash, and no other inline script.
TEST(HtmlReport, ContentSecurityPolicyAllowsOnlyThePagesOwnScript) {
  std::string page = render_html(run_with_figures());
  std::smatch csp;
  ASSERT_TRUE(std::regex_search(page, csp, std::regex("Content-Security-Policy\" content=\"([^\"]*)\"")));
  const std::string policy = csp[1];
  std::smatch script_src;
  ASSERT_TRUE(std::regex_search(policy, script_src, std::regex("script-src ([^;]*)"))) << policy;
  EXPECT_EQ(script_src[1].str().find("unsafe-inline"), std::string::npos) << policy;
  EXPECT_EQ(policy.find("unsafe-eval"), std::string::npos) << policy;
  // The hash is the script's own: the text between <script> and </script>.
  auto open = page.find("<script>") + 8;
  std::string script = page.substr(open, page.find("</script>", open) - open);
  EXPECT_EQ(script_src[1].str(), csp_script_source(script));
  // Known vector: SHA-256("abc") in base64.
  EXPECT_EQ(csp_script_source("abc"), "'sha256-ungWv48Bz+pBQUDeXa4iI7ADYaOWF3qctBD/YfIAFa0='");
}

TEST(HtmlReport, DrawsTheFigures) {
  std::string page = render_html(run_with_figures());
  // The scatter: one circle per primary point, one square per baseline point, the step line, the package's words.
  auto start = page.find("data-figure=\"lag\"");
  ASSERT_NE(start, std::string::npos);
  std::string scatter = page.substr(start, page.find("</svg>", start) - start);
  EXPECT_EQ(count(scatter, "<circle"), 6u + 2u);  // + two legend markers
  EXPECT_EQ(count(scatter, "<rect x"), 6u + 2u);  // + frame and legend
  EXPECT_NE(scatter.find("stroke-dasharray"), std::string::npos);
  EXPECT_NE(page.find("<h3>WIRE-01: Lag timing</h3>"), std::string::npos);
  EXPECT_NE(scatter.find(">roots (6)</text>"), std::string::npos);
  EXPECT_NE(scatter.find(">baseline, never held</text>"), std::string::npos);
  EXPECT_NE(page.find("<th>hold in force</th><th>roots</th><th>median lag</th>"), std::string::npos);
  EXPECT_NE(page.find("<td>leaves (baseline)</td>"), std::string::npos);
  // The flame graphs in the package's word for a context.
  EXPECT_NE(page.find("<h3>Where each request&#39;s time went</h3>"), std::string::npos);
  EXPECT_NE(page.find("5 without a current request; 1 requests had samples"), std::string::npos);
  EXPECT_NE(page.find("\">request 00f067aa0ba902b7 <span"), std::string::npos);
  // Flame graph: a rectangle per distinct frame path, and the top function.
  start = page.find("data-figure=\"flame\"");
  ASSERT_NE(start, std::string::npos);
  std::string flame = page.substr(start, page.find("</svg>", start) - start);
  EXPECT_EQ(count(flame, "<rect"), 5u);  // main, work, spin, hostile, idle
  EXPECT_NE(page.find("<td class=\"mono\">spin (libwork.so)</td><td>30 (67%)</td>"), std::string::npos);
  EXPECT_NE(page.find("a test&#39;s samples"), std::string::npos);
  // The record's stores: one column per state, the violating one red.
  EXPECT_NE(page.find("<h3>SLOT-01: slot update timeline</h3>"), std::string::npos);
  start = page.find("data-figure=\"slot\"");
  ASSERT_NE(start, std::string::npos);
  std::string tls = page.substr(start, page.find("</svg>", start) - start);
  EXPECT_EQ(count(tls, "<g><title>"), 5u);
  EXPECT_EQ(count(tls, "#c62828"), 1u);
  EXPECT_NE(page.find("data-figure=\"timeline\""), std::string::npos);
}

TEST(HtmlReport, RecordStoresWindowShowsALateViolation) {
  RunResult run = test_support::sample_run();
  run.figures.record_stores = record_stores_captioned();
  for (unsigned i = 0; i < 100; ++i)
    run.figures.record_stores->stores.push_back({"enabled", 5, 0x1000, i, 0.01 * i, 1, "span_id", 0x401000, i == 70});
  std::string page = render_html(run);
  EXPECT_NE(page.find("(states 62..99 of 100)"), std::string::npos);
  auto start = page.find("data-figure=\"slot\"");
  ASSERT_NE(start, std::string::npos);
  std::string tls = page.substr(start, page.find("</svg>", start) - start);
  EXPECT_EQ(count(tls, "#c62828"), 1u);
  EXPECT_EQ(count(tls, "<g><title>"), 38u);
}

TEST(HtmlReport, SavedJsonRendersTheSamePage) {
  RunResult run = run_with_figures();
  auto parsed = parse_json_report(render_json(run), "report.json");
  ASSERT_TRUE(parsed.ok()) << parsed.error().message();
  EXPECT_EQ(render_html(*parsed), render_html(run));
}

TEST(SavedReport, SectionsOnlyAndProtocolsRoundTrip) {
  RunResult run = test_support::sample_run();
  run.protocols = {{std::string(tracecorr::test_support::kTestProtocolId), true, "--protocol", ""},
                   {"other-protocol", true, "--protocol", "schema other_v1_dev"}};
  run.only = {"LOAD", "OPTS-02"};
  run.notes = {"session enabled judged pid 4242"};
  auto parsed = parse_json_report(render_json(run), "report.json");
  ASSERT_TRUE(parsed.ok()) << parsed.error().message();
  ASSERT_EQ(parsed->protocols.size(), 2u);
  EXPECT_TRUE(parsed->protocols[1].named);
  EXPECT_EQ(parsed->protocols[1].chosen_by, "--protocol");
  EXPECT_EQ(parsed->protocols[1].not_applicable, "schema other_v1_dev");
  EXPECT_EQ(parsed->only, run.only);
  EXPECT_EQ(parsed->notes, run.notes);
  EXPECT_EQ(parsed->results.front().protocol, tracecorr::test_support::kTestProtocolId);
  EXPECT_EQ(unjudged(*parsed), unjudged(run));
  EXPECT_EQ(exit_code(*parsed, false), exit_code(run, false));
  EXPECT_EQ(render_json(*parsed), render_json(run));
}

TEST(SavedReport, AVersionOneReportIsStillRead) {
  // What conform wrote before protocol sections: no "protocols", "only" or per-result "protocol".
  auto doc = nlohmann::ordered_json::parse(render_json(test_support::sample_run()));
  doc["schema"] = "tracecorr-report/1";
  doc.erase("protocols");
  doc.erase("only");
  doc["gate"].erase("unjudged");
  for (auto& r : doc["results"]) r.erase("protocol");
  auto parsed = parse_json_report(doc.dump(), "old.json");
  ASSERT_TRUE(parsed.ok()) << parsed.error().message();
  EXPECT_EQ(parsed->schema_version, "tracecorr-report/1");
  EXPECT_TRUE(parsed->protocols.empty());
  for (const auto& r : parsed->results) EXPECT_EQ(r.protocol, tracecorr::test_support::kTestProtocolId);
  ASSERT_EQ(protocols_of(*parsed).size(), 1u);
  EXPECT_EQ(exit_code(*parsed, false), kExitFailure);
}

TEST(HtmlReport, MalformedJsonIsNamed) {
  auto bad = parse_json_report("{\"schema\":\"other\"}", "x.json");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message().find("x.json"), std::string::npos);
  std::string json = render_json(test_support::sample_run());
  json.replace(json.find("\"verdict\": \"pass\""), 17, "\"verdict\": \"maybe\"");
  bad = parse_json_report(json, "y.json");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message().find("results[0]"), std::string::npos) << bad.error().message();
  EXPECT_FALSE(parse_json_report("[1,2", "z.json").ok());
}

__attribute__((noinline)) int symbolised_function_for_test(int x) { return x * 3 + 1; }

TEST(Symbolizer, NamesAFunctionOfThisProcessFromItsElfSymbols) {
  Symbolizer symbols(getpid());
  auto address = reinterpret_cast<std::uint64_t>(&symbolised_function_for_test);
  std::string name = symbols.name(address + 1);
  EXPECT_NE(name.find("symbolised_function_for_test"), std::string::npos) << name;
  EXPECT_NE(name.find("(tracecorr_unit_tests)"), std::string::npos) << name;
  EXPECT_EQ(symbols.name(0), "[unknown]");
}

}  // namespace
}  // namespace tracecorr::conform

namespace tracecorr {
namespace {

// Hostile ELF files: garbage and a copy of this binary cut short are refused
// or read partially, never crash.
TEST(FunctionSymbols, GarbageAndTruncatedFilesAreHandled) {
  char garbage_path[] = "/tmp/tracecorr-symbols-XXXXXX";
  int fd = mkstemp(garbage_path);
  ASSERT_GE(fd, 0);
  std::string junk = "\x7f" "ELF" + std::string(200, '\xff');
  ASSERT_EQ(write(fd, junk.data(), junk.size()), static_cast<ssize_t>(junk.size()));
  EXPECT_FALSE(read_function_symbols(fd, garbage_path).ok());
  close(fd);
  unlink(garbage_path);

  char cut_path[] = "/tmp/tracecorr-symbols-XXXXXX";
  fd = mkstemp(cut_path);
  ASSERT_GE(fd, 0);
  FILE* self = std::fopen("/proc/self/exe", "rb");
  ASSERT_NE(self, nullptr);
  std::vector<char> head(64 * 1024);
  std::size_t n = std::fread(head.data(), 1, head.size(), self);
  std::fclose(self);
  ASSERT_EQ(write(fd, head.data(), n), static_cast<ssize_t>(n));
  auto symbols = read_function_symbols(fd, cut_path);  // section headers lie past the end
  if (symbols.ok()) EXPECT_TRUE(symbols->functions.empty());
  close(fd);
  unlink(cut_path);
}

}  // namespace
}  // namespace tracecorr

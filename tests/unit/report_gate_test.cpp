// Verdicts by level, the gate and its exit codes.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "report_test_support.hpp"

namespace tracecorr::conform {
namespace {

using test_support::result;


TEST(Verdicts, FailedMustIsFail) {
  EXPECT_EQ(judge(Level::Must, false, false), Verdict::Fail);
  EXPECT_EQ(judge(Level::Must, true, false), Verdict::Pass);
}

TEST(Verdicts, FailedShouldIsWarnUnlessStrict) {
  EXPECT_EQ(judge(Level::Should, false, false), Verdict::Warn);
  EXPECT_EQ(judge(Level::Should, false, true), Verdict::Fail);
}

TEST(Verdicts, FailedMayIsAlwaysWarn) {
  EXPECT_EQ(judge(Level::May, false, false), Verdict::Warn);
  EXPECT_EQ(judge(Level::May, false, true), Verdict::Warn);
}

TEST(Verdicts, ApplyLevelRelevelsAProbesFail) {
  RequirementResult should = result("MSG-05", Verdict::Fail);  // MSG-05 is a SHOULD
  apply_level(should, false);
  EXPECT_EQ(should.verdict, Verdict::Warn);
  apply_level(should, true);
  EXPECT_EQ(should.verdict, Verdict::Fail);
  RequirementResult skipped = result("MSG-05", Verdict::Skip);
  apply_level(skipped, true);
  EXPECT_EQ(skipped.verdict, Verdict::Skip);
}

TEST(Results, MakeResultFillsFromTheRegistry) {
  auto r = make_result("ATTR-02");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->level, Level::Must);
  EXPECT_EQ(r->area, "ATTR");
  EXPECT_EQ(r->source, "Correlation Attribute");
  EXPECT_NE(r->words.find("string-array"), std::string::npos);
  EXPECT_FALSE(make_result("ATTR-99").ok());
}

TEST(Results, ValidateIdsReportsTheUnknownOnes) {
  EXPECT_TRUE(validate_ids({"ELF-01", "HOST-02"}).empty());
  EXPECT_EQ(validate_ids({"ELF-01", "PROC-05", "attr-02"}), (std::vector<std::string>{"PROC-05", "attr-02"}));
}

RunResult run_of(std::vector<RequirementResult> results) {
  RunResult run;
  run.results = std::move(results);
  return run;
}

TEST(Gate, AllPassingIsZero) {
  EXPECT_EQ(exit_code(run_of({result("ELF-01", Verdict::Pass), result("CONF-02", Verdict::Skip)}), false), kExitOk);
  EXPECT_EQ(exit_code(run_of({}), false), kExitOk);
}

TEST(Gate, AFailIsOneNeverACount) {
  auto run = run_of({result("ELF-01", Verdict::Fail), result("ELF-02", Verdict::Fail), result("ELF-03", Verdict::Fail)});
  EXPECT_EQ(exit_code(run, false), kExitFailure);
}

TEST(Gate, ErrorWithoutFailIsThree) {
  EXPECT_EQ(exit_code(run_of({result("ELF-01", Verdict::Pass), result("TLS-07", Verdict::Error)}), false),
            kExitEnvironment);
}

TEST(Gate, FailOutranksError) {
  EXPECT_EQ(exit_code(run_of({result("ELF-01", Verdict::Fail), result("TLS-07", Verdict::Error)}), false),
            kExitFailure);
}

TEST(Gate, ShouldWarningFailsOnlyAStrictGate) {
  auto run = run_of({result("MSG-05", Verdict::Warn)});
  EXPECT_EQ(exit_code(run, false), kExitOk);
  EXPECT_EQ(exit_code(run, true), kExitFailure);
}

TEST(Gate, MayWarningNeverFails) {
  EXPECT_EQ(exit_code(run_of({result("CONF-02", Verdict::Warn)}), true), kExitOk);
}

TEST(Gate, ExpectedFailureDoesNotFailButStaleExpectationDoes) {
  RequirementResult xfail = result("ELF-01", Verdict::Fail);
  xfail.expectation = ExpectationStatus::ExpectedFailure;
  EXPECT_EQ(exit_code(run_of({xfail}), false), kExitOk);
  RequirementResult xpass = result("ELF-01", Verdict::Pass);
  xpass.expectation = ExpectationStatus::UnexpectedPass;
  EXPECT_EQ(exit_code(run_of({xpass}), false), kExitFailure);
}

TEST(Summary, CountsEveryVerdictInTheFixedPhraseShape) {
  Summary s = summarize(test_support::sample_run());
  EXPECT_EQ(summary_line(s), "1 passed, 1 failed, 1 warnings, 1 skipped, 1 errors");
  RunResult run = test_support::sample_run();
  run.results[1].expectation = ExpectationStatus::ExpectedFailure;
  EXPECT_EQ(summary_line(summarize(run)), "1 passed, 0 failed, 1 warnings, 1 skipped, 1 errors, 1 expected failures");
}

TEST(Shell, QuotesOnlyWhatNeedsIt) {
  EXPECT_EQ(shell_join({"tracecorr", "conform", "--only", "ATTR-02", "--", "java", "-jar", "my app.jar", "it's"}),
            "tracecorr conform --only ATTR-02 -- java -jar 'my app.jar' 'it'\\''s'");
  EXPECT_EQ(shell_quote(""), "''");
}

TEST(Order, ResultsFollowTheRegistry) {
  auto run = run_of({result("HOST-01", Verdict::Pass), result("ELF-02", Verdict::Pass), result("ELF-01", Verdict::Pass)});
  auto ordered = in_registry_order(run);
  ASSERT_EQ(ordered.size(), 3u);
  EXPECT_EQ(ordered[0]->id, "ELF-01");
  EXPECT_EQ(ordered[1]->id, "ELF-02");
  EXPECT_EQ(ordered[2]->id, "HOST-01");
  // Protocol by protocol in registration order, each registry's areas in its
  // own order: the first protocol's run from ELF to HOST, the next ones after.
  auto areas = registry_areas();
  ASSERT_FALSE(areas.empty());
  EXPECT_EQ(areas.front().first, "ELF");
  auto host = std::find_if(areas.begin(), areas.end(), [](const auto& a) { return a.first == "HOST"; });
  ASSERT_NE(host, areas.end());
  std::set<std::string_view> first_protocol_areas;
  for (const auto& r : protocols().front()->requirements) first_protocol_areas.insert(r.area);
  EXPECT_EQ(static_cast<std::size_t>(host - areas.begin()) + 1, first_protocol_areas.size());
}

}  // namespace
}  // namespace tracecorr::conform

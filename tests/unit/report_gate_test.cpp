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
  RequirementResult should = result("WIRE-05", Verdict::Fail);  // WIRE-05 is a SHOULD
  apply_level(should, false);
  EXPECT_EQ(should.verdict, Verdict::Warn);
  apply_level(should, true);
  EXPECT_EQ(should.verdict, Verdict::Fail);
  RequirementResult skipped = result("WIRE-05", Verdict::Skip);
  apply_level(skipped, true);
  EXPECT_EQ(skipped.verdict, Verdict::Skip);
}

TEST(Results, MakeResultFillsFromTheRegistry) {
  auto r = make_result("NAME-02");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->level, Level::Must);
  EXPECT_EQ(r->area, "NAME");
  EXPECT_EQ(r->source, "Span Attribute");
  EXPECT_NE(r->words.find("string-array"), std::string::npos);
  EXPECT_FALSE(make_result("NAME-99").ok());
}

TEST(Results, ValidateIdsReportsTheUnknownOnes) {
  EXPECT_TRUE(validate_ids({"LOAD-01", "PEER-02"}).empty());
  EXPECT_EQ(validate_ids({"LOAD-01", "LOAD-09", "name-02"}), (std::vector<std::string>{"LOAD-09", "name-02"}));
}

RunResult run_of(std::vector<RequirementResult> results) {
  RunResult run;
  run.results = std::move(results);
  return run;
}

TEST(Gate, AllPassingIsZero) {
  EXPECT_EQ(exit_code(run_of({result("LOAD-01", Verdict::Pass), result("OPTS-02", Verdict::Skip)}), false), kExitOk);
  EXPECT_EQ(exit_code(run_of({}), false), kExitOk);
}

TEST(Gate, AFailIsOneNeverACount) {
  auto run = run_of({result("LOAD-01", Verdict::Fail), result("LOAD-02", Verdict::Fail), result("LOAD-03", Verdict::Fail)});
  EXPECT_EQ(exit_code(run, false), kExitFailure);
}

TEST(Gate, ErrorWithoutFailIsThree) {
  EXPECT_EQ(exit_code(run_of({result("LOAD-01", Verdict::Pass), result("SLOT-07", Verdict::Error)}), false),
            kExitEnvironment);
}

TEST(Gate, FailOutranksError) {
  EXPECT_EQ(exit_code(run_of({result("LOAD-01", Verdict::Fail), result("SLOT-07", Verdict::Error)}), false),
            kExitFailure);
}

TEST(Gate, ShouldWarningFailsOnlyAStrictGate) {
  auto run = run_of({result("WIRE-05", Verdict::Warn)});
  EXPECT_EQ(exit_code(run, false), kExitOk);
  EXPECT_EQ(exit_code(run, true), kExitFailure);
}

TEST(Gate, MayWarningNeverFails) {
  EXPECT_EQ(exit_code(run_of({result("OPTS-02", Verdict::Warn)}), true), kExitOk);
}

TEST(Gate, ExpectedFailureDoesNotFailButStaleExpectationDoes) {
  RequirementResult xfail = result("LOAD-01", Verdict::Fail);
  xfail.expectation = ExpectationStatus::ExpectedFailure;
  EXPECT_EQ(exit_code(run_of({xfail}), false), kExitOk);
  RequirementResult xpass = result("LOAD-01", Verdict::Pass);
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
  EXPECT_EQ(shell_join({"tracecorr", "conform", "--only", "NAME-02", "--", "java", "-jar", "my app.jar", "it's"}),
            "tracecorr conform --only NAME-02 -- java -jar 'my app.jar' 'it'\\''s'");
  EXPECT_EQ(shell_quote(""), "''");
}

TEST(Order, ResultsFollowTheRegistry) {
  auto run = run_of({result("PEER-01", Verdict::Pass), result("LOAD-02", Verdict::Pass), result("LOAD-01", Verdict::Pass)});
  auto ordered = in_registry_order(run);
  ASSERT_EQ(ordered.size(), 3u);
  EXPECT_EQ(ordered[0]->id, "LOAD-01");
  EXPECT_EQ(ordered[1]->id, "LOAD-02");
  EXPECT_EQ(ordered[2]->id, "PEER-01");
  auto areas = registry_areas();
  ASSERT_FALSE(areas.empty());
  EXPECT_EQ(areas.front().first, "LOAD");
  EXPECT_EQ(areas.back().first, "PEER");
}

}  // namespace
}  // namespace tracecorr::conform

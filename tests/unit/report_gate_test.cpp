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
  EXPECT_TRUE(unjudged(run_of({result("LOAD-01", Verdict::Pass), result("OPTS-02", Verdict::Skip)})).empty());
}

// ---- no pass on nothing (issue 25) ----------------------------------------------------------

ProtocolRun section(std::string id, bool named, std::string chosen_by, std::string not_applicable = "") {
  return {std::move(id), named, std::move(chosen_by), std::move(not_applicable)};
}

TEST(Gate, ARunThatJudgedNothingIsThreeAndSaysWhyInOneLine) {
  EXPECT_EQ(exit_code(run_of({}), false), kExitEnvironment);
  auto skips = run_of({result("LOAD-01", Verdict::Skip, "no library seen"), result("OPTS-02", Verdict::Skip)});
  EXPECT_EQ(exit_code(skips, false), kExitEnvironment);
  EXPECT_EQ(exit_code(skips, true), kExitEnvironment);
  auto why = unjudged(skips);
  ASSERT_EQ(why.size(), 1u);
  EXPECT_EQ(why[0], "nothing was judged: 2 skipped of 2 requirements (LOAD-01 skip: no library seen)");
  // Errors and skips alike judge nothing.
  EXPECT_EQ(exit_code(run_of({result("OPTS-02", Verdict::Skip), result("SLOT-07", Verdict::Error)}), false),
            kExitEnvironment);
}

TEST(Gate, AWarningIsAJudgement) {
  EXPECT_EQ(exit_code(run_of({result("WIRE-05", Verdict::Warn), result("OPTS-02", Verdict::Skip)}), false), kExitOk);
}

TEST(Gate, AFailureOutranksNothingJudgedElsewhere) {
  auto run = run_of({result("LOAD-01", Verdict::Fail), result("OPTS-02", Verdict::Skip)});
  run.only = {"LOAD", "OPTS"};  // OPTS judged nothing: still a failure first
  EXPECT_EQ(exit_code(run, false), kExitFailure);
  EXPECT_FALSE(unjudged(run).empty());
}

TEST(Gate, OnlyTokenThatJudgedNothingIsThree) {
  auto run = run_of({result("LOAD-01", Verdict::Pass), result("OPTS-02", Verdict::Skip, "auto mode unsupported")});
  run.only = {"LOAD-01", "OPTS-02"};
  EXPECT_EQ(exit_code(run, false), kExitEnvironment);
  auto why = unjudged(run);
  ASSERT_EQ(why.size(), 1u);
  EXPECT_EQ(why[0].rfind("--only OPTS-02 judged nothing: 1 skipped of 1 requirement (OPTS-02 skip: auto mode", 0), 0u)
      << why[0];
  // An area judges something when any of its requirements is judged.
  run.only = {"LOAD", "OPTS-02"};
  run.results.push_back(result("LOAD-02", Verdict::Skip));
  run.results[1].verdict = Verdict::Warn;
  EXPECT_EQ(exit_code(run, false), kExitOk);
}

TEST(Gate, ANamedProtocolThatJudgedNothingIsThree) {
  auto run = run_of({result("LOAD-01", Verdict::Pass)});
  run.protocols = {section(std::string(tracecorr::test_support::kTestProtocolId), true, "--protocol"),
                   section("other-protocol", true, "--protocol", "schema other_v1")};
  EXPECT_EQ(exit_code(run, false), kExitEnvironment);
  auto why = unjudged(run);
  ASSERT_EQ(why.size(), 1u);
  EXPECT_EQ(why[0], "other-protocol (--protocol) judged nothing: not applicable: schema other_v1");
  EXPECT_EQ(protocol_status(run, run.protocols[0]), "judged");
  EXPECT_EQ(protocol_status(run, run.protocols[1]), "not-applicable");
}

TEST(Gate, AProtocolFoundUnderAnotherSchemaIsListedNotAnError) {
  auto run = run_of({result("LOAD-01", Verdict::Pass)});
  run.protocols = {section(std::string(tracecorr::test_support::kTestProtocolId), false, "a trial launch: pid 7 publishes it"),
                   section("other-protocol", false, "a trial launch: pid 7 announces it", "schema other_v1")};
  EXPECT_EQ(exit_code(run, false), kExitOk);
  EXPECT_TRUE(unjudged(run).empty());
  // ...unless nothing else was judged.
  run.results[0].verdict = Verdict::Skip;
  auto why = unjudged(run);
  ASSERT_EQ(why.size(), 1u);
  EXPECT_EQ(why[0], "nothing was judged: other-protocol not applicable: schema other_v1");
}

TEST(Gate, AProtocolFoundReadableThatJudgedNothingIsThree) {
  auto run = run_of({result("LOAD-01", Verdict::Skip, "the publisher exited"), result("PEER-01", Verdict::Pass)});
  run.results[1].protocol = "other-protocol";
  run.protocols = {section(std::string(tracecorr::test_support::kTestProtocolId), false, "pid 7 publishes it"),
                   section("other-protocol", false, "pid 7 publishes it")};
  EXPECT_EQ(exit_code(run, false), kExitEnvironment);
  auto why = unjudged(run);
  ASSERT_EQ(why.size(), 1u);
  EXPECT_EQ(why[0], std::string(tracecorr::test_support::kTestProtocolId) +
                        " (pid 7 publishes it) judged nothing: 1 skipped of 1 requirement (LOAD-01 skip: the publisher exited)");
}

TEST(Gate, SectionsAreDerivedForARunWithoutThem) {
  auto run = run_of({result("LOAD-01", Verdict::Pass), result("OPTS-02", Verdict::Skip)});
  auto sections = protocols_of(run);
  ASSERT_EQ(sections.size(), 1u);
  EXPECT_EQ(sections[0].id, tracecorr::test_support::kTestProtocolId);
  EXPECT_FALSE(sections[0].named);
  EXPECT_EQ(results_of(run, sections[0].id).size(), 2u);
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

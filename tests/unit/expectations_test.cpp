// The expectations file: parsing errors, XFAIL/XPASS, and rewriting it.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "report_test_support.hpp"
#include "tracecorr/conform/expectations.hpp"

namespace tracecorr::conform {
namespace {

using test_support::result;

std::string what(const Expected<Expectations>& e) { return e.ok() ? "" : e.error().message(); }

TEST(ExpectationsParse, AcceptsTheDocumentedShape) {
  auto e = parse_expectations(R"({"version":1,"expected_failures":[{"id":"WIRE-05","reason":"agent bug #12"}]})");
  ASSERT_TRUE(e.ok()) << what(e);
  ASSERT_EQ(e->expected_failures.size(), 1u);
  EXPECT_EQ(e->expected_failures[0].id, "WIRE-05");
  EXPECT_EQ(e->expected_failures[0].reason, "agent bug #12");
  EXPECT_TRUE(parse_expectations(R"({"version":1})").ok());
}

TEST(ExpectationsParse, UnknownIdIsAnErrorNamingIt) {
  auto e = parse_expectations(R"({"version":1,"expected_failures":[{"id":"LOAD-09","reason":"x"}]})", "ci/xfail.json");
  ASSERT_FALSE(e.ok());
  EXPECT_NE(what(e).find("LOAD-09"), std::string::npos);
  EXPECT_NE(what(e).find("ci/xfail.json"), std::string::npos);
}

TEST(ExpectationsParse, MissingOrEmptyReasonIsAnError) {
  auto missing = parse_expectations(R"({"version":1,"expected_failures":[{"id":"WIRE-05"}]})");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(what(missing).find("reason"), std::string::npos);
  EXPECT_FALSE(parse_expectations(R"({"version":1,"expected_failures":[{"id":"WIRE-05","reason":"  "}]})").ok());
}

TEST(ExpectationsParse, RejectsMalformedDocuments) {
  for (std::string_view text :
       {"", "not json", "[]", R"({"version":2})", R"({"expected_failures":[]})",
        R"({"version":1,"expected_failure":[]})", R"({"version":1,"expected_failures":{}})",
        R"({"version":1,"expected_failures":["WIRE-05"]})",
        R"({"version":1,"expected_failures":[{"id":"WIRE-05","reason":"a"},{"id":"WIRE-05","reason":"b"}]})",
        R"({"version":1,"expected_failures":[{"id":"WIRE-05","reason":"a","extra":1}]})"})
    EXPECT_FALSE(parse_expectations(text).ok()) << "accepted: " << text;
}

TEST(ExpectationsLoad, MissingFileIsAnError) {
  auto e = load_expectations("/nonexistent/tracecorr-expectations.json");
  ASSERT_FALSE(e.ok());
  EXPECT_NE(what(e).find("/nonexistent/"), std::string::npos);
}

Expectations listing(std::vector<ExpectedFailure> entries) { return Expectations{1, std::move(entries)}; }

TEST(ExpectationsApply, FailingExpectedFailureIsXfailAndPassesTheGate) {
  RunResult run;
  run.results = {result("NAME-02", Verdict::Fail), result("LOAD-01", Verdict::Pass)};
  apply_expectations(run, listing({{"NAME-02", "agent sends a string"}}));
  EXPECT_EQ(run.results[0].expectation, ExpectationStatus::ExpectedFailure);
  EXPECT_EQ(run.results[0].expectation_reason, "agent sends a string");
  EXPECT_EQ(run.results[1].expectation, ExpectationStatus::None);
  EXPECT_EQ(exit_code(run, false), kExitOk);
  ASSERT_EQ(run.expectations.size(), 1u);
  EXPECT_EQ(run.expectations[0].status, ExpectationStatus::ExpectedFailure);
}

TEST(ExpectationsApply, PassingExpectedFailureIsStaleAndFailsTheGate) {
  RunResult run;
  run.results = {result("NAME-02", Verdict::Pass)};
  apply_expectations(run, listing({{"NAME-02", "fixed since"}}));
  EXPECT_EQ(run.results[0].expectation, ExpectationStatus::UnexpectedPass);
  EXPECT_EQ(exit_code(run, false), kExitFailure);
}

TEST(ExpectationsApply, WarningsCountAsExpectedFailures) {
  RunResult run;
  run.results = {result("WIRE-05", Verdict::Warn)};
  apply_expectations(run, listing({{"WIRE-05", "known"}}));
  EXPECT_EQ(run.results[0].expectation, ExpectationStatus::ExpectedFailure);
  EXPECT_EQ(exit_code(run, true), kExitOk);  // even a strict gate
}

TEST(ExpectationsApply, SkippedOrMissingIsNotEvaluated) {
  RunResult run;
  run.results = {result("OPTS-02", Verdict::Skip)};
  apply_expectations(run, listing({{"OPTS-02", "a"}, {"PEER-01", "b"}}));
  ASSERT_EQ(run.expectations.size(), 2u);
  EXPECT_EQ(run.expectations[0].status, ExpectationStatus::NotEvaluated);
  EXPECT_EQ(run.expectations[1].status, ExpectationStatus::NotEvaluated);
  // Not evaluated fails nothing; but a run that judged nothing is no pass (issue 25).
  EXPECT_EQ(exit_code(run, false), kExitEnvironment);
  run.results.push_back(result("LOAD-01", Verdict::Pass));
  EXPECT_EQ(exit_code(run, false), kExitOk);
}

TEST(ExpectationsUpdate, RewritesWithCurrentFailuresKeepingReasons) {
  RunResult run;
  run.results = {result("NAME-02", Verdict::Fail), result("WIRE-05", Verdict::Warn), result("LOAD-01", Verdict::Pass),
                 result("OPTS-02", Verdict::Skip)};
  Expectations previous = listing({{"NAME-02", "kept reason"}, {"LOAD-01", "stale now"}, {"OPTS-02", "not run"}});
  std::string text = update_expectations(run, previous);
  auto reparsed = parse_expectations(text);
  ASSERT_TRUE(reparsed.ok()) << what(reparsed) << "\n" << text;
  auto doc = nlohmann::json::parse(text);
  EXPECT_EQ(doc["version"], 1);
  std::vector<std::pair<std::string, std::string>> entries;
  for (const auto& e : reparsed->expected_failures) entries.emplace_back(e.id, e.reason);
  // Registry order; the stale LOAD-01 is gone; the not-evaluated OPTS-02 stays.
  EXPECT_EQ(entries, (std::vector<std::pair<std::string, std::string>>{
                         {"WIRE-05", "TODO: explain"}, {"NAME-02", "kept reason"}, {"OPTS-02", "not run"}}));
}

}  // namespace
}  // namespace tracecorr::conform

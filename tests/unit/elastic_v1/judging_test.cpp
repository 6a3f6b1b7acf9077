// The rules every verdict rests on: no pass below its evidence minimum, holds
// measured by export order (not arrival), the noise baseline, and what counts
// as a registration taking effect.
#include <gtest/gtest.h>

#include "probes/elastic_v1/judging.hpp"
#include "tracecorr/conform/probe.hpp"

namespace tracecorr::elastic_v1 {
namespace {
using namespace std::chrono_literals;

RequirementResult result_with(Verdict v, std::size_t count, std::size_t minimum) {
  auto r = make_result("CONF-02");
  EXPECT_TRUE(static_cast<bool>(r));
  r->verdict = v;
  r->reason = "auto: correlating after it";
  r->evidence_count = count;
  r->evidence_minimum = minimum;
  return *r;
}

TEST(EvidenceMinimum, APassOnNoEvidenceIsAnInconclusiveErrorNamingTheCount) {
  auto r = result_with(Verdict::Pass, 0, 1);
  enforce_evidence_minimum(r);
  EXPECT_EQ(r.verdict, Verdict::Error);
  EXPECT_NE(r.reason.find("inconclusive"), std::string::npos) << r.reason;
  EXPECT_NE(r.reason.find("judged 0"), std::string::npos) << r.reason;
  EXPECT_NE(r.reason.find("at least 1"), std::string::npos) << r.reason;
  RunResult run;
  run.results.push_back(r);
  EXPECT_EQ(exit_code(run, false), kExitEnvironment);
}

TEST(EvidenceMinimum, APassBelowAHigherMinimumIsRefused) {
  auto r = result_with(Verdict::Pass, 2, 3);
  enforce_evidence_minimum(r);
  EXPECT_EQ(r.verdict, Verdict::Error);
  EXPECT_NE(r.reason.find("judged 2"), std::string::npos) << r.reason;
}

TEST(EvidenceMinimum, EnoughEvidenceKeepsThePassAndOtherVerdictsAreUntouched) {
  auto pass = result_with(Verdict::Pass, 3, 3);
  enforce_evidence_minimum(pass);
  EXPECT_EQ(pass.verdict, Verdict::Pass);
  for (auto v : {Verdict::Fail, Verdict::Warn, Verdict::Skip, Verdict::Error}) {
    auto r = result_with(v, 0, 1);
    enforce_evidence_minimum(r);
    EXPECT_EQ(r.verdict, v);
  }
}

TEST(EvidenceMinimum, MetCarriesItsCount) {
  auto f = met("MSG-02", 7, "minor 1 accepted");
  EXPECT_EQ(f.outcome, Finding::Outcome::Met);
  EXPECT_EQ(f.evidence_count, 7u);
}

otlp::ReceivedSpan span(std::uint8_t id, std::uint64_t end_ms, bool child, std::uint64_t received_ms) {
  otlp::ReceivedSpan s;
  s.trace_id[0] = 1;
  s.span_id[0] = id;
  if (child) s.parent_span_id = SpanId{0xEE};  // a parent nobody exported: still judged by position
  s.end_unix_nano = end_ms * 1'000'000;
  s.flags = 1;
  s.received_at_system = std::chrono::system_clock::time_point(std::chrono::milliseconds(received_ms));
  return s;
}

TEST(HeldByExportOrder, ATransactionExportedAfterLaterSpansWasHeldAtLeastTheirLead) {
  // Export order: children ending 100, 380, 390, 400, then a transaction that
  // ended at 60: three spans that ended >= 330 ms after it went out first.
  SpanIndex spans({span(1, 100, true, 5000), span(2, 380, true, 5000), span(3, 390, true, 5000),
                   span(4, 400, true, 5000), span(5, 60, false, 5000), span(6, 395, true, 5000)});
  EXPECT_DOUBLE_EQ(spans.held_at_least_ms(spans.spans()[0]), 0);
  EXPECT_DOUBLE_EQ(spans.held_at_least_ms(spans.spans()[4]), 320);  // the third latest end (380) - 60
  EXPECT_DOUBLE_EQ(spans.held_at_least_ms(spans.spans()[5]), 0);
}

TEST(HeldByExportOrder, OneSpanWithAWrongEndDoesNotMakeOthersLookHeld) {
  // A span whose end is 10 s in the future (a clock step): the spans after it
  // are not held.
  SpanIndex spans({span(1, 100, true, 5000), span(2, 10'000, true, 5000), span(3, 110, true, 5000),
                   span(4, 120, false, 5000), span(5, 130, true, 5000)});
  for (std::size_t i = 2; i < 5; ++i) EXPECT_LT(spans.held_at_least_ms(spans.spans()[i]), 20) << i;
}

TEST(HeldByExportOrder, ABatchArrivingSecondsLaterIsNotAHold) {
  // Everything arrives in one export 5 s after it ended: arrival says 4.9 s
  // late, export order says nothing was held.
  SpanIndex spans({span(1, 100, true, 5100), span(2, 120, false, 5100), span(3, 140, true, 5100)});
  for (const auto& s : spans.spans()) {
    EXPECT_GT(SpanIndex::export_delay_ms(s), 4000);
    EXPECT_DOUBLE_EQ(spans.held_at_least_ms(s), 0);
  }
}

// What shows a hold: spans a conforming agent hands over as they end. Sampled
// transactions are held themselves: three that ended after T and left after
// it say nothing of T's hold (a stalled agent's burst); three children do.
TEST(HoldWitnesses, AreSpansNeverHeldNotOtherTransactions) {
  otlp::ReceivedSpan root = span(0x10, 0, false, 900);
  otlp::ReceivedSpan t = span(1, 0, false, 1100);
  std::vector<otlp::ReceivedSpan> later{root, t, span(2, 100, false, 1400), span(3, 200, false, 1400),
                                        span(4, 300, false, 1400)};
  SpanIndex transactions_only(later);
  EXPECT_FALSE(transactions_only.hold_witnessed(transactions_only.spans()[1], 0ms, 500ms));
  for (std::uint8_t id = 5; id < 8; ++id) {
    otlp::ReceivedSpan child = span(id, 100u * (id - 4), true, 1500);
    child.parent_span_id = root.span_id;
    later.push_back(child);
  }
  SpanIndex with_children(later);
  EXPECT_TRUE(with_children.hold_witnessed(with_children.spans()[1], 0ms, 500ms));
  EXPECT_FALSE(with_children.hold_witnessed(with_children.spans()[1], 0ms, 250ms));  // two children only
}

// A span whose parent never arrived is a transaction with a remote parent,
// unless an export was lost after it ended: then its parent may have been in
// it, and it is neither (a child taken for a transaction looks undeferred).
TEST(SpanRoles, AParentThatNeverArrivedIsRemoteUnlessAnExportWasLostAfter) {
  auto root = span(1, 100, false, 5000);
  auto child = span(2, 90, false, 5000);
  child.parent_span_id = root.span_id;
  auto orphan = span(3, 200, true, 5000);
  auto lost_at = [](std::uint64_t ms) {
    otlp::ExportLosses l;
    l.cut_short = 1;
    l.last_at = std::chrono::steady_clock::now();
    l.last_at_system = std::chrono::system_clock::time_point(std::chrono::milliseconds(ms));
    return l;
  };
  for (const auto& [losses, orphan_is_root] :
       {std::pair{otlp::ExportLosses{}, true}, std::pair{lost_at(150), true}, std::pair{lost_at(300), false}}) {
    SpanIndex spans({root, child, orphan}, losses);
    EXPECT_TRUE(spans.is_transaction(spans.spans()[0]));
    EXPECT_FALSE(spans.is_child(spans.spans()[0]));
    EXPECT_TRUE(spans.is_child(spans.spans()[1]));
    EXPECT_FALSE(spans.is_transaction(spans.spans()[1]));
    EXPECT_EQ(spans.is_transaction(spans.spans()[2]), orphan_is_root) << losses.describe();
    EXPECT_FALSE(spans.is_child(spans.spans()[2]));
    EXPECT_EQ(spans.transactions().size(), orphan_is_root ? 2u : 1u);
  }
}

TEST(TimingBaseline, TooNoisyWhenItsP95ReachesHalfTheHoldToTell) {
  TimingBaseline quiet;
  for (int i = 0; i < 100; ++i) quiet.held_ms.push_back(i < 96 ? 2.0 : 40.0);
  EXPECT_FALSE(quiet.too_noisy_for(300));
  EXPECT_DOUBLE_EQ(quiet.share_at_least(40), 0.04);
  TimingBaseline loud;
  for (int i = 0; i < 100; ++i) loud.held_ms.push_back(i < 50 ? 2.0 : 200.0);
  EXPECT_TRUE(loud.too_noisy_for(300));
  EXPECT_NE(loud.describe().find("p95 200 ms"), std::string::npos) << loud.describe();
}

TEST(RegistrationEffect, ADelayNearerTheOneBeforeIsNotApplied) {
  RegistrationEffect e;
  e.delay_ms = 300;
  e.previous_delay_ms = 1000;
  e.transaction_delays_ms = {780, 790, 800};  // released by a later registration, not by 300 ms
  EXPECT_EQ(e.delay_applied(), std::optional<bool>(false));
  e.transaction_delays_ms = {290, 310, 330};
  EXPECT_EQ(e.delay_applied(), std::optional<bool>(true));
  e.previous_delay_ms = 300;  // the same delay again: cannot tell
  EXPECT_EQ(e.delay_applied(), std::nullopt);
}

TEST(RegistrationEffect, HostIdCountsFromTheAgentsOwnTakeUp) {
  RegistrationEffect slow;  // a poller that applied it a little late
  slow.spans = 136, slow.with_host_id = 128, slow.since_adoption = 128, slow.since_adoption_with = 128;
  EXPECT_TRUE(slow.host_id_adopted());
  RegistrationEffect flapping;
  flapping.spans = 10, flapping.with_host_id = 5, flapping.since_adoption = 8, flapping.since_adoption_with = 5;
  EXPECT_FALSE(flapping.host_id_adopted());
  RegistrationEffect never;
  never.spans = 134;
  EXPECT_FALSE(never.host_id_adopted());
}

}  // namespace
}  // namespace tracecorr::elastic_v1

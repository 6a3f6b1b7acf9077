// Profiler mode's truth (tracecorr/profiler/stage.hpp) and the check of one
// sample against it (reader_suite.hpp: check_sample), on journals and
// samples written in the test.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "profiles_test_support.hpp"
#include "tracecorr/profiler/reader_suite.hpp"
#include "tracecorr/profiler/stage.hpp"

namespace tracecorr::profiler {
namespace {

using profiles::test_support::link_of;
using Kind = SampleCheck::Kind;

constexpr char kTraceA[] = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
constexpr char kSpanA[] = "a1a1a1a1a1a1a1a1";
constexpr char kTraceB[] = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";
constexpr char kSpanB[] = "b1b1b1b1b1b1b1b1";
constexpr char kPoisonTrace[] = "dead00000000000000000000000000de";
constexpr char kPoisonSpan[] = "dead0000000000de";

std::string state(std::uint64_t t0, std::uint64_t t, const std::string& context, const std::string& extra = "") {
  return R"({"event":"state","pid":100,"tid":101,"t0":)" + std::to_string(t0) + R"(,"t":)" + std::to_string(t) +
         R"(,"context":)" + context + extra + "}\n";
}

std::string context(const char* trace, const char* span, const std::string& attributes = "[]") {
  return std::string(R"({"trace_id":")") + trace + R"(","span_id":")" + span + R"(","trace_flags":1,"attributes":)" +
         attributes + "}";
}

// A at [1000, 1010], then nothing at [2000, 2005] over poison, then B at [3000, 3002].
std::string journal() {
  return state(1000, 1010, context(kTraceA, kSpanA, R"([["http.route","/a"]])")) +
         state(2000, 2005, "null",
               std::string(R"(,"poison":{"trace_id":")") + kPoisonTrace + R"(","span_id":")" + kPoisonSpan +
                   R"("},"hazard":"valid_0_poison")") +
         state(3000, 3002, context(kTraceB, kSpanB));
}

MemberEvidence member_of(const std::string& text) {
  MemberEvidence m;
  m.pid = 100;
  m.truth = stage::read_journal(text);
  return m;
}

profiles::ProfileSample sample_at(std::uint64_t t, std::optional<profiles::SampleLink> link) {
  profiles::ProfileSample s;
  s.time = profiles::SampleTime{t, profiles::Clock::Unix};
  s.pid = 100;
  s.tid = 101;
  s.link = link;
  return s;
}

TEST(StageJournal, ReadsStatesInOrderAndClosesEachAtTheNextChangesEnd) {
  auto truth = stage::read_journal(journal());
  ASSERT_EQ(truth.states.size(), 3u);
  EXPECT_EQ(truth.pid, 100);
  EXPECT_EQ(truth.states[0].until_ns, 2005u);
  EXPECT_EQ(truth.states[1].until_ns, 3002u);
  EXPECT_EQ(truth.states[2].until_ns, std::numeric_limits<std::uint64_t>::max());
  ASSERT_TRUE(truth.states[0].context);
  ASSERT_EQ(truth.states[0].context->attributes.size(), 1u);
  EXPECT_EQ(truth.states[0].context->attributes[0].second, "/a");
  EXPECT_FALSE(truth.states[1].context);
  EXPECT_TRUE(truth.states[1].poison);
  EXPECT_EQ(truth.states[1].hazard, "valid_0_poison");
  EXPECT_TRUE(truth.problems.empty());
}

TEST(StageJournal, NamesMalformedLinesAndKeepsReading) {
  auto truth = stage::read_journal("not json\n" + state(10, 5, "null") +
                                   R"({"event":"state","t0":1,"t":2,"tid":7,"context":{"trace_id":"xyz"}})" "\n" +
                                   state(20, 21, "null") + R"({"event":"state","t0":1)");
  EXPECT_EQ(truth.states.size(), 1u);  // the last line is unfinished: not read
  ASSERT_EQ(truth.problems.size(), 3u);
  EXPECT_NE(truth.problems[0].find("line 1"), std::string::npos);
  EXPECT_NE(truth.problems[1].find("t0 <= t"), std::string::npos);
  EXPECT_NE(truth.problems[2].find("trace_id"), std::string::npos);
}

TEST(StageJournal, KeepsOnlyTheOtherEventsAsked) {
  auto truth = stage::read_journal(R"({"event":"message","kind":"registration"})" "\n"
                                   R"({"event":"span_end"})" "\n",
                                   {"message"});
  ASSERT_EQ(truth.other_events.count("message"), 1u);
  EXPECT_EQ(truth.other_events["message"].size(), 1u);
  EXPECT_EQ(truth.other_events.count("span_end"), 0u);
}

TEST(CheckSample, TellsEveryKindApart) {
  auto m = member_of(journal());
  const std::uint64_t tol = 3;
  EXPECT_EQ(check_sample(m, sample_at(1500, link_of(kTraceA, kSpanA)), tol).kind, Kind::Right);
  EXPECT_EQ(check_sample(m, sample_at(1500, std::nullopt), tol).kind, Kind::Missing);
  EXPECT_EQ(check_sample(m, sample_at(2500, std::nullopt), tol).kind, Kind::NoContext);
  EXPECT_EQ(check_sample(m, sample_at(2500, link_of(kPoisonTrace, kPoisonSpan)), tol).kind, Kind::Poisoned);
  EXPECT_EQ(check_sample(m, sample_at(3500, link_of(kTraceA, kSpanA)), tol).kind, Kind::Stale);
  EXPECT_EQ(check_sample(m, sample_at(3500, link_of(kTraceA, kSpanB)), tol).kind, Kind::Torn);
  EXPECT_EQ(check_sample(m, sample_at(3500, link_of(kTraceB, kSpanA)), tol).kind, Kind::Torn);
  EXPECT_EQ(check_sample(m, sample_at(3500, link_of(kPoisonTrace, kSpanB)), tol).kind, Kind::Unknown);
  auto no_time = sample_at(0, link_of(kTraceA, kSpanA));
  no_time.time.reset();
  EXPECT_EQ(check_sample(m, no_time, tol).kind, Kind::Unplaced);
}

TEST(CheckSample, AStateMayBeMetUntilTheNextChangeIsDoneAndWithinTheTolerance) {
  auto m = member_of(journal());
  // A is replaced by the change [2000, 2005]: until that is done, A may still be read.
  EXPECT_EQ(check_sample(m, sample_at(2004, link_of(kTraceA, kSpanA)), 0).kind, Kind::Right);
  EXPECT_EQ(check_sample(m, sample_at(2006, link_of(kTraceA, kSpanA)), 0).kind, Kind::Stale);
  EXPECT_EQ(check_sample(m, sample_at(2010, link_of(kTraceA, kSpanA)), 5).kind, Kind::Right);
  EXPECT_EQ(check_sample(m, sample_at(2011, link_of(kTraceA, kSpanA)), 5).kind, Kind::Stale);
  // Before B's change began, B was not there yet.
  EXPECT_EQ(check_sample(m, sample_at(2990, link_of(kTraceB, kSpanB)), 5).kind, Kind::Stale);
}

TEST(CheckSample, AMonotonicTimeIsNotPlacedOnTheJournalsClock) {
  auto m = member_of(journal());
  auto s = sample_at(1500, link_of(kTraceA, kSpanA));
  s.time->clock = profiles::Clock::Monotonic;
  EXPECT_EQ(check_sample(m, s, 0).kind, Kind::Unplaced);
}

// The HTML report's picture of a member: each sample in the lane of its check,
// at its time since the member's first change, and the hazards beside them.
TEST(MemberTimelines, DrawEverySampleInTheLaneOfItsCheckAndTheHazards) {
  ReaderEvidence e;
  e.tolerance_ns = 3;
  e.members.push_back(member_of(journal()));
  e.members[0].member.name = "writer/one";
  std::vector<profiles::ProfileSample> samples = {sample_at(1500, link_of(kTraceA, kSpanA)),
                                                  sample_at(2500, link_of(kPoisonTrace, kPoisonSpan)),
                                                  sample_at(3500, link_of(kTraceA, kSpanA))};
  for (const auto& s : samples) e.members[0].samples.push_back(&s);
  const auto timelines = member_timelines(e);
  ASSERT_EQ(timelines.size(), 1u);
  EXPECT_EQ(timelines[0].of, "stage member");
  EXPECT_EQ(timelines[0].session, "writer/one");
  std::vector<std::pair<double, std::string>> events;
  for (const auto& ev : timelines[0].events) events.emplace_back(ev.at_ms, ev.kind);
  const std::vector<std::pair<double, std::string>> expected = {
      {0.0005, "right"}, {0.001, "hazard"}, {0.0015, "poisoned"}, {0.0025, "stale"}};
  EXPECT_EQ(events, expected);
}

TEST(MemberTimelines, KeepEveryWrongSampleAndThinTheRightOnesToWhatFits) {
  ReaderEvidence e;
  e.members.push_back(member_of(state(1000, 1010, context(kTraceA, kSpanA))));
  std::vector<profiles::ProfileSample> samples;
  for (std::uint64_t i = 0; i < 2 * conform::kMaxTimelineEvents; ++i)
    samples.push_back(sample_at(2000 + i, i == 700 ? link_of(kTraceB, kSpanB) : link_of(kTraceA, kSpanA)));
  for (const auto& s : samples) e.members[0].samples.push_back(&s);
  const auto t = member_timelines(e).at(0);
  EXPECT_LE(t.events.size(), conform::kMaxTimelineEvents);
  EXPECT_GE(t.events.size(), conform::kMaxTimelineEvents / 2);
  EXPECT_EQ(std::count_if(t.events.begin(), t.events.end(), [](const auto& ev) { return ev.kind == "unknown"; }), 1);
}

}  // namespace
}  // namespace tracecorr::profiler

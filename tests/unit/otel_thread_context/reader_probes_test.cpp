// OTEP 4947's reader probes (probes/otel_thread_context/reader/) on evidence
// built by hand: a journal per stage member and the samples a profiler
// reported, each breaking one reader rule (or none).
#ifdef TRACECORR_HAVE_PROFILES
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>

#include "hand_built_stage.hpp"

namespace tracecorr::profiler {
namespace {

using conform::Verdict;

constexpr char kTraceA[] = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
constexpr char kSpanA[] = "a1a1a1a1a1a1a1a1";
constexpr char kTraceB[] = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";
constexpr char kSpanB[] = "b1b1b1b1b1b1b1b1";
constexpr char kPoisonTrace[] = "dead00000000000000000000000000de";
constexpr char kPoisonSpan[] = "dead0000000000de";
using testing::kSecond;
using testing::kT;

const ReaderSuite& suite() { return testing::reader_suite_of("otel-thread-context"); }

std::string ctx(const char* trace, const char* span, const std::string& attributes) {
  return std::string(R"({"trace_id":")") + trace + R"(","span_id":")" + span +
         R"(","trace_flags":1,"attributes":)" + attributes + "}";
}

// One thread's timeline, one second per state: A (route /a), nothing over
// poison, B with a duplicated key (last "/b2", first "/b1" poison), A2 with
// a late key, nothing (NULL), then A again.
std::string journal(std::int64_t pid) {
  auto line = [pid](int second, const std::string& context, const std::string& extra) {
    const auto t0 = kT + static_cast<std::uint64_t>(second) * kSecond;
    return R"({"event":"state","pid":)" + std::to_string(pid) + R"(,"tid":)" + std::to_string(pid + 1) +
           R"(,"t0":)" + std::to_string(t0) + R"(,"t":)" + std::to_string(t0 + 1000) + R"(,"context":)" + context +
           extra + "}\n";
  };
  return line(0, ctx(kTraceA, kSpanA, R"([["http.route","/a"]])"), "") +
         line(1, "null", std::string(R"(,"hazard":"valid_0_poison","poison":{"trace_id":")") + kPoisonTrace +
                             R"(","span_id":")" + kPoisonSpan + R"("})") +
         line(2, ctx(kTraceB, kSpanB, R"([["http.route","/b2"]])"), R"(,"hazard":"duplicate_key","poison_values":["/b1"])") +
         line(3, ctx(kTraceA, kSpanB, R"([["http.route","/c"],["tracecorr.late","late"]])"), R"(,"hazard":"late_key")") +
         line(5, "null", R"(,"hazard":"null_pointer")") +
         line(6, ctx(kTraceA, kSpanA, R"([["http.route","/a"]])"), "");
}

struct Stage : testing::HandBuiltStage {
  Stage() : HandBuiltStage("otel-thread-context") {}
  // Adds a member (pid, layout) with the journal above.
  MemberEvidence& add(std::int64_t pid, const std::string& layout, bool must_not_be_read = false) {
    return add_journal(pid, layout, journal(pid), must_not_be_read);
  }
  // A member with its own journal.
  MemberEvidence& add_journal(std::int64_t pid, const std::string& layout, const std::string& text,
                              bool must_not_be_read = false) {
    return HandBuiltStage::add(pid, layout, text, must_not_be_read);
  }
  // What a conforming reader reports: right contexts, attributes named, nothing around nothing.
  void right(std::int64_t pid, std::uint64_t from_ms = 100) {  // from_ms: the reader found it then
    for (std::uint64_t ms = from_ms; ms < 7000; ms += 100) {
      const auto second = ms / 1000;
      if (second == 0 || second == 6) sample(pid, ms, kTraceA, kSpanA, {{"http.route", "/a"}});
      if (second == 1 || second == 5) sample(pid, ms, nullptr, nullptr);
      if (second == 2) sample(pid, ms, kTraceB, kSpanB, {{"http.route", "/b2"}});
      if (second == 3 || second == 4) sample(pid, ms, kTraceA, kSpanB, {{"http.route", "/c"}, {"tracecorr.late", "late"}});
    }
  }
};

// The member's samples as a reader that never names `key` reports them.
void drop_attribute(Stage& st, std::int64_t pid, const std::string& key) {
  for (auto& s : st.evidence.samples) {
    if (*s.pid != pid || !s.attributes || !s.attributes->count(key)) continue;
    auto without = std::make_shared<otlp::Attributes>(*s.attributes);
    without->erase(key);
    s.attributes = without;
  }
}

Stage conforming_stage() {
  Stage st;
  st.add(100, "TLS descriptors, library linked, glibc");
  st.add(200, "local-exec, executable, glibc");
  st.add(300, "announces another schema", true);
  st.right(100);
  st.right(200);
  for (std::uint64_t ms = 100; ms < 1000; ms += 100) st.sample(300, ms, nullptr, nullptr);
  return st;
}

TEST(ThreadContextReaderProbes, AConformingReaderPassesEveryJudgedRule) {
  auto st = conforming_stage();
  auto results = st.judge();
  for (const char* id : {"TCTXR-01", "TCTXR-03", "TCTXR-04", "TCTXR-05", "TCTXR-06", "TCTXR-07", "TCTXR-08",
                         "TCTXR-10", "TCTXR-12", "TCTXR-14"})
    EXPECT_EQ(results[id].verdict, Verdict::Pass) << id << ": " << results[id].reason;
  // Every reader requirement has a verdict; none is left to "no probe".
  for (const auto& r : suite().protocol().requirements)
    if (r.role == Role::Profiler) EXPECT_NE(results[std::string(r.id)].reason, "no reader probe judged this requirement") << r.id;
}

TEST(ThreadContextReaderProbes, EachDefectFailsItsOwnRule) {
  struct Case {
    const char* id;
    std::function<void(Stage&)> defect;
  };
  const std::vector<Case> cases = {
      {"TCTXR-08", [](Stage& s) { s.sample(100, 1500, kPoisonTrace, kPoisonSpan); }},
      {"TCTXR-06", [](Stage& s) { s.sample(100, 2500, kTraceA, kSpanA, {{"http.route", "/a"}}); }},
      {"TCTXR-07", [](Stage& s) { s.sample(100, 5500, kTraceA, kSpanB); }},
      {"TCTXR-14", [](Stage& s) { s.sample(100, 2500, kTraceB, kPoisonSpan); }},
      {"TCTXR-12", [](Stage& s) { s.sample(100, 2500, kTraceB, kSpanB, {{"http.route", "/b1"}}); }},
      // Never refreshed: every sample of the late key's state lacks it (one that lacks it
      // while others name it is a refresh at the reader's own pace: a pass, below).
      {"TCTXR-10", [](Stage& s) { for (std::int64_t pid : {100, 200}) drop_attribute(s, pid, "tracecorr.late"); }},
      {"TCTXR-01", [](Stage& s) { s.sample(100, 6500, kTraceA, kSpanA, {{"route", "/a"}}); }},
      {"TCTXR-03", [](Stage& s) { s.sample(300, 500, kTraceA, kSpanA); }},
      {"TCTXR-05", [](Stage& s) {
         for (std::uint64_t ms = 6010; ms < 7000; ms += 100) s.sample(200, ms, nullptr, nullptr);
       }},
  };
  for (const auto& c : cases) {
    auto st = conforming_stage();
    c.defect(st);
    auto results = st.judge();
    // A broken SHOULD is a warning (not --strict), a broken MUST a failure.
    const auto expected = results[c.id].level == Level::Should ? Verdict::Warn : Verdict::Fail;
    EXPECT_EQ(results[c.id].verdict, expected) << c.id << ": " << results[c.id].reason;
    for (const auto& [id, r] : results)
      if (id != c.id && (r.verdict == Verdict::Fail || r.verdict == Verdict::Warn))
        ADD_FAILURE() << "the defect of " << c.id << " also broke " << id << ": " << r.reason;
  }
}

// A reader that refreshes at its own pace: the late key's first samples lack it, later ones name it.
TEST(ThreadContextReaderProbes, ALateKeyNamedAfterSomeSamplesIsARefreshAtTheReadersPace) {
  auto st = conforming_stage();
  for (std::uint64_t ms = 3110; ms < 3400; ms += 100) st.sample(100, ms, kTraceA, kSpanB, {{"http.route", "/c"}});
  auto results = st.judge();
  EXPECT_EQ(results["TCTXR-10"].verdict, Verdict::Pass) << results["TCTXR-10"].reason;
  EXPECT_NE(results["TCTXR-10"].reason.find("before the reader's refresh"), std::string::npos) << results["TCTXR-10"].reason;
}

TEST(ThreadContextReaderProbes, AReaderThatReadsNoModelOfOneKindFailsNamingIt) {
  Stage st;
  st.add(100, "TLS descriptors, library linked, glibc");
  st.add(200, "local-exec, executable, glibc");
  st.right(100);
  for (std::uint64_t ms = 100; ms < 7000; ms += 100) st.sample(200, ms, nullptr, nullptr);
  auto results = st.judge();
  EXPECT_EQ(results["TCTXR-05"].verdict, Verdict::Fail);
  EXPECT_NE(results["TCTXR-05"].reason.find("local-exec, executable"), std::string::npos) << results["TCTXR-05"].reason;
  EXPECT_EQ(results["TCTXR-04"].verdict, Verdict::Fail) << results["TCTXR-04"].reason;
}

// A reader slow to come to the executable's writer (an emulated guest's):
// its samples before the reader had found every library writer are its
// discovery, not a lookup that skips executables; never sampled, nothing.
TEST(ThreadContextReaderProbes, AnExecutableWriterNotYetFoundIsNoFailureOfTheLookup) {
  for (const bool sampled_early : {false, true}) {
    Stage st;
    st.add(100, "TLS descriptors, library linked, glibc");
    st.add(200, "local-exec, executable, glibc");
    st.add(300, "TLS descriptors, library dlopen()ed (static surplus), glibc");
    st.right(100);
    st.right(300, 2000);
    if (sampled_early)
      for (std::uint64_t ms = 100; ms < 2000; ms += 100) st.sample(200, ms, nullptr, nullptr);
    auto results = st.judge();
    EXPECT_EQ(results["TCTXR-04"].verdict, Verdict::Error) << sampled_early << ": " << results["TCTXR-04"].reason;
  }
}

// One thread holding span A from kT on; its process context gains its
// threadlocal keys at kT + 3 s (the keys-late member).
std::string keys_late_journal(std::int64_t pid) {
  const auto keys = kT + 3 * kSecond;
  return R"({"event":"hazards","style":"swap","done":["threadlocal_keys_late"],"skipped":[]})" "\n"
         R"({"event":"state","pid":)" + std::to_string(pid) + R"(,"tid":)" + std::to_string(pid + 1) + R"(,"t0":)" +
         std::to_string(kT) + R"(,"t":)" + std::to_string(kT + 1000) + R"(,"context":)" +
         ctx(kTraceA, kSpanA, R"([["http.route","/a"]])") + "}\n" +
         R"({"event":"threadlocal_keys","t":)" + std::to_string(keys + 1000) + R"(,"t0":)" + std::to_string(keys) +
         R"(,"ok":true})" "\n";
}

// Samples of the keys-late member from `from_ms` to 7 s, linked from `linked_from_ms` on.
void keys_late_samples(Stage& st, std::int64_t pid, std::uint64_t from_ms, std::uint64_t linked_from_ms) {
  for (std::uint64_t ms = from_ms; ms < 7000; ms += 100)
    if (ms >= linked_from_ms)
      st.sample(pid, ms, kTraceA, kSpanA, {{"http.route", "/a"}});
    else
      st.sample(pid, ms, nullptr, nullptr);
}

Stage keys_late_stage() {
  auto st = conforming_stage();
  st.add_journal(400, "TLS descriptors, library linked, glibc; threadlocal keys published 3 s after start-up",
                 keys_late_journal(400));
  return st;
}

TEST(ThreadContextReaderProbes, AReaderLookingAgainWhenTheKeysComeMeetsTCTXR02) {
  auto st = keys_late_stage();
  keys_late_samples(st, 400, 100, 3200);  // nothing read before the keys (deferred), read soon after
  auto results = st.judge();
  EXPECT_EQ(results["TCTXR-02"].verdict, Verdict::Pass) << results["TCTXR-02"].reason;
}

TEST(ThreadContextReaderProbes, AReaderThatNeverLooksAgainBreaksTCTXR02) {
  auto st = keys_late_stage();
  keys_late_samples(st, 400, 100, 7000);  // never a context, keys or not
  auto results = st.judge();
  EXPECT_EQ(results["TCTXR-02"].verdict, Verdict::Warn) << results["TCTXR-02"].reason;  // a SHOULD
  EXPECT_NE(results["TCTXR-02"].reason.find("not looked for again"), std::string::npos) << results["TCTXR-02"].reason;
}

TEST(ThreadContextReaderProbes, TCTXR02IsInconclusiveWhenTheReaderCameAfterTheKeys) {
  auto st = keys_late_stage();
  keys_late_samples(st, 400, 3100, 3100);  // first sampled after the keys: the hazard was not met
  auto results = st.judge();
  EXPECT_EQ(results["TCTXR-02"].verdict, Verdict::Error) << results["TCTXR-02"].reason;
}

TEST(ThreadContextReaderProbes, TCTXR02IsNotApplicableWithoutALateKeysMember) {
  auto results = conforming_stage().judge();
  EXPECT_EQ(results["TCTXR-02"].verdict, Verdict::Skip) << results["TCTXR-02"].reason;
}

// One thread's record rewritten in place between A and B every 300 us for
// 200 ms from kT (the in-place member's rewritten_in_place state).
std::string rewrites_journal(std::int64_t pid) {
  std::string text;
  for (std::uint64_t k = 0; k < 660; ++k) {
    const auto t0 = kT + k * 300'000;
    const bool a = k % 2 == 0;
    text += R"({"event":"state","pid":)" + std::to_string(pid) + R"(,"tid":)" + std::to_string(pid + 1) + R"(,"t0":)" +
            std::to_string(t0) + R"(,"t":)" + std::to_string(t0 + 1000) + R"(,"context":)" +
            ctx(a ? kTraceA : kTraceB, a ? kSpanA : kSpanB, "[]") + R"(,"hazard":"rewritten_in_place"})" + "\n";
  }
  return text;
}

TEST(ThreadContextReaderProbes, ATornPairFromARecordRewrittenInPlaceBreaksTCTXR06) {
  Stage st;
  st.add_journal(500, "TLS descriptors, library linked, glibc; records updated in place", rewrites_journal(500));
  for (std::uint64_t ms = 1; ms < 190; ms += 10) st.sample(500, ms, kTraceA, kSpanA);
  for (std::uint64_t ms = 6; ms < 190; ms += 10) st.sample(500, ms, kTraceB, kSpanB);
  auto results = st.judge();
  EXPECT_EQ(results["TCTXR-06"].verdict, Verdict::Pass) << results["TCTXR-06"].reason;
  st.sample(500, 100, kTraceA, kSpanB);  // trace_id read before a rewrite, span_id after
  results = st.judge();
  EXPECT_EQ(results["TCTXR-06"].verdict, Verdict::Fail) << results["TCTXR-06"].reason;
  EXPECT_EQ(results["TCTXR-14"].verdict, Verdict::Pass) << "ids the thread published, paired wrong: " << results["TCTXR-14"].reason;
}

// A record past the 1024-byte bound (the oversize state): the pad entry the
// bound cuts is journaled as a poison value.
std::string oversize_journal(std::int64_t pid) {
  return R"({"event":"state","pid":)" + std::to_string(pid) + R"(,"tid":)" + std::to_string(pid + 1) + R"(,"t0":)" +
         std::to_string(kT) + R"(,"t":)" + std::to_string(kT + 1000) + R"(,"context":)" +
         ctx(kTraceA, kSpanA, R"([["http.route","/a"],["tracecorr.pad.1","1ppp"]])") +
         R"(,"hazard":"oversize","poison_values":["3ppp"]})" "\n";
}

TEST(ThreadContextReaderProbes, AnEntryPastTheBoundBreaksTCTXR16) {
  Stage st;
  st.add_journal(600, "TLS descriptors, library linked, glibc", oversize_journal(600));
  for (std::uint64_t ms = 100; ms < 1000; ms += 100)
    st.sample(600, ms, kTraceA, kSpanA, {{"http.route", "/a"}, {"tracecorr.pad.1", "1ppp"}});
  auto results = st.judge();
  EXPECT_EQ(results["TCTXR-16"].verdict, Verdict::Pass) << results["TCTXR-16"].reason;
  st.sample(600, 1500, kTraceA, kSpanA, {{"http.route", "/a"}, {"tracecorr.pad.1", "1ppp"}, {"tracecorr.pad.3", "3ppp"}});
  results = st.judge();
  EXPECT_EQ(results["TCTXR-16"].verdict, Verdict::Fail) << results["TCTXR-16"].reason;
}

TEST(ThreadContextReaderProbes, NoSamplesIsNoPass) {
  Stage st;
  st.add(100, "TLS descriptors, library linked, glibc");
  auto results = st.judge();
  for (const auto& [id, r] : results) EXPECT_NE(r.verdict, Verdict::Pass) << id << ": " << r.reason;
}

}  // namespace
}  // namespace tracecorr::profiler
#endif

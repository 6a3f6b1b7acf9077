// The Node.js thread context's reader probes
// (probes/otel_nodejs_thread_context/reader/) on evidence built by hand: a
// journal per stage member, one state of the walk's hazards per second, and
// the samples a profiler reported, each case breaking one reader rule.
#ifdef TRACECORR_HAVE_PROFILES
#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <string>

#include "hand_built_stage.hpp"

namespace tracecorr::profiler {
namespace {

using conform::Verdict;

constexpr char kTraceA[] = "4e4e4e4e4e4e4e4e0000000100000001";
constexpr char kSpanA[] = "5e00000100000001";
constexpr char kTraceB[] = "4e4e4e4e4e4e4e4e0000000100000002";
constexpr char kSpanB[] = "5e00000100000002";
constexpr char kPoisonTrace[] = "babababababababa0000000140000003";
constexpr char kPoisonSpan[] = "ba00000140000003";
constexpr char kOutOfMap[] = "njs-out-of-map-value";
using testing::kSecond;
using testing::kT;

std::string ctx(const char* trace, const char* span) {
  return std::string(R"({"trace_id":")") + trace + R"(","span_id":")" + span +
         R"(","trace_flags":1,"attributes":[["http.route","/work/0"]]})";
}
std::string poison(const char* trace, const char* span) {
  return std::string(R"(,"poison":{"trace_id":")") + trace + R"(","span_id":")" + span + R"("})";
}

// One second per state: what the fixture's worker shows in turn.
struct State {
  const char* hazard;
  std::string context;  // "null" or ctx(...)
  std::string extra;
};
const std::vector<State>& timeline() {
  static const std::vector<State> states = {
      {"", ctx(kTraceA, kSpanA), ""},
      {"valid_0_poison", "null", poison(kPoisonTrace, kPoisonSpan)},
      {"gate_closed_poison", "null", poison(kPoisonTrace, "ba00000140000004")},
      {"rehash_forward", "null", poison(kPoisonTrace, "ba00000140000005")},
      {"record_null", "null", ""},
      {"deleted_entries", ctx(kTraceB, kSpanB), ""},
      {"map_forwarded", ctx(kTraceB, "5e00000140000007"), ""},
      {"out_of_map", ctx(kTraceB, "5e00000140000008"), std::string(R"(,"poison_values":[")") + kOutOfMap + "\"]"},
      {"frame_detached", "null", ""},
      {"frame_undefined", "null", ""},
      {"", ctx(kTraceA, kSpanA), ""},
  };
  return states;
}

std::string journal(std::int64_t pid) {
  std::string text;
  for (std::size_t i = 0; i < timeline().size(); ++i) {
    const auto& st = timeline()[i];
    const auto t0 = kT + i * kSecond;
    text += R"({"event":"state","pid":)" + std::to_string(pid) + R"(,"tid":)" + std::to_string(pid + 1) + R"(,"t0":)" +
            std::to_string(t0) + R"(,"t":)" + std::to_string(t0 + 1000) + R"(,"context":)" + st.context +
            R"(,"hazard":")" + st.hazard + "\"" + st.extra + "}\n";
  }
  return text;
}

struct Stage : testing::HandBuiltStage {
  Stage() : HandBuiltStage("otel-nodejs-thread-context") {}
  void add(std::int64_t pid, const std::string& layout, bool must_not_be_read = false) {
    HandBuiltStage::add(pid, layout, journal(pid), must_not_be_read);
  }
  // A conforming reader: every state's context, with its attributes; nothing where none.
  void right(std::int64_t pid) {
    for (std::uint64_t ms = 100; ms < timeline().size() * 1000; ms += 100) {
      const auto& context = stage_context(pid, ms);
      if (!context) sample(pid, ms, nullptr, nullptr);
      else sample(pid, ms, to_hex(context->trace_id).c_str(), to_hex(context->span_id).c_str(), {{"http.route", "/work/0"}});
    }
  }
  const std::optional<stage::Context>& stage_context(std::int64_t pid, std::uint64_t ms) {
    for (const auto& m : evidence.members)
      if (m.pid == pid) return m.truth.states.at(ms / 1000).context;
    throw std::runtime_error("no member");
  }
  // Removes member `pid`'s samples in [from_ms, to_ms) and puts unlinked ones
  // there: 4 of a state's 10 (a reader missing one state; 4 of the member's
  // 49 samples of a context stay within what NJSR-02 lets a reader miss).
  void unlink(std::int64_t pid, std::uint64_t from_ms, std::uint64_t to_ms) {
    std::erase_if(evidence.samples, [&](const auto& s) {
      const auto ms = (s.time->nanos - kT) / 1'000'000;
      return *s.pid == pid && ms >= from_ms && ms < to_ms;
    });
    for (auto ms = from_ms; ms < to_ms; ms += 100) sample(pid, ms, nullptr, nullptr);
  }
};

Stage conforming_stage() {
  Stage st;
  st.add(100, "addon dlopen()ed, static surplus");
  st.add(200, "addon dlopen()ed, dynamic TLS");
  st.add(300, "announces tlsdesc_v1_dev", true);
  st.right(100);
  st.right(200);
  for (std::uint64_t ms = 100; ms < 1000; ms += 100) st.sample(300, ms, nullptr, nullptr);
  return st;
}

const char* const kJudged[] = {"NJSR-01", "NJSR-02", "NJSR-03", "NJSR-04", "NJSR-05", "NJSR-06",
                               "NJSR-08", "NJSR-10", "NJSR-11", "NJSR-12", "NJSR-13", "NJSR-14"};

TEST(NodeThreadContextReaderProbes, AConformingReaderPassesEveryJudgedRule) {
  auto results = conforming_stage().judge();
  for (const char* id : kJudged) EXPECT_EQ(results[id].verdict, Verdict::Pass) << id << ": " << results[id].reason;
}

TEST(NodeThreadContextReaderProbes, EachDefectFailsItsOwnRuleAlone) {
  struct Case {
    const char* id;
    std::function<void(Stage&)> defect;
  };
  const std::vector<Case> cases = {
      {"NJSR-01", [](Stage& s) { s.sample(300, 500, kTraceA, kSpanA); }},
      {"NJSR-03", [](Stage& s) { s.sample(100, 550, kTraceB, kSpanB); }},  // B's ids while A was current
      {"NJSR-04", [](Stage& s) { s.sample(100, 2500, kPoisonTrace, "ba00000140000004"); }},
      {"NJSR-05", [](Stage& s) { s.sample(100, 9500, kTraceA, kSpanA); }},
      {"NJSR-06", [](Stage& s) { s.sample(100, 3500, kPoisonTrace, "ba00000140000005"); }},
      {"NJSR-08", [](Stage& s) { s.unlink(100, 5600, 6000); }},
      {"NJSR-10", [](Stage& s) { s.sample(100, 8500, kTraceA, kSpanA); }},
      {"NJSR-11", [](Stage& s) { s.sample(100, 4500, kTraceB, kSpanB); }},
      {"NJSR-12", [](Stage& s) { s.sample(100, 1500, kPoisonTrace, kPoisonSpan); }},
      {"NJSR-12", [](Stage& s) {
         s.sample(100, 7550, kTraceB, "5e00000140000008", {{"http.route", "/work/0"}, {"tracecorr.index.9", kOutOfMap}});
       }},
      {"NJSR-12", [](Stage& s) { s.sample(100, 550, kTraceA, kSpanA, {{"http.route", "/work/1"}}); }},
      {"NJSR-12", [](Stage& s) { s.sample(100, 550, kTraceA, kSpanA, {{"route", "/work/0"}}); }},  // under another key
      {"NJSR-13", [](Stage& s) { s.sample(100, 550, kTraceA, "0123456789abcdef"); }},
      {"NJSR-14", [](Stage& s) { s.unlink(200, 6600, 7000); }},
  };
  for (const auto& c : cases) {
    auto st = conforming_stage();
    c.defect(st);
    auto results = st.judge();
    const auto expected = results[c.id].level == Level::Should ? Verdict::Warn : Verdict::Fail;
    EXPECT_EQ(results[c.id].verdict, expected) << c.id << ": " << results[c.id].reason;
    for (const auto& [id, r] : results)
      if (id != c.id && (r.verdict == Verdict::Fail || r.verdict == Verdict::Warn))
        ADD_FAILURE() << "the defect of " << c.id << " also broke " << id << ": " << r.reason;
  }
}

// Which keys a profiler exports is its choice: a right sample without the
// record's attributes is no misreading.
TEST(NodeThreadContextReaderProbes, ARightSampleWithoutAttributesIsNoMisreading) {
  auto st = conforming_stage();
  st.sample(100, 550, kTraceA, kSpanA);
  EXPECT_EQ(st.judge()["NJSR-12"].verdict, Verdict::Pass);
}

TEST(NodeThreadContextReaderProbes, AReaderThatReadsNoDynamicTlsFailsNamingIt) {
  Stage st;
  st.add(100, "addon dlopen()ed, static surplus");
  st.add(200, "addon dlopen()ed, dynamic TLS");
  st.right(100);
  for (std::uint64_t ms = 100; ms < 11000; ms += 100) st.sample(200, ms, nullptr, nullptr);
  auto results = st.judge();
  EXPECT_EQ(results["NJSR-02"].verdict, Verdict::Fail);
  EXPECT_NE(results["NJSR-02"].reason.find("dynamic TLS"), std::string::npos) << results["NJSR-02"].reason;
}

// No sample of a hazard: its rule has no verdict on nothing (an error saying so, not a pass).
TEST(NodeThreadContextReaderProbes, AHazardNeverSampledIsNoPass) {
  auto st = conforming_stage();
  std::erase_if(st.evidence.samples, [](const auto& s) {
    const auto ms = (s.time->nanos - kT) / 1'000'000;
    return ms >= 2900 && ms < 4100;  // rehash_forward's second and its edges
  });
  auto results = st.judge();
  EXPECT_NE(results["NJSR-06"].verdict, Verdict::Pass) << results["NJSR-06"].reason;
  EXPECT_EQ(results["NJSR-04"].verdict, Verdict::Pass) << results["NJSR-04"].reason;
}

// A member under another schema never sampled was left alone (the rule allows
// it) while the others were read; with nothing read at all, no pass.
TEST(NodeThreadContextReaderProbes, AnUnreadMemberLeftAlonePassesOnlyBesideReadOnes) {
  auto st = conforming_stage();
  std::erase_if(st.evidence.samples, [](const auto& s) { return *s.pid == 300; });
  auto results = st.judge();
  EXPECT_EQ(results["NJSR-01"].verdict, Verdict::Pass) << results["NJSR-01"].reason;
  EXPECT_NE(results["NJSR-01"].reason.find("left alone"), std::string::npos) << results["NJSR-01"].reason;
  st.evidence.samples.clear();
  for (auto& m : st.evidence.members) m.samples.clear();
  results = st.judge();
  EXPECT_NE(results["NJSR-01"].verdict, Verdict::Pass) << results["NJSR-01"].reason;
}

}  // namespace
}  // namespace tracecorr::profiler
#endif

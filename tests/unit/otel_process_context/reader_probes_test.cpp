// OTEP 4719's reader probe (probes/otel_process_context/reader/) on evidence
// built by hand: the `context` journal lines of stage members (a republishing
// writer with poison in its zero windows, a mapping with a wrong signature, a
// damaged one) and the resources a profiler's samples carried.
#ifdef TRACECORR_HAVE_PROFILES
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "hand_built_stage.hpp"

namespace tracecorr::profiler {
namespace {

using conform::Verdict;

using testing::kSecond;
using testing::kT;
constexpr char kService[] = "writer";
constexpr char kForeign[] = "tracecorr-damaged-signature";

std::string context_line(int second, std::uint64_t published_at, const std::string& resource,
                         const std::string& poison) {
  const auto t0 = kT + static_cast<std::uint64_t>(second) * kSecond;
  return R"({"event":"context","t0":)" + std::to_string(t0) + R"(,"t":)" + std::to_string(t0 + 1000) +
         R"(,"published_at":)" + std::to_string(published_at) + R"(,"resource":)" + resource +
         (poison.empty() ? "" : R"(,"poison_values":[")" + poison + R"("])") + "}\n";
}

std::string generation(const std::string& k) {
  return std::string(R"([["service.name",")") + kService + R"("],["tracecorr.generation",")" + k + R"("]])";
}

// Generation 1, a zero window showing poison-2, generation 2.
std::string republishing_journal() {
  return context_line(0, 10, generation("1"), "") + context_line(1, 0, "null", "poison-2") +
         context_line(1, 20, generation("2"), "");
}

struct Stage : testing::HandBuiltStage {
  Stage() : HandBuiltStage("otel-process-context") {}
  MemberEvidence& add(std::int64_t pid, const std::string& name, const std::string& journal,
                      std::vector<std::string> hazards = {}) {
    auto& m = HandBuiltStage::add(pid, name, journal);
    m.member.hazards = std::move(hazards);
    return m;
  }
  // A sample of `pid` at `ms` after kT carrying `resource` (empty: none).
  void sample(std::int64_t pid, std::uint64_t ms, const testing::Strings& resource = {}) {
    HandBuiltStage::sample(pid, ms, nullptr, nullptr, {}, resource);
  }
};

// Two republishing writers read right; a wrong-signature member and a
// damaged one sampled with no resource.
Stage conforming_stage() {
  Stage st;
  st.add(100, "a", republishing_journal());
  st.add(200, "b", republishing_journal());
  st.add(300, "damaged-signature", context_line(0, 11, "null", kForeign), {"context_wrong_signature"});
  st.add(400, "damaged-payload-size", context_line(0, 12, "null", ""), {"context_invalid"});
  for (std::uint64_t ms = 100; ms < 2000; ms += 100) {
    for (std::int64_t pid : {100, 200})
      st.sample(pid, ms, {{"service.name", kService}, {"tracecorr.generation", ms < 1000 ? "1" : "2"}});
    st.sample(300, ms);
    st.sample(400, ms);
  }
  return st;
}

TEST(ProcessContextReaderProbes, AConformingReaderPassesEveryJudgedRule) {
  auto st = conforming_stage();
  auto results = st.judge();
  for (const char* id : {"PCTXR-01", "PCTXR-02", "PCTXR-03", "PCTXR-04", "PCTXR-05"})
    EXPECT_EQ(results[id].verdict, Verdict::Pass) << id << ": " << results[id].reason;
}

TEST(ProcessContextReaderProbes, EachDefectFailsItsOwnRules) {
  struct Case {
    std::vector<std::string> ids;  // what the defect breaks: PCTXR-03 and 04 are judged on the same poison
    std::function<void(Stage&)> defect;
  };
  const std::vector<Case> cases = {
      {{"PCTXR-03", "PCTXR-04"},
       [](Stage& s) { s.sample(100, 1500, {{"service.name", kService}, {"tracecorr.generation", "poison-2"}}); }},
      {{"PCTXR-02"}, [](Stage& s) { s.sample(300, 1500, {{"service.name", kForeign}}); }},
      {{"PCTXR-01"},
       [](Stage& s) {
         s.add(500, "never-read", republishing_journal());
         for (std::uint64_t ms = 100; ms < 2000; ms += 100) s.sample(500, ms);
       }},
  };
  for (const auto& c : cases) {
    auto st = conforming_stage();
    c.defect(st);
    auto results = st.judge();
    for (const auto& id : c.ids) {
      const auto expected = results[id].level == Level::Should ? Verdict::Warn : Verdict::Fail;
      EXPECT_EQ(results[id].verdict, expected) << id << ": " << results[id].reason;
    }
    for (const auto& [id, r] : results)
      if (std::find(c.ids.begin(), c.ids.end(), id) == c.ids.end() &&
          (r.verdict == Verdict::Fail || r.verdict == Verdict::Warn))
        ADD_FAILURE() << "the defect of " << c.ids.front() << " also broke " << id << ": " << r.reason;
  }
}

TEST(ProcessContextReaderProbes, TheMemberNeverReadIsNamed) {
  auto st = conforming_stage();
  st.add(500, "never-read", republishing_journal());
  for (std::uint64_t ms = 100; ms < 2000; ms += 100) st.sample(500, ms);
  auto results = st.judge();
  EXPECT_NE(results["PCTXR-01"].reason.find("otel-process-context/never-read"), std::string::npos)
      << results["PCTXR-01"].reason;
}

TEST(ProcessContextReaderProbes, NoWrongSignatureSampledIsNotAPass) {
  Stage st;
  st.add(300, "damaged-signature", context_line(0, 11, "null", kForeign), {"context_wrong_signature"});
  EXPECT_NE(st.judge()["PCTXR-02"].verdict, Verdict::Pass);
}

}  // namespace
}  // namespace tracecorr::profiler
#endif

// The Node.js suite's judges on facts built by hand: a rule passes on the
// thread looks it applied to and on nothing else, fails at the first look
// that broke it (saying how many did), and is not applicable when no look
// could judge it; NJS-10 only when the process was told to run without
// AsyncContextFrame; NJS-19 (a permission) only when a gate was seen closing
// and opening again.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>

#include "probes/otel_nodejs_thread_context/probes.hpp"

namespace tracecorr::otel_nodejs_thread_context {
namespace {

ThreadLookFacts look(pid_t tid, WalkEnd end, bool gate_open = true) {
  ThreadLookFacts t;
  t.tid = tid;
  t.gate_open = gate_open;
  t.end = end;
  return t;
}

ThreadLookFacts with_record(ThreadLookFacts t) {
  ThreadContextRecord r;
  r.valid = 1;
  t.record = r;
  return t;
}

const Finding& of(const std::vector<Finding>& found, const std::string& id) {
  auto it = std::find_if(found.begin(), found.end(), [&](const Finding& f) { return f.requirement == id; });
  if (it == found.end()) throw std::runtime_error(id + " not judged");
  return *it;
}

NodeFacts facts_of(std::vector<ThreadLookFacts> threads, std::size_t looks) {
  NodeFacts f;
  f.judged_pid = 10;
  f.looks = looks;
  f.threads = std::move(threads);
  return f;
}

TEST(NodeJudges, ARulePassesOnTheLooksItAppliedTo) {
  auto f = facts_of({with_record(look(11, WalkEnd::Record)), look(11, WalkEnd::Detached), look(12, WalkEnd::GateClosed, false),
                     look(13, WalkEnd::NotInFrame)},
                    2);
  auto found = judge_threads(f);
  EXPECT_EQ(of(found, "NJS-06").outcome, Finding::Outcome::Met);
  EXPECT_EQ(of(found, "NJS-06").evidence_count, 3u) << "the three open gates";
  EXPECT_EQ(of(found, "NJS-07").evidence_count, 2u) << "the key found on its chain (record, detached)";
  EXPECT_EQ(of(found, "NJS-08").evidence_count, 1u);
  EXPECT_EQ(of(found, "NJS-11").evidence_count, 1u);
  EXPECT_EQ(of(found, "NJS-12").outcome, Finding::Outcome::Met);
}

TEST(NodeJudges, ARuleFailsAtTheFirstLookThatBrokeIt) {
  auto broken = look(11, WalkEnd::NotInFrame);
  broken.violations.push_back(violated("NJS-07", "thread 11: the ALS key is entry 3, not on the chain of bucket 1"));
  auto f = facts_of({look(11, WalkEnd::Record), broken, broken}, 3);
  const auto& njs07 = of(judge_threads(f), "NJS-07");
  EXPECT_EQ(njs07.outcome, Finding::Outcome::Violated);
  EXPECT_NE(njs07.reason.find("entry 3"), std::string::npos) << njs07.reason;
  EXPECT_NE(njs07.reason.find("2 of 3 thread looks"), std::string::npos) << njs07.reason;
}

TEST(NodeJudges, NoLookThatCouldJudgeIsNoVerdict) {
  auto f = facts_of({look(11, WalkEnd::GateClosed, false), look(12, WalkEnd::GateClosed, false)}, 4);
  auto found = judge_threads(f);
  for (const char* id : {"NJS-06", "NJS-07", "NJS-08", "NJS-11", "NJS-12", "NJS-19"})
    EXPECT_EQ(of(found, id).outcome, Finding::Outcome::NotApplicable) << id;
  EXPECT_NE(of(found, "NJS-06").reason.find("in 4 looks"), std::string::npos) << of(found, "NJS-06").reason;
}

TEST(NodeJudges, AGateSeenClosingAndOpeningAgainIsThePermissionUsed) {
  auto f = facts_of({look(11, WalkEnd::Record), look(11, WalkEnd::GateClosed, false), look(11, WalkEnd::Record),
                     look(12, WalkEnd::Record), look(12, WalkEnd::GateClosed, false)},
                    3);
  const auto& njs19 = of(judge_threads(f), "NJS-19");
  EXPECT_EQ(njs19.outcome, Finding::Outcome::Met);
  EXPECT_EQ(njs19.evidence_count, 1u) << "thread 12 closed its gate and never opened it again";
}

TEST(NodeJudges, WithoutAsyncContextFrameNothingMayBeDeclared) {
  auto quiet = facts_of({look(11, WalkEnd::GateClosed, false)}, 5);
  EXPECT_EQ(of(judge_reference(quiet), "NJS-10").outcome, Finding::Outcome::NotApplicable) << "not told: AsyncContextFrame on";
  quiet.async_context_frame_off = "NODE_OPTIONS";
  EXPECT_EQ(of(judge_reference(quiet), "NJS-10").outcome, Finding::Outcome::Met);
  EXPECT_EQ(of(judge_reference(quiet), "NJS-10").evidence_count, 5u);
  EXPECT_EQ(of(judge_reference(quiet), "NJS-09").outcome, Finding::Outcome::NotApplicable);
  auto declared = quiet;
  declared.reference = ReferenceData{};
  declared.reference->schema_version_value = otlp::AttributeValue{};
  declared.reference->schema_version = "nodejs_v1_dev";
  EXPECT_EQ(of(judge_reference(declared), "NJS-10").outcome, Finding::Outcome::Violated);
  auto opened = quiet;
  opened.threads.push_back(look(12, WalkEnd::NoFrame));
  EXPECT_EQ(of(judge_reference(opened), "NJS-10").outcome, Finding::Outcome::Violated);
}

TEST(NodeJudges, ASchemaWithoutTheModuleFailsTheVariable) {
  NodeFacts f = facts_of({}, 1);
  f.reference = ReferenceData{};
  EXPECT_EQ(of(judge_variable(f), "NJS-01").outcome, Finding::Outcome::NotApplicable)
      << "no module and nothing declared (AsyncContextFrame off): nothing to judge";
  f.reference->schema_version_value = otlp::AttributeValue{"nodejs_v1_dev"};
  f.reference->schema_version = "nodejs_v1_dev";
  auto found = judge_variable(f);
  EXPECT_EQ(of(found, "NJS-01").outcome, Finding::Outcome::Violated);
  EXPECT_EQ(of(found, "NJS-02").outcome, Finding::Outcome::NotApplicable);
  EXPECT_EQ(of(found, "NJS-03").outcome, Finding::Outcome::NotApplicable);
  f.module_error = "permission denied";
  EXPECT_EQ(of(judge_variable(f), "NJS-01").outcome, Finding::Outcome::KitError);
}

TEST(NodeJudges, EveryWriterRuleHasAProbe) {
  std::vector<std::string> covered;
  for (const auto& p : make_probes())
    for (const auto& id : p->requirements()) covered.push_back(id);
  std::sort(covered.begin(), covered.end());
  std::vector<std::string> writer;
  for (int i = 1; i <= 19; ++i) writer.push_back("NJS-" + std::string(i < 10 ? "0" : "") + std::to_string(i));
  EXPECT_EQ(covered, writer);
}

}  // namespace
}  // namespace tracecorr::otel_nodejs_thread_context

namespace tracecorr::otel_nodejs_thread_context {
namespace {

// One store's state of a thread's struct, as the watch reports it.
watch::SlotPublication state(pid_t tid, std::uint64_t cped, std::uint64_t als, std::uint8_t offset, std::uint64_t undefined,
                             bool at_arming = false) {
  watch::SlotPublication p;
  p.pid = 10;
  p.tid = tid;
  p.at_arming = at_arming;
  p.slot_bytes.assign(32, 0);
  std::memcpy(p.slot_bytes.data(), &cped, 8);
  std::memcpy(p.slot_bytes.data() + 8, &als, 8);
  p.slot_bytes[20] = offset;
  std::memcpy(p.slot_bytes.data() + 24, &undefined, 8);
  return p;
}

NodeFacts watched(std::vector<watch::SlotPublication> stores) {
  NodeFacts f;
  f.session = kWatchedSession;
  f.judged_pid = 10;
  f.gate_watch = watch::SlotWatchReport{};
  f.gate_watch->publications = std::move(stores);
  return f;
}

TEST(NodeGateJudge, TheGateStoredLastAndClearedFirstPasses) {
  auto f = watched({state(11, 0, 0, 0, 0, true), state(11, 0, 0x1001, 0, 0), state(11, 0, 0x1001, 32, 0),
                    state(11, 0, 0x1001, 32, 0x2001), state(11, 0x3000, 0x1001, 32, 0x2001),  // the gate, last
                    state(11, 0, 0x1001, 32, 0x2001), state(11, 0, 0, 0, 0)});               // cleared first
  auto found = judge_gate(f);
  EXPECT_EQ(of(found, "NJS-04").outcome, Finding::Outcome::Met);
  EXPECT_EQ(of(found, "NJS-04").evidence_count, 1u);
  EXPECT_EQ(of(found, "NJS-05").outcome, Finding::Outcome::Met);
}

TEST(NodeGateJudge, AGateOpenedOverUnsetFieldsFailsNJS04) {
  auto f = watched({state(11, 0, 0, 0, 0, true), state(11, 0x3000, 0, 0, 0), state(11, 0x3000, 0x1001, 32, 0x2001)});
  auto found = judge_gate(f);
  EXPECT_EQ(of(found, "NJS-04").outcome, Finding::Outcome::Violated);
  EXPECT_EQ(of(found, "NJS-05").outcome, Finding::Outcome::NotApplicable) << "filling in is not clearing";
}

TEST(NodeGateJudge, FieldsClearedBehindAnOpenGateFailNJS05) {
  auto f = watched({state(11, 0x3000, 0x1001, 32, 0x2001, true), state(11, 0x3000, 0, 32, 0x2001),
                    state(11, 0, 0, 0, 0)});
  auto found = judge_gate(f);
  EXPECT_EQ(of(found, "NJS-05").outcome, Finding::Outcome::Violated);
  EXPECT_EQ(of(found, "NJS-04").outcome, Finding::Outcome::NotApplicable) << "armed with its gate open: no opening seen";
}

TEST(NodeGateJudge, NoWatchNoVerdict) {
  NodeFacts f;
  f.gate_watch_unavailable = "attach mode";
  auto found = judge_gate(f);
  EXPECT_EQ(of(found, "NJS-04").outcome, Finding::Outcome::NotApplicable);
  EXPECT_NE(of(found, "NJS-04").reason.find("attach mode"), std::string::npos);
}

}  // namespace
}  // namespace tracecorr::otel_nodejs_thread_context

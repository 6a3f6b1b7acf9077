// The Node.js suite's judges on facts built by hand: a rule passes on the
// thread looks it applied to and on nothing else, fails at the first look
// that broke it (saying how many did), and is not applicable when no look
// could judge it; NJS-10 only when the process was told to run without
// AsyncContextFrame; NJS-19 (a permission) only when a gate was seen closing
// and opening again. NJS-13 and 14 judge a read's time by the end of its
// interval (look began, thread read) that favours the writer, and a writer's
// lateness by its own time, its waits for a CPU taken out.
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

// The span judges: times in ms on one clock (monotonic = wall), the thread's
// run-queue wait (schedstat) as it stood at each look.
constexpr std::uint64_t kMs = 1000000;

ThreadLookFacts read_of(pid_t tid, std::uint64_t began_ms, std::uint64_t stopped_by_ms, std::uint64_t waited_ms,
                        std::optional<std::uint8_t> span = std::nullopt) {
  ThreadLookFacts t = look(tid, span ? WalkEnd::Record : WalkEnd::Detached);
  t.time_ns = began_ms * kMs;
  t.stopped_by_ns = stopped_by_ms * kMs;
  t.run_queue_wait_ns = waited_ms * kMs;
  if (span) {
    ThreadContextRecord r;
    r.valid = 1;
    r.trace_id[15] = 1;
    r.span_id[7] = *span;
    t.record = r;
  }
  return t;
}

otlp::ReceivedSpan span_of(std::uint8_t id, std::uint64_t start_ms, std::uint64_t end_ms, std::optional<pid_t> tid = std::nullopt) {
  otlp::ReceivedSpan s;
  s.trace_id[15] = 1;
  s.span_id[7] = id;
  s.start_unix_nano = start_ms * kMs;
  s.end_unix_nano = end_ms * kMs;
  if (tid) s.attributes["thread.id"].value = std::int64_t{*tid};
  return s;
}

std::vector<Finding> judged_spans(std::vector<ThreadLookFacts> reads, std::vector<otlp::ReceivedSpan> spans) {
  auto f = facts_of(std::move(reads), 3);
  f.read_clock = conform::ReadClock{0, 0, 1000};
  conform::SessionEvidence session;
  session.spans = std::move(spans);
  return judge_spans(session, f);
}

TEST(NodeSpanJudges, AThreadSlowToStopIsReadAtTheLatestItCouldHaveStopped) {
  // The look began at 1000 ms; the starved thread stopped by 1060 ms, after entering a span it began at 1055.
  auto found = judged_spans({read_of(11, 1000, 1060, 40, 2)}, {span_of(2, 1055, 1300)});
  EXPECT_EQ(of(found, "NJS-13").outcome, Finding::Outcome::Met) << of(found, "NJS-13").reason;
}

TEST(NodeSpanJudges, ASpanBegunLongAfterTheReadInTheWritersOwnTimeFailsNJS13) {
  auto found = judged_spans({read_of(11, 1000, 1001, 0, 2), read_of(11, 1400, 1401, 10, 2)}, {span_of(2, 1300, 1600)});
  const auto& f = of(found, "NJS-13");
  ASSERT_EQ(f.outcome, Finding::Outcome::Violated);
  EXPECT_NE(f.reason.find("began 299 ms after the thread was read"), std::string::npos) << f.reason;
  EXPECT_NE(f.reason.find("264 ms of them"), std::string::npos) << f.reason;
}

TEST(NodeSpanJudges, AWriterThatWaitedForACpuIsNotFailedOnWallTime) {
  // The same reads, but the thread waited 250 of the ms between them in a run queue: 24 ms its own.
  auto found = judged_spans({read_of(11, 1000, 1001, 0, 2), read_of(11, 1400, 1401, 250, 2), read_of(12, 1400, 1401, 0, 3)},
                            {span_of(2, 1300, 1600), span_of(3, 1200, 1600)});
  const auto& f = of(found, "NJS-13");
  EXPECT_EQ(f.outcome, Finding::Outcome::Met) << f.reason;
  EXPECT_NE(f.reason.find("1 named a span exported as beginning after the read"), std::string::npos) << f.reason;
}

TEST(NodeSpanJudges, NoLaterLookNoBoundOnTheWait) {
  auto found = judged_spans({read_of(11, 1000, 1001, 0, 2), read_of(12, 1000, 1001, 0, 3)},
                            {span_of(2, 1300, 1600), span_of(3, 900, 1600)});
  EXPECT_EQ(of(found, "NJS-13").outcome, Finding::Outcome::Met) << of(found, "NJS-13").reason;
}

TEST(NodeSpanJudges, ARecordNamingAnotherThreadsSpanWhileItsOwnIsOpenFailsNJS13) {
  auto found = judged_spans({read_of(11, 1000, 1001, 0, 2)}, {span_of(2, 500, 1600, 12), span_of(4, 500, 1600, 11)});
  const auto& f = of(found, "NJS-13");
  ASSERT_EQ(f.outcome, Finding::Outcome::Violated);
  EXPECT_NE(f.reason.find("a span of thread 12"), std::string::npos) << f.reason;
}

TEST(NodeSpanJudges, AChildSpanJustEnteredOnItsOwnThreadIsNotAnotherSpan) {
  // Span 4 (the parent) is open for certain; span 2 began 10 ms before the look: maybe open, and the one entered.
  auto found = judged_spans({read_of(11, 1000, 1001, 0, 2)}, {span_of(2, 990, 1600, 11), span_of(4, 500, 1700, 11)});
  EXPECT_EQ(of(found, "NJS-13").outcome, Finding::Outcome::Met) << of(found, "NJS-13").reason;
}

TEST(NodeSpanJudges, ARecordValidLongAfterItsSpanEndedInTheWritersOwnTimeFailsNJS14) {
  auto found = judged_spans({read_of(11, 400, 401, 10, 2), read_of(11, 900, 901, 20, 2)}, {span_of(2, 0, 500)});
  const auto& f = of(found, "NJS-14");
  ASSERT_EQ(f.outcome, Finding::Outcome::Violated);
  EXPECT_NE(f.reason.find("still valid 400 ms after its span"), std::string::npos) << f.reason;
  EXPECT_NE(f.reason.find("365 ms of them"), std::string::npos) << f.reason;
}

TEST(NodeSpanJudges, ARecordLeftValidWhileItsWriterWaitedForACpuIsNotAFailure) {
  auto found = judged_spans({read_of(11, 400, 401, 10, 2), read_of(11, 900, 901, 380, 2), read_of(11, 1000, 1001, 380)},
                            {span_of(2, 0, 500)});
  const auto& f = of(found, "NJS-14");
  EXPECT_EQ(f.outcome, Finding::Outcome::Met) << f.reason;
  EXPECT_NE(f.reason.find("1 found a record valid past its span's end by less than 50 ms"), std::string::npos) << f.reason;
}

}  // namespace
}  // namespace tracecorr::otel_nodejs_thread_context

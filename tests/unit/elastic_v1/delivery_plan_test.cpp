// The spec personality's delivery (issue 29): what the sender sees of the
// agent's reads (AgentReads), the plan (DeliveryPlan), the bound it is judged
// against (capacity_bound), and the three together against simulated agents
// that read every 20 ms until their queue is empty or every 100 ms only what
// their queue holds.
#include <gtest/gtest.h>

#include <array>
#include <deque>
#include <functional>
#include <map>
#include <random>

#include "elastic_v1/agent/delivery_plan.hpp"

namespace tracecorr::elastic_v1::agent {
namespace {

using std::chrono::microseconds;
using std::chrono::milliseconds;
constexpr std::uint64_t kCharge = 768;  // a 46-byte datagram's truesize on x86-64

const DeliveryTime t0 = DeliveryTime{} + std::chrono::seconds(1000);

CorrelationKey key(int transaction, int stack) {
  CorrelationKey k;
  k.trace_id[0] = 1;
  k.trace_id[1] = static_cast<std::uint8_t>(transaction);
  k.trace_id[2] = static_cast<std::uint8_t>(transaction >> 8);
  k.transaction_id[0] = static_cast<std::uint8_t>(transaction);
  k.transaction_id[1] = static_cast<std::uint8_t>(transaction >> 8);
  k.stack_trace_id[0] = static_cast<std::uint8_t>(stack);
  return k;
}

// ---- AgentReads ---------------------------------------------------------------------------

constexpr DeliveryTime kNever = DeliveryTime::max();

TEST(AgentReads, ADatagramLeavesTheSendersUnreadBytesWhenTheAgentReadsIt) {
  AgentReads r(11);
  for (int i = 0; i < 3; ++i) r.sent(2, t0 + milliseconds(500), kNever, kCharge, t0);
  r.observe(3 * kCharge, t0 + milliseconds(1));
  EXPECT_EQ(r.in_flight(), 3u);
  EXPECT_FALSE(r.reads_seen());
  r.observe(kCharge, t0 + milliseconds(5));  // the agent read the two oldest
  EXPECT_EQ(r.in_flight(), 1u);
  EXPECT_EQ(r.reads(), 1u);
  EXPECT_EQ(r.outcomes().in_time.messages, 2u);
  EXPECT_EQ(r.outcomes().in_time.samples, 4u);
  EXPECT_EQ(r.room(), 10u);
}

TEST(AgentReads, InTimeByDue_LateWhenStillUnreadAfterLateAfter_UnconfirmedBetween) {
  AgentReads r;
  const DeliveryTime due = t0 + milliseconds(10), late_after = t0 + milliseconds(15);
  r.sent(5, due, late_after, kCharge, t0);
  ASSERT_TRUE(r.next_check());
  EXPECT_GT(*r.next_check(), late_after);
  r.observe(kCharge, late_after + microseconds(1));  // still there after late_after
  r.observe(0, late_after + milliseconds(20));
  EXPECT_EQ(r.outcomes().late.samples, 5u);

  const DeliveryTime later = t0 + milliseconds(100);
  r.sent(7, later, later + milliseconds(5), kCharge, later - milliseconds(30));
  r.observe(kCharge, later - milliseconds(1));
  r.observe(0, later + milliseconds(3));  // after due, before late_after: the transaction may have run on
  EXPECT_EQ(r.outcomes().unconfirmed.samples, 7u);

  r.sent(2, later, kNever, kCharge, later);  // its transaction never seen left: never called late
  r.observe(kCharge, later + std::chrono::seconds(5));
  r.observe(0, later + std::chrono::seconds(6));
  EXPECT_EQ(r.outcomes().unconfirmed.samples, 9u);

  r.sent(3, t0 + milliseconds(300), kNever, kCharge, t0 + milliseconds(200));
  r.observe(0, t0 + milliseconds(300));  // read by due exactly: in time
  EXPECT_EQ(r.outcomes().in_time.samples, 3u);
  EXPECT_EQ(r.outcomes().late.samples, 5u);
}

TEST(AgentReads, WhatAnExitPurgedIsNeitherReadNorAReadAndAbandonedIsUnconfirmed) {
  AgentReads r;
  r.sent(4, t0 + milliseconds(500), kNever, kCharge, t0);
  r.observe(0, t0 + milliseconds(1), /*purged=*/true);
  EXPECT_EQ(r.outcomes().unconfirmed.samples, 4u);
  EXPECT_FALSE(r.reads_seen());
  r.sent(6, t0 + milliseconds(500), kNever, kCharge, t0 + milliseconds(2));
  r.abandon();
  EXPECT_EQ(r.outcomes().unconfirmed.samples, 10u);
  EXPECT_EQ(r.in_flight(), 0u);
}

TEST(AgentReads, ARegistrationCountsAsARead_NotAsSamples) {
  AgentReads r;
  r.sent(0, kNever, kNever, 1024, t0);
  r.observe(0, t0 + milliseconds(3));
  EXPECT_TRUE(r.reads_seen());
  EXPECT_EQ(r.outcomes().in_time.messages + r.outcomes().late.messages + r.outcomes().unconfirmed.messages, 0u);
}

// Sends one datagram right after each read of an agent reading every `period`.
void periodic_reads(AgentReads& r, DeliveryDuration period, int reads, DeliveryTime start = t0) {
  DeliveryTime now = start;
  r.sent(1, now + std::chrono::seconds(10), kNever, kCharge, now);
  for (int i = 0; i < reads; ++i) {
    now += period;
    r.observe(0, now);
    r.sent(1, now + std::chrono::seconds(10), kNever, kCharge, now);
  }
}

TEST(AgentReads, LearnsThePeriodFromDatagramsThatWaitedAWholePeriod) {
  AgentReads r;
  EXPECT_EQ(r.next_read(t0), t0 + AgentReads::kUnknownReadWait);  // nothing seen: assume a slow reader
  periodic_reads(r, milliseconds(20), 8);
  ASSERT_TRUE(r.read_period());
  EXPECT_EQ(*r.read_period(), milliseconds(20));
  EXPECT_EQ(r.read_wait(), milliseconds(20));
  EXPECT_FALSE(r.reads_at_once());
  const DeliveryTime last = t0 + milliseconds(160);
  EXPECT_EQ(r.next_read(last + milliseconds(5)), last + milliseconds(20));
  EXPECT_EQ(r.next_read(last + milliseconds(25)), last + milliseconds(25));  // overdue: any moment
  EXPECT_FALSE(r.next_check()) << "nothing unread can be called late";
}

TEST(AgentReads, AnAgentThatReadsAtOnceHasNoPeriod) {
  AgentReads r;
  DeliveryTime now = t0;
  for (int i = 0; i < 5; ++i) {
    r.sent(1, now + std::chrono::seconds(1), kNever, kCharge, now);
    r.observe(0, now + microseconds(300));
    now += milliseconds(7);  // our sends' rhythm, not the agent's
  }
  EXPECT_TRUE(r.reads_at_once());
  EXPECT_FALSE(r.read_period());
  EXPECT_EQ(r.next_read(now), now);
}

TEST(AgentReads, ARefusalTeachesTheQueuesCapacityAndMoreSeenUnreadRaisesIt) {
  AgentReads r(11);
  for (int i = 0; i < 4; ++i) r.sent(1, t0 + milliseconds(500), kNever, kCharge, t0);
  r.observe(4 * kCharge, t0);
  r.refused();  // another sender holds the rest of the queue
  EXPECT_EQ(r.capacity(), 4u);
  EXPECT_EQ(r.room(), 0u);
  r.sent(1, t0 + milliseconds(500), kNever, kCharge, t0);
  EXPECT_EQ(r.capacity(), 4u) << "a send alone proves nothing: the agent may have read meanwhile";
  r.observe(5 * kCharge, t0 + milliseconds(1));
  EXPECT_EQ(r.capacity(), 5u);
  for (int i = 0; i < 2; ++i) r.sent(1, t0 + milliseconds(500), kNever, kCharge, t0 + milliseconds(2));
  r.observe(3 * kCharge, t0 + milliseconds(2));  // the agent read four while the send was refused
  r.refused();
  EXPECT_EQ(r.capacity(), 5u) << "a look that saw a read does not tell how full the queue was when refused";
}

// ---- DeliveryPlan -----------------------------------------------------------------------

PlanOptions options(milliseconds settle = milliseconds(200)) {
  PlanOptions o;
  o.samples_delay = milliseconds(1000);
  o.settle = settle;
  return o;
}

TEST(DeliveryPlan, HoldsAKeyUntilItsThreadMovesOnThenSendsItsWholeCount) {  // MSG-08
  DeliveryPlan plan(options());
  AgentReads reads;
  EXPECT_FALSE(plan.add(key(1, 1), 100, t0));
  EXPECT_FALSE(plan.add(key(1, 1), 100, t0 + milliseconds(1)));
  EXPECT_FALSE(plan.add(key(1, 2), 100, t0 + milliseconds(2)));
  EXPECT_TRUE(plan.choose(t0 + milliseconds(3), reads, 64).empty()) << "its transaction still runs";
  EXPECT_TRUE(plan.add(key(2, 1), 100, t0 + milliseconds(4))) << "thread 100 moved on: transaction 1 settled";
  auto offers = plan.choose(t0 + milliseconds(5), reads, 64);
  ASSERT_EQ(offers.size(), 2u);
  EXPECT_EQ(offers[0].key, key(1, 1));
  EXPECT_EQ(offers[0].count, 2);
  EXPECT_EQ(offers[1].count, 1);
  plan.sent(offers[0]);
  EXPECT_EQ(plan.pending_samples(), 2u);
  plan.add(key(1, 1), 101, t0 + milliseconds(6));  // more of it later (another thread): counted from the last report
  auto again = plan.current(key(1, 1));
  ASSERT_TRUE(again);
  EXPECT_EQ(again->count, 1);
}

TEST(DeliveryPlan, AThreadSampledOutsideAnyTraceSettlesItsTransaction) {  // TLS-09: trace_present 0
  DeliveryPlan plan(options());
  AgentReads reads;
  plan.add(key(1, 1), 100, t0);
  plan.add(key(1, 1), 101, t0);  // two threads in one transaction
  EXPECT_FALSE(plan.left(100, t0 + milliseconds(3))) << "thread 101 is still in it";
  EXPECT_TRUE(plan.choose(t0 + milliseconds(4), reads, 64).empty());
  EXPECT_EQ(plan.current(key(1, 1))->late_after, DeliveryTime::max()) << "not seen left: never late";
  EXPECT_TRUE(plan.left(101, t0 + milliseconds(5)));
  EXPECT_FALSE(plan.left(101, t0 + milliseconds(6))) << "once";
  auto offers = plan.choose(t0 + milliseconds(6), reads, 64);
  ASSERT_EQ(offers.size(), 1u);
  EXPECT_EQ(offers[0].due, t0 + milliseconds(1000)) << "its last sample + the delay";
  EXPECT_EQ(offers[0].late_after, t0 + milliseconds(1005)) << "seen left + the delay";
  plan.add(key(1, 2), 102, t0 + milliseconds(7));  // it runs again, on another thread
  EXPECT_EQ(plan.current(key(1, 1))->late_after, DeliveryTime::max());
}

TEST(DeliveryPlan, ATransactionUnsampledForTheSettleTimeIsComplete) {
  DeliveryPlan plan(options(milliseconds(200)));
  AgentReads reads;
  plan.add(key(1, 1), 100, t0);
  EXPECT_EQ(plan.next_action(t0, reads), t0 + milliseconds(200));
  EXPECT_TRUE(plan.choose(t0 + milliseconds(199), reads, 64).empty());
  EXPECT_EQ(plan.choose(t0 + milliseconds(200), reads, 64).size(), 1u);
  EXPECT_EQ(plan.next_action(t0 + milliseconds(200), reads), t0 + milliseconds(200)) << "settled: act now";
}

TEST(DeliveryPlan, DueIsTheTransactionsLastSampleByItsOwnTimePlusTheDelay) {
  DeliveryPlan plan(options());
  AgentReads reads;
  plan.add(key(1, 1), 100, t0);
  plan.add(key(1, 2), 100, t0 + milliseconds(30));  // the transaction's last sample moves due for both keys
  auto offers = plan.choose(t0 + milliseconds(400), reads, 64);
  ASSERT_EQ(offers.size(), 2u);
  for (const auto& o : offers) EXPECT_EQ(o.due, t0 + milliseconds(1030));
  // A sample read late (an old time) does not move due backwards.
  plan.add(key(1, 3), 100, t0 + milliseconds(10));
  EXPECT_EQ(plan.current(key(1, 3))->due, t0 + milliseconds(1030));
}

TEST(DeliveryPlan, ExpiresOnlyPastDue_AsUnsendableWithoutASocket) {
  DeliveryPlan plan(options());
  plan.add(key(1, 1), 100, t0);
  plan.add(key(1, 1), 100, t0);
  plan.add(key(2, 1), 101, t0 + milliseconds(500));
  plan.expire(t0 + milliseconds(1000));  // exactly due: still in time
  EXPECT_EQ(plan.pending_keys(), 2u);
  plan.expire(t0 + milliseconds(1000) + microseconds(1));
  EXPECT_EQ(plan.pending_keys(), 1u);
  EXPECT_EQ(plan.stats().expired.samples, 2u);
  EXPECT_EQ(plan.stats().expired.messages, 1u);
  plan.expire(t0 + milliseconds(1600), /*sendable=*/false);
  EXPECT_EQ(plan.stats().unsendable.samples, 1u);
  EXPECT_EQ(plan.pending_keys(), 0u);
}

TEST(DeliveryPlan, OffersTheHeaviestFirstAndNothingThatCannotBeReadInTime) {
  DeliveryPlan plan(options(milliseconds(10)));
  AgentReads reads;
  for (int i = 0; i < 1; ++i) plan.add(key(1, 1), 100, t0);
  for (int i = 0; i < 5; ++i) plan.add(key(2, 1), 101, t0);
  for (int i = 0; i < 3; ++i) plan.add(key(3, 1), 102, t0);
  auto offers = plan.choose(t0 + milliseconds(20), reads, 64);
  ASSERT_EQ(offers.size(), 3u);
  EXPECT_EQ(offers[0].count, 5);
  EXPECT_EQ(offers[1].count, 3);
  EXPECT_EQ(offers[2].count, 1);
  EXPECT_EQ(plan.choose(t0 + milliseconds(20), reads, 2).size(), 2u);
  // Nothing read yet: a read is assumed kUnknownReadWait away; closer to due than that, nothing is offered.
  EXPECT_TRUE(plan.choose(t0 + milliseconds(1000) - AgentReads::kUnknownReadWait + microseconds(1), reads, 64).empty());
}

TEST(DeliveryPlan, WhatTheNextReadMustTakeGoesFirstAndTheLightestAreLeftToExpire) {
  // An agent reading every 100 ms, one datagram per read (capacity 1).
  AgentReads reads(1);
  periodic_reads(reads, milliseconds(100), 6, t0 - milliseconds(600));
  reads.observe(0, t0);  // it just read: the next read is at t0 + 100 ms
  ASSERT_EQ(reads.room(), 1u);
  DeliveryPlan plan(options(milliseconds(10)));
  // Three settled keys: a light one due before the read after next, two heavy ones due much later.
  plan.add(key(1, 1), 100, t0 - milliseconds(800));  // due t0 + 200 ms: only the next two reads
  for (int i = 0; i < 4; ++i) plan.add(key(2, 1), 101, t0 - milliseconds(20));
  for (int i = 0; i < 3; ++i) plan.add(key(3, 1), 102, t0 - milliseconds(20));
  auto offers = plan.choose(t0 + milliseconds(1), reads, 64);
  ASSERT_FALSE(offers.empty());
  // The heavy keys have reads enough later; the light one fits only in the next two: it goes first.
  EXPECT_EQ(offers[0].key, key(1, 1));

  // Five keys due before the third read, capacity 1: the three lightest cannot all be read.
  DeliveryPlan scarce(options(milliseconds(10)));
  for (int k = 1; k <= 5; ++k)
    for (int i = 0; i < k; ++i) scarce.add(key(10 + k, 1), 200 + k, t0 - milliseconds(750));
  auto chosen = scarce.choose(t0 + milliseconds(1), reads, 64);
  ASSERT_FALSE(chosen.empty());
  EXPECT_GE(chosen[0].count, 4) << "the next read carries one of the heaviest, never a key the reads cannot take";
}

TEST(DeliveryPlan, SplitsCountsAboveTheU16Field) {  // MSG-08
  DeliveryPlan plan(options(milliseconds(10)));
  AgentReads reads;
  for (int i = 0; i < 70000; ++i) plan.add(key(1, 1), 100, t0);
  auto first = plan.choose(t0 + milliseconds(20), reads, 64);
  ASSERT_EQ(first.size(), 1u);
  EXPECT_EQ(first[0].count, 65535);
  plan.sent(first[0]);
  auto rest = plan.choose(t0 + milliseconds(20), reads, 64);
  ASSERT_EQ(rest.size(), 1u);
  EXPECT_EQ(rest[0].count, 70000 - 65535);
}

TEST(DeliveryPlan, PastMaxKeysTheLightestGoAndTheRunEndOffersEverything) {
  PlanOptions o = options();
  o.max_keys = 16;
  DeliveryPlan plan(o);
  AgentReads reads;
  for (int k = 0; k < 16; ++k) {
    plan.add(key(1, k), 100, t0);
    plan.add(key(1, k), 100, t0);
  }
  plan.add(key(1, 200), 100, t0);  // the 17th key, one sample: the lightest
  EXPECT_EQ(plan.pending_keys(), 16u);
  EXPECT_EQ(plan.stats().queue_full.samples, 1u);
  EXPECT_TRUE(plan.choose(t0 + milliseconds(1), reads, 64).empty()) << "unsettled";
  EXPECT_EQ(plan.choose(t0 + milliseconds(1), reads, 64, /*final=*/true).size(), 16u);
  plan.abandon();
  EXPECT_EQ(plan.stats().unsendable.samples, 32u);
}

// ---- capacity_bound ------------------------------------------------------------------------

// Reads at t0 + k * period, k = 0..last.
std::vector<DeliveryTime> grid(int last, DeliveryDuration period = milliseconds(100)) {
  std::vector<DeliveryTime> reads;
  for (int k = 0; k <= last; ++k) reads.push_back(t0 + period * k);
  return reads;
}

TEST(CapacityBound, EverySampleWhenTheReadsSuffice) {
  std::vector<BoundJob> jobs{{t0, t0 + milliseconds(500), 3}, {t0, t0 + milliseconds(500), 2}};
  EXPECT_EQ(capacity_bound(jobs, grid(5), 1), 5u);
}

TEST(CapacityBound, TheHeaviestWhenReadsAreScarceAndNoReadBeforeTheFirstSample) {
  // Reads at t0, +100, +200 ms, one datagram each.
  std::vector<BoundJob> jobs{{t0, t0 + milliseconds(100), 1},
                             {t0, t0 + milliseconds(100), 4},
                             {t0, t0 + milliseconds(100), 2},
                             {t0 + milliseconds(150), t0 + milliseconds(200), 9},
                             {t0 + milliseconds(150), t0 + milliseconds(200), 8}};
  // Two reads before +100 take 4 and 2; the one at +200 takes 9 (the 8 has no read left).
  EXPECT_EQ(capacity_bound(jobs, grid(2), 1), 15u);
}

TEST(CapacityBound, MovesAPlacedKeyToMakeRoom) {
  // The heavy key could use reads 0 or 1; the lighter only read 0.
  std::vector<BoundJob> jobs{{t0, t0 + milliseconds(100), 5}, {t0, t0 + milliseconds(50), 4}};
  EXPECT_EQ(capacity_bound(jobs, grid(1), 1), 9u);
}

// Brute force: every assignment of jobs to reads (or to none).
std::uint64_t brute_bound(const std::vector<std::pair<int, int>>& windows, const std::vector<std::uint64_t>& w,
                          int reads, int per_read) {
  std::vector<int> load(reads, 0);
  std::function<std::uint64_t(std::size_t)> go = [&](std::size_t i) -> std::uint64_t {
    if (i == windows.size()) return 0;
    std::uint64_t best = go(i + 1);
    for (int r = windows[i].first; r <= windows[i].second; ++r) {
      if (load[r] == per_read) continue;
      ++load[r];
      best = std::max(best, w[i] + go(i + 1));
      --load[r];
    }
    return best;
  };
  return go(0);
}

TEST(CapacityBound, ReadsNotSeenAreAssumedOnePerPeriodWhileNoneOfOursWaited) {
  // Seen at 0 and 500 ms; none of ours unread from 50 to 700 ms: 100..400, 600 and 700 are assumed.
  const std::vector<AgentReads::Stretch> idle{{t0 + milliseconds(50), t0 + milliseconds(700)}};
  const auto reads = reads_of_run({t0, t0 + milliseconds(500)}, idle, t0, t0 + milliseconds(700), milliseconds(100));
  ASSERT_EQ(reads.size(), 8u);  // 0, 100..400, 500, 600, 700
  EXPECT_EQ(reads[1], t0 + milliseconds(100));
  EXPECT_EQ(reads.back(), t0 + milliseconds(700));
  // Ours waited unread from 50 ms on and no read came: an agent that did not read, none assumed.
  EXPECT_EQ(reads_of_run({t0, t0 + milliseconds(500)}, {}, t0, t0 + milliseconds(500), milliseconds(100)).size(), 2u);
  // Seen every 120 ms: none added.
  EXPECT_EQ(reads_of_run({t0, t0 + milliseconds(120), t0 + milliseconds(240)}, idle, t0, t0 + milliseconds(240),
                         milliseconds(100)).size(), 3u);
}

TEST(AgentReads, KnowsWhenNoneOfOursWasUnread) {
  AgentReads r;
  r.sent(1, t0 + milliseconds(500), kNever, kCharge, t0 + milliseconds(10));  // idle from the start until then
  r.observe(0, t0 + milliseconds(30));
  const auto idle = r.idle(t0 + milliseconds(50));
  ASSERT_EQ(idle.size(), 2u);
  EXPECT_EQ(idle[0].second, t0 + milliseconds(10));
  EXPECT_EQ(idle[1], (AgentReads::Stretch{t0 + milliseconds(30), t0 + milliseconds(50)}));
}

TEST(CapacityBound, ManyReadsAreMergedAndStillBoundFromAbove) {
  std::vector<BoundJob> jobs;
  for (int i = 0; i < 1000; ++i) jobs.push_back({t0 + milliseconds(i), t0 + milliseconds(i + 50), 1});
  const auto many = grid(200000, microseconds(10));  // 2 s of reads every 10 us: merged into groups
  EXPECT_EQ(capacity_bound(jobs, many, 1), 1000u);
}

TEST(CapacityBound, EqualsBruteForceOnRandomSmallCases) {
  std::mt19937 rng(29);
  for (int trial = 0; trial < 300; ++trial) {
    const int reads = 1 + static_cast<int>(rng() % 5), per_read = 1 + static_cast<int>(rng() % 2);
    const int n = 1 + static_cast<int>(rng() % 7);
    std::vector<BoundJob> jobs;
    std::vector<std::pair<int, int>> windows;
    std::vector<std::uint64_t> w;
    for (int i = 0; i < n; ++i) {
      int lo = static_cast<int>(rng() % reads), hi = static_cast<int>(rng() % reads);
      if (lo > hi) std::swap(lo, hi);
      windows.emplace_back(lo, hi);
      w.push_back(1 + rng() % 9);
      jobs.push_back({t0 + milliseconds(100) * lo, t0 + milliseconds(100) * hi, w.back()});
    }
    ASSERT_EQ(capacity_bound(jobs, grid(reads - 1), per_read),
              brute_bound(windows, w, reads, per_read))
        << "trial " << trial;
  }
}

// ---- the whole loop against simulated agents -------------------------------------------------

// Four threads on two CPUs sampled at 1 kHz: transactions of 40 ms, each
// sample's stack one of eight (two burners, four hot instructions each),
// on-CPU a quarter of the time. One step is 1 ms. The agent sleeps its period
// after each read and then reads when it gets the CPU (up to `jitter` later);
// its deferral ends each transaction's window at its end + 1 s, and what it
// reads before that is applied. After 10 s of samples the run's end offers
// everything and the agent reads for 1 s more, as `tracecorr agent` does.
struct Simulation {
  struct Queued {
    CorrelationKey key;
    std::uint64_t count;
  };
  DeliveryDuration poll;
  bool reads_until_empty;
  DeliveryDuration jitter{};
  unsigned seed = 4;
  std::size_t queue_capacity = 11;
  bool sends_race_reads = false;  // the sender's look and choice come just before each read, its sends during it
  bool guard_sends = true;        // as the deliverer: what would be read after its due is not sent
  DeliveryPlan plan{options()};
  AgentReads reads{11};
  std::deque<Queued> queue;
  std::map<std::pair<TraceId, SpanId>, DeliveryTime> ends;  // transaction -> its end (the agent knows it)
  std::uint64_t correlated = 0, applied = 0, unknown = 0;
  bool final = false;

  // `agent_reads_meanwhile`: the agent begins its read between the sender's
  // look (and choice) and its sends, as a real one does at any moment.
  void deliver(DeliveryTime now, bool agent_reads_meanwhile = false) {
    reads.observe(queue.size() * kCharge, now);
    plan.expire(now);
    const auto offers = plan.choose(now, reads, 64, final);
    if (agent_reads_meanwhile) agent_reads(now);
    for (const auto& o : offers) {
      auto current = plan.current(o.key);
      if (!current || (guard_sends && !readable_in_time(*current, reads, now))) continue;
      if (queue.size() >= queue_capacity) {
        reads.refused();
        break;
      }
      queue.push_back({current->key, current->count});
      plan.sent(*current);
      reads.sent(current->count, current->due, current->late_after, kCharge, now);
    }
  }
  void read_one(DeliveryTime now) {
    const Queued q = queue.front();
    queue.pop_front();
    auto end = ends.find({q.key.trace_id, q.key.transaction_id});
    const bool open = end == ends.end() || now <= end->second + milliseconds(1000);
    (open ? applied : unknown) += q.count;
  }
  void agent_reads(DeliveryTime now) {
    std::size_t taken = 0;
    while (!queue.empty() && (reads_until_empty || taken < queue_capacity)) {
      read_one(now);
      ++taken;
      if (reads_until_empty) deliver(now);  // the sender refills while the agent reads
    }
  }
  void run(DeliveryDuration length = std::chrono::seconds(10), DeliveryDuration tail = milliseconds(1000)) {
    std::mt19937 rng{seed};
    plan.ends_at(t0 + length + tail);
    std::array<int, 4> txn{};
    std::array<DeliveryTime, 4> started{};
    DeliveryTime next_poll = t0;
    int next_txn = 1;
    const long sampling = length / milliseconds(1), steps = (length + tail) / milliseconds(1);
    for (long i = 0; i < steps; ++i) {
      const DeliveryTime now = t0 + milliseconds(i);
      final = i >= sampling;
      for (int th = 0; th < 4 && !final; ++th) {
        if (txn[th] == 0 || now - started[th] >= milliseconds(40)) {
          if (txn[th]) ends[{key(txn[th], 0).trace_id, key(txn[th], 0).transaction_id}] = now;
          txn[th] = next_txn++;
          ends.erase({key(txn[th], 0).trace_id, key(txn[th], 0).transaction_id});
          started[th] = now;
        }
        if (rng() % 4 != 0) continue;  // off CPU
        const int half = now - started[th] < milliseconds(20) ? 0 : 4;
        plan.add(key(txn[th], half + static_cast<int>(rng() % 4)), 100 + th, now);
        ++correlated;
      }
      const bool reads_now = now >= next_poll;
      if (reads_now) {
        if (sends_race_reads)
          deliver(now, /*agent_reads_meanwhile=*/true);
        else
          agent_reads(now);
        next_poll = now + poll + milliseconds(jitter.count() ? rng() % (jitter / milliseconds(1) + 1) : 0);
      }
      // As the deliverer: at the plan's own moments and after the agent read.
      if (reads_now || now >= plan.next_action(now, reads)) deliver(now);
    }
  }
};

TEST(DeliverySimulation, AnAgentReadingEvery20msUntilEmptyAppliesNearlyEverySample) {
  for (auto jitter : {milliseconds(0), milliseconds(10)}) {
    Simulation sim{milliseconds(20), true, jitter};
    sim.run();
    ASSERT_GT(sim.correlated, 9000u);
    EXPECT_GE(double(sim.applied), 0.99 * double(sim.correlated)) << sim.applied << " of " << sim.correlated;
    EXPECT_EQ(sim.unknown, 0u);
    EXPECT_EQ(sim.reads.outcomes().late.samples, 0u);
  }
}

TEST(DeliverySimulation, AnAgentReadingOnlyItsQueueEvery100msGetsNearlyWhatTheQueueCanCarry) {
  for (auto [jitter, seed] : {std::pair{milliseconds(0), 4u}, std::pair{milliseconds(20), 2u}}) {
    Simulation sim{milliseconds(100), false, jitter, seed};
    sim.run();
    const CapacityBound bound = sim.plan.bound(sim.reads, t0 + std::chrono::seconds(11));
    ASSERT_TRUE(bound.limited) << "11 datagrams per 100 ms cannot carry every key";
    EXPECT_GE(bound.read_period, milliseconds(100));
    const std::uint64_t in_time = sim.reads.outcomes().in_time.samples;
    EXPECT_LE(in_time, sim.applied) << "what the sender counts as read in time the agent applied";
    EXPECT_EQ(sim.unknown, 0u);
    EXPECT_GE(double(in_time), 0.95 * double(bound.samples)) << in_time << " of a bound of " << bound.samples;
    EXPECT_LE(in_time, bound.samples);
  }
}

// The run that showed it (issue 29): the sender's turn looked just before
// the agent's read began, chose for a read it thought was at hand, and sent
// while the agent took the 11 queued ahead: the light keys due within the
// period waited a whole read more, past their transactions' export (154
// unknown_transaction at the agent, 0.881 of the bound).
TEST(DeliverySimulation, WhatIsSentWhileTheAgentReadsItsBatchWaitsForTheNextReadAndIsPlannedSo) {
  for (auto [jitter, seed] : {std::pair{milliseconds(0), 4u}, std::pair{milliseconds(20), 2u}}) {
    Simulation sim{milliseconds(100), false, jitter, seed};
    sim.sends_race_reads = true;
    sim.run();
    const CapacityBound bound = sim.plan.bound(sim.reads, t0 + std::chrono::seconds(11));
    ASSERT_TRUE(bound.limited);
    const std::uint64_t in_time = sim.reads.outcomes().in_time.samples;
    EXPECT_EQ(sim.unknown, 0u) << "jitter " << jitter.count();
    EXPECT_EQ(sim.reads.outcomes().late.samples, 0u);
    EXPECT_GE(double(in_time), 0.95 * double(bound.samples)) << in_time << " of a bound of " << bound.samples;
  }
}

TEST(AgentReads, ADatagramQueuedBehindAFullBatchIsReadAPeriodLater) {
  AgentReads r(11);
  DeliveryTime now = t0;
  for (int read = 0; read < 6; ++read) {  // an agent taking the 11 queued every 100 ms
    while (r.in_flight() < 11) r.sent(1, now + std::chrono::seconds(10), kNever, kCharge, now);
    now += milliseconds(100);
    r.observe(0, now);
  }
  while (r.in_flight() < 11) r.sent(1, now + std::chrono::seconds(10), kNever, kCharge, now);
  ASSERT_FALSE(r.reads_until_empty());
  const DeliveryTime last = now;
  EXPECT_EQ(r.reaches(last + milliseconds(50)), last + milliseconds(200)) << "11 ahead: the next read takes them";
  EXPECT_EQ(r.reaches(last + milliseconds(101)), last + milliseconds(201))
      << "overdue with 11 ahead: the read at hand takes those, ours the one after";
  r.observe(10 * kCharge, last + milliseconds(100));  // the read began: one taken, ten to go in it
  EXPECT_EQ(r.reaches(last + milliseconds(100)), last + milliseconds(200));
  for (int i = 0; i < 5; ++i) r.sent(1, now + std::chrono::seconds(10), kNever, kCharge, last + milliseconds(100));
  EXPECT_EQ(r.reaches(last + milliseconds(100)), last + milliseconds(200)) << "behind the batch: the next read";
  Offer due_before{key(1, 1), 1, last + milliseconds(150)}, due_after{key(1, 2), 1, last + milliseconds(200)};
  EXPECT_FALSE(readable_in_time(due_before, r, last + milliseconds(100)));
  EXPECT_TRUE(readable_in_time(due_after, r, last + milliseconds(100)));
}

}  // namespace
}  // namespace tracecorr::elastic_v1::agent

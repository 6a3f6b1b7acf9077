// The host agent's pure logic: record verdicts (TLS-08, TLS-09), stack trace
// ids and aggregation into correlation messages (MSG-08).
#include <gtest/gtest.h>

#include <set>

#include "elastic_v1/agent/correlation.hpp"

namespace tracecorr::elastic_v1::agent {
namespace {

elastic_v1::TlsRecord traced_record() {
  elastic_v1::TlsRecord r;
  r.valid = 1;
  r.trace_present = 1;
  r.trace_flags = 1;
  for (std::size_t i = 0; i < r.trace_id.size(); ++i) r.trace_id[i] = static_cast<std::uint8_t>(0x10 + i);
  for (std::size_t i = 0; i < r.span_id.size(); ++i) r.span_id[i] = static_cast<std::uint8_t>(0x30 + i);
  for (std::size_t i = 0; i < r.transaction_id.size(); ++i) r.transaction_id[i] = static_cast<std::uint8_t>(0x50 + i);
  return r;
}

TEST(AgentRecord, ValidTracedRecordIsCorrelatedWithItsIds) {
  auto r = traced_record();
  auto j = judge_record(elastic_v1::encode_tls_record(r));
  EXPECT_EQ(j.verdict, RecordVerdict::Correlate);
  EXPECT_EQ(j.record, r);
}

TEST(AgentRecord, ValidZeroIsIgnoredWhateverElseItSays) {  // TLS-08
  auto r = traced_record();
  r.valid = 0;
  EXPECT_EQ(judge_record(elastic_v1::encode_tls_record(r)).verdict, RecordVerdict::ValidZero);
  r.minor = 0;  // even a bad minor: nothing is read while valid is 0
  EXPECT_EQ(judge_record(elastic_v1::encode_tls_record(r)).verdict, RecordVerdict::ValidZero);
}

TEST(AgentRecord, TraceAbsentIgnoresTheIds) {  // TLS-09
  auto r = traced_record();
  r.trace_present = 0;
  EXPECT_EQ(judge_record(elastic_v1::encode_tls_record(r)).verdict, RecordVerdict::TraceAbsent);
}

TEST(AgentRecord, MinorZeroAndZeroIdsAreNotCorrelated) {
  auto r = traced_record();
  r.minor = 0;
  EXPECT_EQ(judge_record(elastic_v1::encode_tls_record(r)).verdict, RecordVerdict::BadMinor);
  r = traced_record();
  r.trace_id = {};
  EXPECT_EQ(judge_record(elastic_v1::encode_tls_record(r)).verdict, RecordVerdict::ZeroIds);
  r = traced_record();
  r.transaction_id = {};
  EXPECT_EQ(judge_record(elastic_v1::encode_tls_record(r)).verdict, RecordVerdict::ZeroIds);
  r = traced_record();
  r.minor = 7;  // a later minor only appends fields
  EXPECT_EQ(judge_record(elastic_v1::encode_tls_record(r)).verdict, RecordVerdict::Correlate);
}

TEST(AgentStackId, SameFramesSameIdDifferentFramesDifferentId) {
  std::vector<std::uint64_t> a{0x401000, 0x402000, 0x403000};
  std::vector<std::uint64_t> b{0x401000, 0x402000, 0x403008};
  std::vector<std::uint64_t> c{0x402000, 0x401000, 0x403000};  // order matters
  EXPECT_EQ(stack_trace_id(a), stack_trace_id(std::vector<std::uint64_t>(a)));
  EXPECT_NE(stack_trace_id(a), stack_trace_id(b));
  EXPECT_NE(stack_trace_id(a), stack_trace_id(c));
  EXPECT_NE(stack_trace_id(a), stack_trace_id(std::span<const std::uint64_t>(a.data(), 2)));
  EXPECT_FALSE(is_zero(stack_trace_id(a)));
  // 1000 distinct stacks, 1000 distinct ids (a 128-bit hash: no collisions expected).
  std::set<StackTraceId> ids;
  for (std::uint64_t i = 0; i < 1000; ++i) ids.insert(stack_trace_id(std::vector<std::uint64_t>{0x400000 + i, i}));
  EXPECT_EQ(ids.size(), 1000u);
}

TEST(AgentStackId, IsXxh3Of128BitsOfTheLittleEndianFrames) {
  // Known answer: XXH3_128bits of zero bytes (the empty stack) is
  // 99aa06d3014798d86001c324468d497f in xxHash's canonical form.
  auto id = stack_trace_id({});
  EXPECT_EQ(to_hex(id), "99aa06d3014798d86001c324468d497f");
  // 22 base64url characters, as the attribute carries it (ATTR-03).
  EXPECT_EQ(base64url_nopad(id).size(), 22u);
}

TEST(AgentAggregator, CountsSamplesPerKeyAndDrainsToMessages) {  // MSG-08
  Aggregator agg;
  CorrelationKey k1{traced_record().trace_id, traced_record().transaction_id, stack_trace_id({})};
  CorrelationKey k2 = k1;
  k2.stack_trace_id[0] ^= 1;
  agg.add(k1);
  agg.add(k1);
  agg.add(k2, 3);
  EXPECT_EQ(agg.keys(), 2u);
  EXPECT_EQ(agg.pending_samples(), 5u);
  auto msgs = agg.drain();
  ASSERT_EQ(msgs.size(), 2u);
  std::uint64_t total = 0;
  for (const auto& m : msgs) {
    EXPECT_EQ(m.trace_id, k1.trace_id);
    EXPECT_EQ(m.transaction_id, k1.transaction_id);
    EXPECT_EQ(m.count, m.stack_trace_id == k1.stack_trace_id ? 2 : 3);
    total += m.count;
  }
  EXPECT_EQ(total, 5u);
  EXPECT_TRUE(agg.empty());
  EXPECT_TRUE(agg.drain().empty());  // counts are "since the last report"
  agg.add(k1);
  ASSERT_EQ(agg.drain().size(), 1u);
}

TEST(AgentAggregator, SplitsCountsAboveTheU16Field) {
  CorrelationKey k{};
  k.trace_id[0] = 1;
  k.transaction_id[0] = 2;
  auto msgs = correlation_messages(k, 65535u * 2 + 7);
  ASSERT_EQ(msgs.size(), 3u);
  EXPECT_EQ(msgs[0].count, 65535);
  EXPECT_EQ(msgs[1].count, 65535);
  EXPECT_EQ(msgs[2].count, 7);
  EXPECT_TRUE(correlation_messages(k, 0).empty());
  ASSERT_EQ(correlation_messages(k, 65535).size(), 1u);
  Aggregator agg;
  agg.add(k, 70000);
  auto drained = agg.drain();
  ASSERT_EQ(drained.size(), 2u);
  EXPECT_EQ(drained[0].count + drained[1].count, 70000);
}

TEST(AgentPersonality, ParsesBothNames) {
  Personality p;
  ASSERT_TRUE(parse_personality("ebpf-profiler", p));
  EXPECT_EQ(p, Personality::EbpfProfiler);
  ASSERT_TRUE(parse_personality("spec", p));
  EXPECT_EQ(p, Personality::Spec);
  EXPECT_FALSE(parse_personality("Spec", p));
  EXPECT_STREQ(to_string(Personality::EbpfProfiler), "ebpf-profiler");
}

// ---- delivery queue ----------------------------------------------------------------

CorrelationKey key_n(std::uint8_t n) {
  CorrelationKey k;
  k.trace_id[0] = 1;
  k.transaction_id[0] = 1;
  k.stack_trace_id[0] = n;
  return k;
}

using DqClock = DeliveryQueue::Clock;
using std::chrono::milliseconds;

TEST(AgentDeliveryQueue, MergesAKeysSamplesAndSendsTheFullestMessageFirst) {
  DeliveryQueue q(16);
  auto t0 = DqClock::time_point{} + std::chrono::seconds(100);
  q.add(key_n(1), 2, t0, t0 + milliseconds(300));
  q.add(key_n(2), 5, t0, t0 + milliseconds(300));
  q.add(key_n(1), 4, t0, t0 + milliseconds(400));  // merges: 6 samples, due the later time
  ASSERT_EQ(q.size(), 2u);
  EXPECT_EQ(q.queued_samples(), 11u);
  auto first = q.front();
  ASSERT_TRUE(first);
  EXPECT_EQ(first->key, key_n(1));
  EXPECT_EQ(first->count, 6);
  EXPECT_EQ(first->due, t0 + milliseconds(400));
  q.sent(t0 + milliseconds(10), milliseconds(100));
  EXPECT_EQ(q.front()->key, key_n(2));
  q.sent(t0 + milliseconds(150), milliseconds(100));  // waited longer than a flush interval: late
  EXPECT_TRUE(q.empty());
  EXPECT_EQ(q.stats().delivered.samples, 11u);
  EXPECT_EQ(q.stats().delivered.messages, 2u);
  EXPECT_EQ(q.stats().late.samples, 5u);
}

TEST(AgentDeliveryQueue, DropsOnlyWhatIsPastDue) {
  DeliveryQueue q(16);
  auto t0 = DqClock::time_point{} + std::chrono::seconds(100);
  q.add(key_n(1), 3, t0, t0 + milliseconds(100));
  q.add(key_n(2), 1, t0, t0 + milliseconds(500));
  q.expire(t0 + milliseconds(100));  // exactly due: still in time
  EXPECT_EQ(q.size(), 2u);
  q.expire(t0 + milliseconds(101));
  ASSERT_EQ(q.size(), 1u);
  EXPECT_EQ(q.front()->key, key_n(2));
  EXPECT_EQ(q.stats().expired.samples, 3u);
  EXPECT_EQ(q.stats().expired.messages, 1u);
  q.add(key_n(1), 2, t0, t0 + milliseconds(900));  // the expired key queues afresh
  EXPECT_EQ(q.front()->count, 2);
}

TEST(AgentDeliveryQueue, WhenFullTheMessageWithTheFewestSamplesGoes) {
  DeliveryQueue q(2);
  auto t0 = DqClock::time_point{} + std::chrono::seconds(100);
  auto due = t0 + milliseconds(300);
  q.add(key_n(1), 5, t0, due);
  q.add(key_n(2), 1, t0, due);
  q.add(key_n(3), 3, t0, due);  // evicts key 2 (1 sample)
  EXPECT_EQ(q.size(), 2u);
  EXPECT_EQ(q.stats().queue_full.samples, 1u);
  q.add(key_n(4), 2, t0, due);  // fewer than any queued: itself dropped
  EXPECT_EQ(q.stats().queue_full.samples, 3u);
  EXPECT_EQ(q.queued_samples(), 8u);
  q.abandon();
  EXPECT_EQ(q.stats().unsendable.samples, 8u);
  EXPECT_TRUE(q.empty());
}

TEST(AgentDeliveryQueue, SplitsAboveTheU16CountAndKeepsEverySample) {
  DeliveryQueue q(16);
  auto t0 = DqClock::time_point{} + std::chrono::seconds(100);
  q.add(key_n(1), 70000, t0, t0 + milliseconds(300));
  q.add(key_n(1), 10, t0, t0 + milliseconds(300));
  EXPECT_EQ(q.queued_samples(), 70010u);
  EXPECT_EQ(q.size(), 2u);
  EXPECT_EQ(q.front()->count, 65535);
}

}  // namespace
}  // namespace tracecorr::elastic_v1::agent

// The host agent's pure logic: record verdicts (TLS-08, TLS-09), stack trace
// ids and correlation messages (MSG-08).
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

// The record as the host agent exports it (OTLP profiles): a link to the active span only when it is one to correlate.
TEST(AgentRecordContext, ACorrelatedRecordIsALinkToTheActiveSpanWithItsFlags) {
  auto r = traced_record();
  const auto context = record_context(elastic_v1::encode_tls_record(r));
  ASSERT_TRUE(context.link);
  EXPECT_EQ(context.link->trace_id, r.trace_id);
  EXPECT_EQ(context.link->span_id, r.span_id) << "the active span, not the transaction";
  EXPECT_EQ(context.trace_flags, std::optional<std::uint8_t>(1));
  EXPECT_FALSE(context.attributes);
}

TEST(AgentRecordContext, NoLinkForARecordNotToCorrelateOrNamingNoSpan) {
  auto valid_zero = traced_record();
  valid_zero.valid = 0;  // TLS-08
  auto absent = traced_record();
  absent.trace_present = 0;  // TLS-09
  auto minor_zero = traced_record();
  minor_zero.minor = 0;
  auto no_span = traced_record();
  no_span.span_id = {};
  for (const auto& r : {valid_zero, absent, minor_zero, no_span}) {
    const auto context = record_context(elastic_v1::encode_tls_record(r));
    EXPECT_FALSE(context.link);
    EXPECT_FALSE(context.trace_flags);
  }
}

// Reader defects (`tracecorr agent --reader-defect`): each policy field breaks its one rule.
TEST(AgentRecordPolicy, IgnoresValidCorrelatesARecordWhoseValidIsZero) {  // TLS-08
  auto r = traced_record();
  r.valid = 0;
  const auto bytes = elastic_v1::encode_tls_record(r);
  EXPECT_EQ(judge_record(bytes).verdict, RecordVerdict::ValidZero);
  const RecordPolicy defect{.ignore_valid = true};
  EXPECT_EQ(judge_record(bytes, defect).verdict, RecordVerdict::Correlate);
  const auto context = record_context(bytes, defect);
  ASSERT_TRUE(context.link);
  EXPECT_EQ(context.link->span_id, r.span_id);
  r.trace_present = 0;  // only TLS-08 is broken: TLS-09 still holds
  EXPECT_EQ(judge_record(elastic_v1::encode_tls_record(r), defect).verdict, RecordVerdict::TraceAbsent);
}

TEST(AgentRecordPolicy, IgnoresTracePresentGivesTheIdsOfARecordOutsideATrace) {  // TLS-09
  auto r = traced_record();
  r.trace_present = 0;
  const auto bytes = elastic_v1::encode_tls_record(r);
  EXPECT_EQ(judge_record(bytes).verdict, RecordVerdict::TraceAbsent);
  const RecordPolicy defect{.ignore_trace_present = true};
  EXPECT_EQ(judge_record(bytes, defect).verdict, RecordVerdict::Correlate);
  EXPECT_TRUE(record_context(bytes, defect).link);
  r.valid = 0;  // only TLS-09 is broken: TLS-08 still holds
  EXPECT_EQ(judge_record(elastic_v1::encode_tls_record(r), defect).verdict, RecordVerdict::ValidZero);
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

TEST(AgentCorrelation, SplitsCountsAboveTheU16Field) {  // MSG-08
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

// Delivery (the plan, the agent's reads, the bound): delivery_plan_test.cpp.

}  // namespace
}  // namespace tracecorr::elastic_v1::agent

// decode_profiles on exports built with the generated classes: every shape of
// Sample, pid and tid where exporters put them, and every hostile dictionary
// the decoder must refuse (naming where) without crashing or allocating
// beyond its limits.
#include <gtest/gtest.h>

#include "profiles_test_support.hpp"
#include "tracecorr/profiles/decode.hpp"

namespace tracecorr::profiles {
namespace {

using namespace test_support;
using otlp::RejectReason;

DecodedProfiles decode_ok(const ExportBuilder& b, const ProfilesLimits& limits = {}) {
  DecodedProfiles decoded = decode_profiles(b.bytes(), limits);
  EXPECT_TRUE(decoded.ok()) << decoded.first_fatal->message();
  return decoded;
}

void expect_refused(const ExportBuilder& b, RejectReason reason, std::string_view where_has,
                    std::string_view what_has = "", const ProfilesLimits& limits = {}) {
  SCOPED_TRACE(std::string(where_has) + " / " + std::string(what_has));
  DecodedProfiles decoded = decode_profiles(b.bytes(), limits);
  ASSERT_FALSE(decoded.ok());
  EXPECT_EQ(decoded.first_fatal->reason, reason) << decoded.first_fatal->message();
  EXPECT_NE(decoded.first_fatal->where.find(where_has), std::string::npos) << decoded.first_fatal->message();
  EXPECT_NE(decoded.first_fatal->what.find(what_has), std::string::npos) << decoded.first_fatal->message();
  EXPECT_TRUE(decoded.samples.empty());
}

bool has_note(const DecodedProfiles& decoded, std::string_view text) {
  for (const auto& p : decoded.problems)
    if (!p.fatal && p.message().find(text) != std::string::npos) return true;
  return false;
}

TEST(ProfilesDecode, AggregatedTimestampsUnfoldIntoOneObservationEach) {
  ExportBuilder b;
  const auto link = b.link(kTraceIdHex, kSpanIdHex);
  auto& s = b.sample(4242, 4243, link, {kT0 + 3, kT0 + 1, kT0 + 2});
  s.set_stack_index(b.stack({0x401000, 0x402000}));
  DecodedProfiles decoded = decode_ok(b);
  ASSERT_EQ(decoded.samples.size(), 3u);
  EXPECT_EQ(decoded.profiles, 1u);
  std::vector<std::uint64_t> times;
  for (const auto& sample : decoded.samples) {
    times.push_back(sample.time->nanos);
    EXPECT_EQ(sample.time->clock, Clock::Unix);
    EXPECT_EQ(sample.value, 1);
    EXPECT_EQ(sample.pid, 4242);
    EXPECT_EQ(sample.tid, 4243);
    ASSERT_TRUE(sample.link);
    EXPECT_EQ(to_hex(sample.link->trace_id), kTraceIdHex);
    EXPECT_EQ(to_hex(sample.link->span_id), kSpanIdHex);
    ASSERT_TRUE(sample.has_stack());
    EXPECT_EQ(*sample.stack, (Stack{0x401000, 0x402000}));
    EXPECT_EQ(sample.resource_attribute("container.id")->to_display(), "\"c0ffee\"");
    EXPECT_EQ(sample.profile->sample_type, "samples");
    EXPECT_EQ(sample.profile->scope_name, "otel-ebpf-profiler-test");
  }
  EXPECT_EQ(times, (std::vector<std::uint64_t>{kT0 + 3, kT0 + 1, kT0 + 2}));
  // What the observations of one Sample share is shared, not copied.
  EXPECT_EQ(decoded.samples[0].attributes.get(), decoded.samples[2].attributes.get());
  EXPECT_EQ(decoded.samples[0].stack.get(), decoded.samples[2].stack.get());
}

TEST(ProfilesDecode, EveryShapeOfSample) {
  ExportBuilder b;
  auto& per_timestamp = b.sample(1, 10, 0, {kT0 + 1, kT0 + 2});
  per_timestamp.add_values(5);
  per_timestamp.add_values(7);
  auto& total = b.sample(1, 11, 0, {});
  total.add_values(10);
  DecodedProfiles decoded = decode_ok(b);
  ASSERT_EQ(decoded.samples.size(), 3u);
  EXPECT_EQ(decoded.samples[0].value, 5);
  EXPECT_EQ(decoded.samples[1].value, 7);
  EXPECT_EQ(decoded.samples[1].time->nanos, kT0 + 2);
  EXPECT_FALSE(decoded.samples[2].time);  // an aggregated value has no timestamp
  EXPECT_EQ(decoded.samples[2].value, 10);
  EXPECT_EQ(decoded.samples[2].tid, 11);
  EXPECT_FALSE(decoded.samples[0].link);
  EXPECT_FALSE(decoded.samples[0].has_stack());
}

TEST(ProfilesDecode, AnOlderExportersSingleValueBesideManyTimestampsIsOneObservationPerTimestamp) {
  ExportBuilder b;
  b.sample(1, 2, 0, {kT0, kT0 + 1, kT0 + 2}).add_values(1);
  DecodedProfiles decoded = decode_ok(b);
  ASSERT_EQ(decoded.samples.size(), 3u);
  EXPECT_EQ(decoded.samples[2].value, 1);
  EXPECT_TRUE(has_note(decoded, "older exporter"));
}

TEST(ProfilesDecode, ValuesAndTimestampsOfDifferentCountsAreRefused) {
  ExportBuilder b;
  auto& s = b.sample(1, 2, 0, {kT0, kT0 + 1, kT0 + 2});
  s.add_values(1);
  s.add_values(2);
  expect_refused(b, RejectReason::MalformedBody, "resourceProfiles[0].scopeProfiles[0].profiles[0].samples[0]",
                 "2 values for 3 timestamps");
}

TEST(ProfilesDecode, ASampleWithNeitherValuesNorTimestampsIsNoObservation) {
  ExportBuilder b;
  b.sample(1, 2, 0, {});
  DecodedProfiles decoded = decode_ok(b);
  EXPECT_TRUE(decoded.samples.empty());
  EXPECT_TRUE(has_note(decoded, "neither values nor timestamps"));
}

TEST(ProfilesDecode, PidFromTheResourceWhenTheSampleDoesNotSayIt) {
  ExportBuilder b;
  auto* kv = b.request.mutable_resource_profiles(0)->mutable_resource()->add_attributes();
  kv->set_key("process.pid");
  kv->mutable_value()->set_int_value(777);
  auto* s = b.profile().add_samples();
  s->add_attribute_indices(b.string_attribute("thread.id", "778"));  // a string: read, and noted
  s->add_timestamps_unix_nano(kT0);
  DecodedProfiles decoded = decode_ok(b);
  ASSERT_EQ(decoded.samples.size(), 1u);
  EXPECT_EQ(decoded.samples[0].pid, 777);
  EXPECT_EQ(decoded.samples[0].tid, 778);
  EXPECT_TRUE(has_note(decoded, "a string, not an int"));
}

TEST(ProfilesDecode, DuplicateAttributeKeysKeepTheFirst) {
  ExportBuilder b;
  auto& s = b.sample(1, 2, 0, {kT0});
  s.add_attribute_indices(b.int_attribute("thread.id", 99));
  DecodedProfiles decoded = decode_ok(b);
  EXPECT_EQ(decoded.samples[0].tid, 2);
  EXPECT_TRUE(has_note(decoded, "duplicate attribute key \"thread.id\""));
}

TEST(ProfilesDecode, EveryIndexOutsideItsTableIsRefusedNamingWhere) {
  {
    ExportBuilder b;
    b.sample(1, 2, 0, {kT0}).set_stack_index(99);
    expect_refused(b, RejectReason::MalformedBody, "samples[0].stackIndex", "99 is outside the stack table");
  }
  {
    ExportBuilder b;
    b.sample(1, 2, 0, {kT0}).set_link_index(-3);
    expect_refused(b, RejectReason::MalformedBody, "samples[0].linkIndex", "-3 is outside the link table");
  }
  {
    ExportBuilder b;
    b.sample(1, 2, 0, {kT0}).add_attribute_indices(1'000'000);
    expect_refused(b, RejectReason::MalformedBody, "samples[0].attributeIndices[2]", "outside the attribute table");
  }
  {
    ExportBuilder b;
    b.sample(1, 2, 0, {kT0}).add_attribute_indices(0);
    expect_refused(b, RejectReason::MalformedBody, "attributeIndices[2]", "zero value");
  }
  {
    ExportBuilder b;
    auto stack = b.stack({1, 2});
    b.request.mutable_dictionary()->mutable_stack_table(stack)->add_location_indices(12345);
    b.sample(1, 2, 0, {kT0}).set_stack_index(stack);
    expect_refused(b, RejectReason::MalformedBody, "dictionary.stackTable[1].locationIndices[2]",
                   "outside the location table");
  }
  {
    ExportBuilder b;
    b.request.mutable_dictionary()->add_attribute_table()->set_key_strindex(500);
    const int bad = b.request.dictionary().attribute_table_size() - 1;
    b.sample(1, 2, 0, {kT0}).add_attribute_indices(bad);
    expect_refused(b, RejectReason::MalformedBody, "keyStrindex", "outside the string table");
  }
  {
    ExportBuilder b;
    b.profile().mutable_sample_type()->set_unit_strindex(77);
    expect_refused(b, RejectReason::MalformedBody, "profiles[0].sampleType.unitStrindex", "77");
  }
}

TEST(ProfilesDecode, LinkIdsOfTheWrongLengthAreRefusedAnEmptyLinkIsNoLink) {
  {
    ExportBuilder b;
    auto* l = b.request.mutable_dictionary()->add_link_table();
    l->set_trace_id("short");
    l->set_span_id(raw_id(kSpanIdHex));
    b.sample(1, 2, 1, {kT0});
    expect_refused(b, RejectReason::MalformedBody, "dictionary.linkTable[1]", "trace id of 5 bytes");
  }
  {
    ExportBuilder b;
    b.request.mutable_dictionary()->add_link_table();
    b.sample(1, 2, 1, {kT0});
    DecodedProfiles decoded = decode_ok(b);
    ASSERT_EQ(decoded.samples.size(), 1u);
    EXPECT_FALSE(decoded.samples[0].link);
    EXPECT_TRUE(has_note(decoded, "read as no link"));
  }
  {  // all-zero ids are kept as sent: a reader that reports a zero context is evidence
    ExportBuilder b;
    auto zero = b.link("00000000000000000000000000000000", "0000000000000000");
    b.sample(1, 2, zero, {kT0});
    DecodedProfiles decoded = decode_ok(b);
    ASSERT_TRUE(decoded.samples[0].link);
    EXPECT_TRUE(is_zero(decoded.samples[0].link->trace_id));
  }
}

TEST(ProfilesDecode, DeepStacksAreCutAtTheBound) {
  ExportBuilder b;
  std::vector<std::uint64_t> frames(50);
  for (std::size_t i = 0; i < frames.size(); ++i) frames[i] = 0x1000 + i;
  b.sample(1, 2, 0, {kT0}).set_stack_index(b.stack(frames));
  ProfilesLimits limits;
  limits.max_stack_frames = 8;
  DecodedProfiles decoded = decode_ok(b, limits);
  ASSERT_EQ(decoded.samples[0].stack->size(), 8u);
  EXPECT_EQ(decoded.samples[0].stack->front(), 0x1000u);
  EXPECT_TRUE(has_note(decoded, "50 frames; the first 8 are kept"));
}

TEST(ProfilesDecode, PackedElementsAreCountedBeforeDecoding) {
  // 100 000 one-byte varints: 100 KB on the wire, 800 KB of int64 once parsed.
  ExportBuilder b;
  auto& s = b.sample(1, 2, 0, {});
  for (int i = 0; i < 100'000; ++i) s.add_values(1);
  ProfilesLimits limits;
  limits.max_fields_per_export = 50'000;
  expect_refused(b, RejectReason::LimitExceeded, "", "more than 50000 protobuf fields", limits);
  limits.max_fields_per_export = 200'000;
  EXPECT_TRUE(decode_profiles(b.bytes(), limits).ok());
}

TEST(ProfilesDecode, ManyEmptySamplesAreCountedBeforeDecoding) {
  // An empty Sample is 2 bytes on the wire and some hundred in memory.
  ExportBuilder b;
  std::string body = b.bytes();
  std::string flood;
  for (int i = 0; i < 30'000; ++i) flood += std::string("\x12\x00", 2);  // Profile.samples, empty
  // Re-wrap: the profile's bytes with the flood appended, inside scope and resource.
  auto& profile = b.profile();
  std::string profile_bytes = profile.SerializeAsString() + flood;
  ASSERT_TRUE(profile.ParseFromString(profile_bytes));
  ProfilesLimits limits;
  limits.max_fields_per_export = 10'000;
  expect_refused(b, RejectReason::LimitExceeded, "", "protobuf fields", limits);
}

TEST(ProfilesDecode, ObservationsPerExportAreBounded) {
  ExportBuilder b;
  std::vector<std::uint64_t> many(1000, kT0);
  b.sample(1, 2, 0, many);
  b.sample(1, 3, 0, many);
  ProfilesLimits limits;
  limits.max_samples_per_export = 1500;
  expect_refused(b, RejectReason::LimitExceeded, "resourceProfiles", "2000 samples (timestamps unfolded)", limits);
}

TEST(ProfilesDecode, TextIsCheckedWhereItIsRead) {
  {
    ExportBuilder b;
    b.sample(1, 2, 0, {kT0}).add_attribute_indices(b.string_attribute("thread.name", "bad \xff utf-8"));
    expect_refused(b, RejectReason::MalformedBody, "dictionary.attributeTable", "invalid UTF-8 at byte 4");
  }
  {
    ExportBuilder b;
    b.sample(1, 2, 0, {kT0}).add_attribute_indices(b.string_attribute("big", std::string(5000, 'x')));
    ProfilesLimits limits;
    limits.transport.max_value_bytes = 4096;
    expect_refused(b, RejectReason::LimitExceeded, "dictionary.attributeTable", "5000 bytes", limits);
  }
  {  // a bad string nobody references is not read
    ExportBuilder b;
    b.string("unused \xfe");
    b.sample(1, 2, 0, {kT0});
    decode_ok(b);
  }
}

TEST(ProfilesDecode, DeeplyNestedValuesAreRefused) {
  ExportBuilder b;
  auto* a = b.request.mutable_dictionary()->add_attribute_table();
  a->set_key_strindex(b.string("deep"));
  opentelemetry::proto::common::v1::AnyValue* v = a->mutable_value();
  for (int i = 0; i < 40; ++i) v = v->mutable_array_value()->add_values();
  v->set_int_value(1);
  const int deep = b.request.dictionary().attribute_table_size() - 1;
  b.sample(1, 2, 0, {kT0}).add_attribute_indices(deep);
  ProfilesLimits limits;
  limits.transport.max_nesting_depth = 8;
  DecodedProfiles decoded = decode_profiles(b.bytes(), limits);
  ASSERT_FALSE(decoded.ok());  // protobuf's recursion limit or the decoder's depth check
  EXPECT_TRUE(decoded.samples.empty());
}

TEST(ProfilesDecode, BytesThatAreNotAnExportAreMalformed) {
  for (std::string body : {std::string("\xff\xff\xff\xff", 4), std::string("\x0a\x80\x80\x80\x08", 5),
                           std::string("\x0f", 1)}) {
    DecodedProfiles decoded = decode_profiles(body);
    ASSERT_FALSE(decoded.ok());
    EXPECT_EQ(decoded.first_fatal->reason, RejectReason::MalformedBody);
  }
  EXPECT_TRUE(decode_profiles("").ok());  // an empty export is valid and has nothing
}

TEST(ProfilesDecode, AFirstStringThatIsNotEmptyIsNoted) {
  ExportBuilder b;
  b.request.mutable_dictionary()->set_string_table(0, "not empty");
  b.sample(1, 2, 0, {kT0});
  DecodedProfiles decoded = decode_ok(b);
  EXPECT_TRUE(has_note(decoded, "MUST be the empty string"));
}

}  // namespace
}  // namespace tracecorr::profiles

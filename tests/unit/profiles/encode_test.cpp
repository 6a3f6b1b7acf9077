// encode_profiles: what it writes is what decode_profiles reads back, and the
// message has the shape OTLP recommends (a deduplicated dictionary, one
// Sample per identity with its timestamps).
#include <gtest/gtest.h>

#include "profiles_test_support.hpp"
#include "tracecorr/profiles/decode.hpp"
#include "tracecorr/profiles/encode.hpp"

namespace tracecorr::profiles {
namespace {

using namespace test_support;

// Samples as a host agent would give them: attributes carry thread.id and
// process.pid (the encoder writes them there, the decoder reads them there).
std::vector<ProfileSample> agent_samples() {
  auto resource = std::make_shared<const otlp::Attributes>(
      otlp::Attributes{{"service.name", "checkout"}, {"process.pid", std::int64_t{4242}},
                       {"deployment.environment.name", otlp::AttributeValue::Array{"a", "b"}}});
  auto other_resource = std::make_shared<const otlp::Attributes>(otlp::Attributes{{"service.name", "cart"}});
  auto profile = std::make_shared<const ProfileInfo>(
      ProfileInfo{"samples", "count", "cpu", "nanoseconds", 50'000'000, kT0, 1'000'000'000, "tracecorr", "0.1.0"});
  auto stack = std::make_shared<const Stack>(Stack{0x401000, 0x402000, 0x401000});
  std::vector<ProfileSample> samples;
  auto add = [&](std::int64_t pid, std::int64_t tid, std::uint64_t t, std::optional<SampleLink> link,
                 std::shared_ptr<const otlp::Attributes> res) -> ProfileSample& {
    ProfileSample& s = samples.emplace_back();
    s.pid = pid;
    s.tid = tid;
    s.time = SampleTime{t, Clock::Unix};
    s.link = link;
    s.attributes = std::make_shared<const otlp::Attributes>(otlp::Attributes{
        {"thread.id", tid}, {"thread.name", "worker-" + std::to_string(tid)}});
    s.resource = std::move(res);
    s.profile = profile;
    return s;
  };
  const auto span_a = link_of(kTraceIdHex, kSpanIdHex);
  const auto span_b = link_of(kTraceIdHex, "1111111111111111");
  for (int i = 0; i < 5; ++i) add(4242, 4243, kT0 + 10 * i, span_a, resource);  // one identity: aggregated
  add(4242, 4243, kT0 + 7, span_b, resource).stack = stack;
  add(4242, 4244, kT0 + 8, std::nullopt, resource).value = 3;  // a value other than 1
  add(4242, 4244, kT0 + 9, std::nullopt, resource).value = 1;
  ProfileSample& untimed = add(4242, 4245, 0, span_a, resource);
  untimed.time.reset();
  untimed.value = 12;
  ProfileSample& elsewhere = add(5151, 5152, kT0 + 11, span_a, other_resource);  // pid only in the sample
  auto attributes = *elsewhere.attributes;
  attributes.emplace("process.pid", std::int64_t{5151});
  elsewhere.attributes = std::make_shared<const otlp::Attributes>(std::move(attributes));
  return samples;
}

TEST(ProfilesEncode, RoundTripGivesBackEveryObservation) {
  const auto input = agent_samples();
  DecodedProfiles decoded = decode_profiles(encode_profiles(input));
  ASSERT_TRUE(decoded.ok()) << decoded.first_fatal->message();
  ASSERT_EQ(decoded.samples.size(), input.size());
  auto a = sorted(input), b = sorted(decoded.samples);
  for (std::size_t i = 0; i < a.size(); ++i)
    EXPECT_TRUE(same_observation(a[i], b[i])) << "observation " << i << " (tid " << a[i].tid.value_or(-1) << ")";
  EXPECT_TRUE(decoded.problems.empty()) << decoded.problems.front().message();
}

TEST(ProfilesEncode, SamplesOfOneIdentityShareOneSampleAndTheDictionaryIsDeduplicated) {
  const auto input = agent_samples();
  pb_collector::ExportProfilesServiceRequest request;
  ASSERT_TRUE(request.ParseFromString(encode_profiles(input)));
  ASSERT_EQ(request.resource_profiles_size(), 2);
  const auto& profile = request.resource_profiles(0).scope_profiles(0).profiles(0);
  const auto& first = profile.samples(0);
  EXPECT_EQ(first.timestamps_unix_nano_size(), 5);
  EXPECT_EQ(first.values_size(), 0);  // timestamps only: every value was 1
  bool values_beside_timestamps = false, values_only = false;
  for (const auto& s : profile.samples()) {
    values_beside_timestamps |= s.values_size() == 2 && s.timestamps_unix_nano_size() == 2;
    values_only |= s.values_size() == 1 && s.timestamps_unix_nano_size() == 0;
  }
  EXPECT_TRUE(values_beside_timestamps);
  EXPECT_TRUE(values_only);
  const auto& d = request.dictionary();
  EXPECT_EQ(d.string_table(0), "");
  EXPECT_EQ(d.link_table(0).trace_id(), std::string(16, '\0'));
  EXPECT_EQ(d.link_table_size(), 3);      // zero, span a, span b
  EXPECT_EQ(d.location_table_size(), 3);  // zero, 0x401000, 0x402000 (the repeated frame reuses its location)
  EXPECT_EQ(d.stack_table_size(), 2);
  EXPECT_EQ(d.stack_table(1).location_indices_size(), 3);
}

TEST(ProfilesEncode, MonotonicTimesAreWrittenAsUnixTimes) {
  ProfileSample s;
  s.time = SampleTime{1000, Clock::Monotonic};
  s.tid = 7;
  EncodeOptions options;
  options.monotonic_to_unix_ns = 5'000;
  DecodedProfiles decoded = decode_profiles(encode_profiles({s}, options));
  ASSERT_EQ(decoded.samples.size(), 1u);
  EXPECT_EQ(decoded.samples[0].time, (SampleTime{6000, Clock::Unix}));
  EXPECT_EQ(decoded.samples[0].tid, 7);  // written as the thread.id attribute
  EXPECT_EQ(decoded.samples[0].attribute("thread.id")->to_display(), "7");
}

}  // namespace
}  // namespace tracecorr::profiles

// The OTLP profiles exporter: round trips through tracecorr's receivers (gRPC
// and HTTP), wire compatibility with an independent gRPC server (the
// generated synchronous service, which parses the typed message itself), a
// bounded queue that drops and counts, and failures counted.
#include <gtest/gtest.h>
#include <grpcpp/grpcpp.h>

#include <mutex>

#include "opentelemetry/proto/collector/profiles/v1development/profiles_service.grpc.pb.h"
#include "profiles_test_support.hpp"
#include "tracecorr/profiles/decode.hpp"
#include "tracecorr/profiles/encode.hpp"
#include "tracecorr/profiles/exporter.hpp"
#include "tracecorr/profiles/grpc_receiver.hpp"
#include "tracecorr/profiles/http_route.hpp"

namespace tracecorr::profiles {
namespace {

using namespace test_support;
using namespace std::chrono_literals;

std::vector<ProfileSample> some_samples(std::size_t n) {
  auto resource = std::make_shared<const otlp::Attributes>(
      otlp::Attributes{{"service.name", "checkout"}, {"process.pid", std::int64_t{4242}}});
  auto profile = std::make_shared<const ProfileInfo>(ProfileInfo{"samples", "count", "cpu", "nanoseconds", 50'000'000,
                                                                 kT0, 1'000'000'000, "tracecorr", "test"});
  std::vector<ProfileSample> samples;
  for (std::size_t i = 0; i < n; ++i) {
    ProfileSample& s = samples.emplace_back();
    s.pid = 4242;
    s.tid = 4243 + static_cast<std::int64_t>(i % 3);
    s.time = SampleTime{kT0 + i, Clock::Unix};
    if (i % 2) s.link = link_of(kTraceIdHex, kSpanIdHex);
    s.attributes = std::make_shared<const otlp::Attributes>(otlp::Attributes{{"thread.id", *s.tid}});
    s.resource = resource;
    s.profile = profile;
    if (i % 5 == 0) s.stack = std::make_shared<const Stack>(Stack{0x1000, 0x2000 + i});
  }
  return samples;
}

void expect_same(std::vector<ProfileSample> sent, std::vector<ProfileSample> got) {
  ASSERT_EQ(got.size(), sent.size());
  sent = sorted(std::move(sent));
  got = sorted(std::move(got));
  for (std::size_t i = 0; i < sent.size(); ++i) EXPECT_TRUE(same_observation(sent[i], got[i])) << "observation " << i;
}

TEST(ProfilesExporter, RoundTripsThroughTheGrpcReceiver) {
  auto store = std::make_shared<SampleStore>();
  auto receiver = GrpcProfilesReceiver::start(store);
  ASSERT_TRUE(receiver.ok()) << receiver.error().message();
  ExporterOptions options;
  options.endpoint = (*receiver)->endpoint();
  options.protocol = ExportProtocol::Grpc;
  options.max_batch_samples = 100;  // three exports
  // By size and flush() alone: a batch due by time while the samples are
  // made and offered (a loaded machine) would make it four.
  options.interval = std::chrono::hours(1);
  auto exporter = ProfilesExporter::start(options);
  ASSERT_TRUE(exporter.ok()) << exporter.error().message();
  const auto samples = some_samples(250);
  for (const auto& s : samples) EXPECT_TRUE((*exporter)->offer(s));
  (*exporter)->flush();
  const auto counters = (*exporter)->counters();
  EXPECT_EQ(counters.samples_exported, 250u) << counters.last_error;
  EXPECT_EQ(counters.exports, 3u);
  expect_same(samples, store->samples());
}

TEST(ProfilesExporter, RoundTripsThroughTheHttpRouteWithItsHeaders) {
  auto store = std::make_shared<SampleStore>();
  otlp::ReceiverOptions receiver_options;
  receiver_options.routes.push_back(http_route(store));
  auto receiver = otlp::OtlpReceiver::start(receiver_options);
  ASSERT_TRUE(receiver.ok());
  ExporterOptions options;
  options.endpoint = (*receiver)->endpoint() + "/";
  options.headers = {{"X-Tracecorr-Session", "token"}};
  auto exporter = ProfilesExporter::start(options);
  ASSERT_TRUE(exporter.ok()) << exporter.error().message();
  const auto samples = some_samples(40);
  for (const auto& s : samples) (*exporter)->offer(s);
  (*exporter)->flush();
  EXPECT_EQ((*exporter)->counters().samples_exported, 40u) << (*exporter)->counters().last_error;
  expect_same(samples, store->samples());
}

// An independent receiver: the generated synchronous service, which has gRPC
// parse the typed message, and nothing of tracecorr's decoder.
class IndependentReceiver final : public pb_collector::ProfilesService::Service {
 public:
  grpc::Status Export(grpc::ServerContext* context, const pb_collector::ExportProfilesServiceRequest* request,
                      pb_collector::ExportProfilesServiceResponse*) override {
    std::lock_guard lock(mutex);
    requests.push_back(*request);
    auto token = context->client_metadata().find("x-tracecorr-session");
    if (token != context->client_metadata().end()) tokens.emplace_back(token->second.data(), token->second.size());
    return grpc::Status::OK;
  }
  std::mutex mutex;
  std::vector<pb_collector::ExportProfilesServiceRequest> requests;
  std::vector<std::string> tokens;
};

TEST(ProfilesExporter, AnIndependentGrpcServerReadsWhatItSends) {
  IndependentReceiver service;
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&service);
  auto server = builder.BuildAndStart();
  ASSERT_TRUE(server && port > 0);
  ExporterOptions options;
  options.endpoint = "http://127.0.0.1:" + std::to_string(port);
  options.protocol = ExportProtocol::Grpc;
  options.headers = {{"x-tracecorr-session", "abc"}};
  auto exporter = ProfilesExporter::start(options);
  ASSERT_TRUE(exporter.ok());
  ProfileSample s;  // as a sampler gives it: monotonic time, no profile
  s.pid = 10;
  s.tid = 11;
  s.time = SampleTime{5'000'000'000, Clock::Monotonic};
  s.link = link_of(kTraceIdHex, kSpanIdHex);
  (*exporter)->offer(s);
  (*exporter)->flush();
  server->Shutdown();
  std::lock_guard lock(service.mutex);
  ASSERT_EQ(service.requests.size(), 1u);
  EXPECT_EQ(service.tokens, std::vector<std::string>{"abc"});
  const auto& request = service.requests[0];
  const auto& d = request.dictionary();
  const auto& profile = request.resource_profiles(0).scope_profiles(0).profiles(0);
  EXPECT_EQ(request.resource_profiles(0).scope_profiles(0).scope().name(), "tracecorr");
  EXPECT_EQ(d.string_table(profile.sample_type().type_strindex()), "samples");
  EXPECT_EQ(d.string_table(profile.sample_type().unit_strindex()), "count");
  ASSERT_EQ(profile.samples_size(), 1);
  const auto& sample = profile.samples(0);
  ASSERT_EQ(sample.timestamps_unix_nano_size(), 1);
  const std::uint64_t unix_time = sample.timestamps_unix_nano(0);
  EXPECT_GT(unix_time, 1'600'000'000'000'000'000ull);  // moved onto the Unix clock
  EXPECT_GE(unix_time, profile.time_unix_nano());
  EXPECT_LT(unix_time, profile.time_unix_nano() + profile.duration_nano());
  EXPECT_EQ(to_hex(std::span(reinterpret_cast<const std::uint8_t*>(d.link_table(sample.link_index()).span_id().data()), 8)),
            kSpanIdHex);
  std::map<std::string, std::int64_t> attributes;
  for (int index : sample.attribute_indices())
    attributes[d.string_table(d.attribute_table(index).key_strindex())] = d.attribute_table(index).value().int_value();
  EXPECT_EQ(attributes, (std::map<std::string, std::int64_t>{{"process.pid", 10}, {"thread.id", 11}}));
}

TEST(ProfilesExporter, AFullQueueDropsAndCountsWithoutBlocking) {
  ExporterOptions options;
  options.endpoint = "http://127.0.0.1:9";  // nothing listens: every export fails
  options.queue_capacity = 4;
  options.interval = std::chrono::hours(1);  // nothing leaves before flush()
  auto exporter = ProfilesExporter::start(options);
  ASSERT_TRUE(exporter.ok());
  int taken = 0;
  for (const auto& s : some_samples(10)) taken += (*exporter)->offer(s);
  EXPECT_EQ(taken, 4);
  auto counters = (*exporter)->counters();
  EXPECT_EQ(counters.offered, 10u);
  EXPECT_EQ(counters.dropped, 6u);
  (*exporter)->flush();
  counters = (*exporter)->counters();
  EXPECT_EQ(counters.exports_failed, 1u);
  EXPECT_EQ(counters.samples_failed, 4u);
  EXPECT_NE(counters.last_error.find("HTTP"), std::string::npos) << counters.last_error;
}

TEST(ProfilesExporter, AProcessResourceIsItsContextsWithThePidTheSamplerSaw) {
  auto resource = process_resource(4242, {{"service.name", "checkout"}, {"process.pid", std::int64_t{1}}});
  EXPECT_EQ(*resource, (otlp::Attributes{{"service.name", "checkout"}, {"process.pid", std::int64_t{4242}}}));
  ProfileSample s;
  s.pid = 4242;
  s.tid = 4243;
  s.time = SampleTime{kT0, Clock::Unix};
  s.resource = resource;
  DecodedProfiles decoded = decode_profiles(encode_profiles({s}));
  ASSERT_EQ(decoded.samples.size(), 1u);
  EXPECT_EQ(decoded.samples[0].pid, 4242);  // read from the resource: not repeated per sample
  EXPECT_EQ(decoded.samples[0].attribute("process.pid"), nullptr);
}

TEST(ProfilesExporter, EndpointsItCannotSpeakAreRefusedAtStart) {
  for (const char* endpoint : {"https://127.0.0.1:4317", "http://127.0.0.1", "http://127.0.0.1:4318/v1/traces",
                               "http://127.0.0.1:99999"}) {
    ExporterOptions options;
    options.endpoint = endpoint;
    EXPECT_FALSE(ProfilesExporter::start(options).ok()) << endpoint;
  }
}

}  // namespace
}  // namespace tracecorr::profiles

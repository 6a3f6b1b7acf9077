// OTLP profiles over HTTP: POST /v1development/profiles on the OTLP/HTTP
// receiver, beside /v1/traces, within its bounds; every request recorded.
#include <gtest/gtest.h>
#include <httplib.h>

#include "google/rpc/status.pb.h"
#include "profiles_test_support.hpp"
#include "tracecorr/profiles/http_route.hpp"

namespace tracecorr::profiles {
namespace {

using namespace test_support;

class ProfilesHttpRoute : public ::testing::Test {
 protected:
  void SetUp() override { start({}); }
  void start(ProfilesLimits limits) {
    receiver.reset();
    store = std::make_shared<SampleStore>(limits);
    otlp::ReceiverOptions options;
    options.limits = limits.transport;
    options.routes.push_back(http_route(store, limits));
    auto started = otlp::OtlpReceiver::start(options);
    ASSERT_TRUE(started.ok()) << started.error().message();
    receiver = std::move(*started);
    client = std::make_unique<httplib::Client>("127.0.0.1", receiver->port());
  }
  httplib::Result post(const std::string& body, const std::string& type = "application/x-protobuf",
                       const std::string& encoding = "") {
    httplib::Headers headers;
    if (!encoding.empty()) headers.emplace("Content-Encoding", encoding);
    return client->Post(kProfilesPath, headers, body, type);
  }
  static ExportBuilder one_sample() {
    ExportBuilder b;
    b.sample(4242, 4243, b.link(kTraceIdHex, kSpanIdHex), {kT0, kT0 + 1});
    return b;
  }

  std::shared_ptr<SampleStore> store;
  std::unique_ptr<otlp::OtlpReceiver> receiver;
  std::unique_ptr<httplib::Client> client;
};

TEST_F(ProfilesHttpRoute, AcceptsProtobufAndRecordsTheSamples) {
  auto result = post(one_sample().bytes());
  ASSERT_TRUE(result) << httplib::to_string(result.error());
  EXPECT_EQ(result->status, 200);
  EXPECT_EQ(result->get_header_value("Content-Type"), "application/x-protobuf");
  auto samples = store->samples();
  ASSERT_EQ(samples.size(), 2u);
  EXPECT_EQ(samples[0].source, Source::OtlpHttp);
  EXPECT_EQ(samples[0].tid, 4243);
  EXPECT_EQ(to_hex(samples[0].link->span_id), kSpanIdHex);
  const auto counters = store->counters(Source::OtlpHttp);
  EXPECT_EQ(counters.exports, 1u);
  EXPECT_EQ(counters.of(Outcome::Accepted), 1u);
  EXPECT_EQ(counters.samples, 2u);
  // Profiles are not spans: the traces' counters did not move.
  EXPECT_EQ(receiver->counters().requests, 0u);
}

TEST_F(ProfilesHttpRoute, GzipIsUndoneAndGzipBombsAreOverBounds) {
  auto result = post(otlp::gzip_compress(one_sample().bytes()), "application/x-protobuf", "gzip");
  ASSERT_TRUE(result);
  EXPECT_EQ(result->status, 200);
  EXPECT_EQ(store->samples().size(), 2u);

  ProfilesLimits limits;
  limits.transport.max_decoded_bytes = 1 << 20;
  start(limits);
  result = post(otlp::gzip_compress(std::string(8 << 20, '\0')), "application/x-protobuf", "gzip");
  ASSERT_TRUE(result);
  EXPECT_EQ(result->status, 413);
  EXPECT_EQ(store->counters().of(Outcome::OverBounds), 1u);
  ASSERT_EQ(store->exports().size(), 1u);
  EXPECT_NE(store->exports()[0].message.find("decoded body exceeds"), std::string::npos);
}

TEST_F(ProfilesHttpRoute, MalformedExportsAreRefusedWithWhereAndKeptAsEvidence) {
  ExportBuilder b;
  b.sample(1, 2, 0, {kT0}).set_stack_index(42);
  auto result = post(b.bytes());
  ASSERT_TRUE(result);
  EXPECT_EQ(result->status, 400);
  google::rpc::Status status;
  ASSERT_TRUE(status.ParseFromString(result->body));
  EXPECT_EQ(status.code(), 3);  // INVALID_ARGUMENT
  EXPECT_NE(status.message().find("samples[0].stackIndex: 42 is outside the stack table"), std::string::npos);
  EXPECT_TRUE(store->samples().empty());
  const auto exports = store->exports();
  ASSERT_EQ(exports.size(), 1u);
  EXPECT_EQ(exports[0].outcome, Outcome::Malformed);
  EXPECT_EQ(store->counters().of(Outcome::Malformed), 1u);
}

TEST_F(ProfilesHttpRoute, OversizedBodiesAndFieldFloodsAreOverBounds) {
  ProfilesLimits limits;
  limits.transport.max_body_bytes = 64 << 10;
  limits.max_fields_per_export = 1000;
  start(limits);
  auto result = post(std::string(100 << 10, 'x'));
  ASSERT_TRUE(result);
  EXPECT_EQ(result->status, 413);
  ExportBuilder b;
  b.sample(1, 2, 0, std::vector<std::uint64_t>(2000, kT0));
  result = post(b.bytes());
  ASSERT_TRUE(result);
  EXPECT_EQ(result->status, 400);
  EXPECT_EQ(store->counters().of(Outcome::OverBounds), 2u);
  EXPECT_TRUE(store->samples().empty());
}

TEST_F(ProfilesHttpRoute, JsonIsUnsupportedAndTracesAreStillServed) {
  auto result = post("{}", "application/json");
  ASSERT_TRUE(result);
  EXPECT_EQ(result->status, 415);
  EXPECT_EQ(store->counters().of(Outcome::Unsupported), 1u);
  result = client->Post("/v1/traces", "", "application/x-protobuf");
  ASSERT_TRUE(result);
  EXPECT_EQ(result->status, 200);
  EXPECT_EQ(receiver->counters().accepted, 1u);
  result = client->Post("/v1experimental/profiles", "", "application/x-protobuf");
  ASSERT_TRUE(result);
  EXPECT_EQ(result->status, 404);
  EXPECT_NE(result->body.find("/v1development/profiles"), std::string::npos);
  EXPECT_EQ(store->counters().exports, 1u);
}

}  // namespace
}  // namespace tracecorr::profiles

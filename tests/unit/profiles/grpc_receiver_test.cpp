// OTLP profiles over gRPC: ProfilesService/Export from the generated stub and
// from raw bytes, grpc-encoding, and each bound of the receiver alone.
#include <gtest/gtest.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <fstream>
#include <future>
#include <map>
#include <thread>

#include "opentelemetry/proto/collector/profiles/v1development/profiles_service.grpc.pb.h"
#include "eventually.hpp"
#include "profiles_test_support.hpp"
#include "tracecorr/fd.hpp"
#include "tracecorr/profiles/grpc_receiver.hpp"

namespace tracecorr::profiles {
namespace {

using namespace test_support;
using tracecorr::test_support::eventually;
using namespace std::chrono_literals;

constexpr char kExportMethod[] = "/opentelemetry.proto.collector.profiles.v1development.ProfilesService/Export";

UniqueFd raw_connect(std::uint16_t port) {
  UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(port);
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) return UniqueFd();
  return fd;
}

// Whether the server closed the connection within `limit` (what it sent
// before, its HTTP/2 SETTINGS, is read and dropped).
bool closed_by_server(int fd, std::chrono::milliseconds limit) {
  const auto until = std::chrono::steady_clock::now() + limit;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    pollfd p{fd, POLLIN | POLLRDHUP, 0};
    if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) return false;
    char buffer[4096];
    if (::recv(fd, buffer, sizeof buffer, MSG_DONTWAIT) <= 0) return true;
  }
}

class ProfilesGrpcReceiver : public ::testing::Test {
 protected:
  void SetUp() override { start({}); }
  void start(GrpcReceiverOptions options) {
    receiver.reset();
    store = std::make_shared<SampleStore>(options.limits);
    auto started = GrpcProfilesReceiver::start(store, std::move(options));
    ASSERT_TRUE(started.ok()) << started.error().message();
    receiver = std::move(*started);
    channel = grpc::CreateChannel("127.0.0.1:" + std::to_string(receiver->port()), grpc::InsecureChannelCredentials());
  }
  grpc::Status send(const pb_collector::ExportProfilesServiceRequest& request,
                    grpc_compression_algorithm compression = GRPC_COMPRESS_NONE,
                    const std::vector<std::pair<std::string, std::string>>& metadata = {}) {
    auto stub = pb_collector::ProfilesService::NewStub(channel);
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + 10s);
    context.set_compression_algorithm(compression);
    for (const auto& [k, v] : metadata) context.AddMetadata(k, v);
    pb_collector::ExportProfilesServiceResponse response;
    return stub->Export(&context, request, &response);
  }
  // Bytes that need not be an export, as a hostile client sends them.
  grpc::Status send_raw(const std::string& bytes, grpc_compression_algorithm compression = GRPC_COMPRESS_NONE) {
    grpc::GenericStub stub(channel);
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + 10s);
    context.set_compression_algorithm(compression);
    grpc::Slice slice(bytes);
    grpc::ByteBuffer request(&slice, 1), response;
    std::promise<grpc::Status> done;
    stub.UnaryCall(&context, kExportMethod, grpc::StubOptions(), &request, &response,
                   [&](grpc::Status status) { done.set_value(std::move(status)); });
    return done.get_future().get();
  }
  static ExportBuilder one_sample() {
    ExportBuilder b;
    b.sample(4242, 4243, b.link(kTraceIdHex, kSpanIdHex), {kT0, kT0 + 1, kT0 + 2});
    return b;
  }

  std::shared_ptr<SampleStore> store;
  std::unique_ptr<GrpcProfilesReceiver> receiver;
  std::shared_ptr<grpc::Channel> channel;
};

TEST_F(ProfilesGrpcReceiver, AcceptsExportsFromTheGeneratedStub) {
  EXPECT_EQ(receiver->endpoint(), "http://127.0.0.1:" + std::to_string(receiver->port()));
  grpc::Status status = send(one_sample().request);
  ASSERT_TRUE(status.ok()) << status.error_message();
  auto samples = store->samples();
  ASSERT_EQ(samples.size(), 3u);
  EXPECT_EQ(samples[0].source, Source::OtlpGrpc);
  EXPECT_EQ(samples[0].pid, 4242);
  EXPECT_EQ(to_hex(samples[0].link->trace_id), kTraceIdHex);
  const auto exports = store->exports();
  ASSERT_EQ(exports.size(), 1u);
  EXPECT_EQ(exports[0].peer.rfind("127.0.0.1:", 0), 0u) << exports[0].peer;  // the connection was placed
  EXPECT_EQ(store->counters(Source::OtlpGrpc).of(Outcome::Accepted), 1u);
  EXPECT_EQ(receiver->connections().accepted, 1u);
}

TEST_F(ProfilesGrpcReceiver, GrpcEncodingIsUndoneHere) {
  for (auto compression : {GRPC_COMPRESS_GZIP, GRPC_COMPRESS_DEFLATE}) {
    grpc::Status status = send(one_sample().request, compression);
    ASSERT_TRUE(status.ok()) << status.error_message();
  }
  EXPECT_EQ(store->samples().size(), 6u);
}

TEST_F(ProfilesGrpcReceiver, DecompressionBombsAreOverBounds) {
  GrpcReceiverOptions options;
  options.limits.transport.max_decoded_bytes = 1 << 20;
  start(options);
  grpc::Status status = send_raw(std::string(8 << 20, '\0'), GRPC_COMPRESS_GZIP);  // some 8 KiB on the wire
  EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << status.error_message();
  EXPECT_NE(status.error_message().find("exceeds the 1048576-byte limit"), std::string::npos);
  EXPECT_EQ(store->counters().of(Outcome::OverBounds), 1u);
}

TEST_F(ProfilesGrpcReceiver, MalformedExportsAreInvalidArgumentNamingWhere) {
  grpc::Status status = send_raw(std::string("\xff\xff\xff\xff\x0f", 5));
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  ExportBuilder b;
  b.sample(1, 2, 17, {kT0});
  status = send(b.request);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(status.error_message().find("samples[0].linkIndex: 17 is outside the link table"), std::string::npos)
      << status.error_message();
  EXPECT_EQ(store->counters().of(Outcome::Malformed), 2u);
  EXPECT_TRUE(store->samples().empty());
}

TEST_F(ProfilesGrpcReceiver, FieldFloodsAreOverBoundsBeforeDecoding) {
  GrpcReceiverOptions options;
  options.limits.max_fields_per_export = 1000;
  start(options);
  ExportBuilder b;
  b.sample(1, 2, 0, std::vector<std::uint64_t>(5000, kT0));
  grpc::Status status = send(b.request);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_EQ(store->counters().of(Outcome::OverBounds), 1u);
}

TEST_F(ProfilesGrpcReceiver, MessagesOverTheSizeLimitAreRefusedByGrpcItself) {
  GrpcReceiverOptions options;
  options.limits.transport.max_body_bytes = 64 << 10;
  start(options);
  grpc::Status status = send_raw(std::string(100 << 10, 'x'));
  EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  // gRPC refuses it before the handler runs: tracecorr never sees it.
  EXPECT_EQ(store->counters().exports, 0u);
  ASSERT_TRUE(send(one_sample().request).ok());  // and the connection still serves
}

TEST_F(ProfilesGrpcReceiver, ConnectionsOverTheLimitAreClosedAtAccept) {
  GrpcReceiverOptions options;
  options.limits.transport.max_connections = 3;
  start(options);
  std::vector<UniqueFd> sockets;
  for (int i = 0; i < 5; ++i) sockets.push_back(raw_connect(receiver->port()));
  ASSERT_TRUE(eventually([&] {
    auto c = receiver->connections();
    return c.accepted + c.closed_at_accept == 5;
  }));
  EXPECT_EQ(receiver->connections().closed_at_accept, 2u);
  EXPECT_EQ(receiver->connections().open, 3u);
  int closed = 0;
  for (auto& s : sockets) closed += closed_by_server(s.get(), 200ms);
  EXPECT_EQ(closed, 2);
  sockets.clear();  // closing ours frees their places
  EXPECT_TRUE(eventually([&] { return receiver->connections().open == 0; }));
}

TEST_F(ProfilesGrpcReceiver, ConnectionsPastTheirAgeAreCutEvenIfTheyNeverSpoke) {
  GrpcReceiverOptions options;
  options.limits.max_connection_age = 300ms;
  options.limits.transport.max_request_time = 200ms;
  start(options);
  UniqueFd silent = raw_connect(receiver->port());
  ASSERT_TRUE(silent);
  EXPECT_TRUE(closed_by_server(silent.get(), 10s));
  EXPECT_TRUE(eventually([&] { return receiver->connections().open == 0; }));
}

TEST_F(ProfilesGrpcReceiver, IdleConnectionsAreSentAway) {
  GrpcReceiverOptions options;
  options.limits.transport.idle_timeout = 1s;
  start(options);
  ASSERT_TRUE(send(one_sample().request).ok());
  EXPECT_EQ(receiver->connections().open, 1u);
  EXPECT_TRUE(eventually([&] { return receiver->connections().open == 0; }));
  ASSERT_TRUE(send(one_sample().request).ok());  // the client connects again
  EXPECT_EQ(receiver->connections().accepted, 2u);
}

TEST_F(ProfilesGrpcReceiver, ForeignConnectionsAreRefusedUnlessTheyCarryTheToken) {
  GrpcReceiverOptions options;
  options.check_connection = [](const sockaddr_storage&, const sockaddr_storage& peer) {
    EXPECT_EQ(peer.ss_family, AF_INET);
    return ConnectionVerdict{false, "pid 1 (someone), uid 1000"};
  };
  options.session_token = "s3cret";
  start(options);
  grpc::Status status = send(one_sample().request);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_NE(status.error_message().find("pid 1 (someone)"), std::string::npos);
  status = send(one_sample().request, GRPC_COMPRESS_NONE, {{kSessionTokenMetadata, "wrong!"}});
  EXPECT_EQ(status.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  status = send(one_sample().request, GRPC_COMPRESS_NONE, {{kSessionTokenMetadata, "s3cret"}});
  EXPECT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(store->counters().of(Outcome::Refused), 2u);
  EXPECT_EQ(store->samples().size(), 3u);
  EXPECT_EQ(receiver->connections().foreign, 1u);
}

TEST_F(ProfilesGrpcReceiver, ForeignConnectionsBeyondTheirPoolAreClosedAtAccept) {
  GrpcReceiverOptions options;
  options.check_connection = [](const sockaddr_storage&, const sockaddr_storage&) {
    return ConnectionVerdict{false, "a stranger"};
  };
  options.max_foreign_connections = 1;
  start(options);
  UniqueFd first = raw_connect(receiver->port()), second = raw_connect(receiver->port());
  ASSERT_TRUE(eventually([&] { return receiver->connections().foreign == 2; }));
  EXPECT_EQ(receiver->connections().closed_at_accept, 1u);
  EXPECT_TRUE(closed_by_server(second.get(), 2s));
}

// Peak resident set of this process, in KiB (VmHWM), and its reset (Linux
// 4.0: "5" into clear_refs sets it to the current resident set).
long peak_rss_kib() {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);)
    if (line.rfind("VmHWM:", 0) == 0) return std::stol(line.substr(6));
  return -1;
}
bool reset_peak() { return static_cast<bool>(std::ofstream("/proc/self/clear_refs") << "5" << std::flush); }

// Many large exports at once from many connections, each decoded a while
// (parsed whole, then refused for its observations) so the others wait: what
// gRPC holds meanwhile is bounded by its resource quota (max_inflight_bytes),
// which turns the rest away, and every call is answered. 1.4 GB
// offered; the process's peak grows by some hundred MiB (BENCHMARKS.md), and
// without the quota it would hold most of what is offered.
TEST_F(ProfilesGrpcReceiver, ManyLargeExportsAtOnceAreBoundedByTheBytesInFlight) {
  GrpcReceiverOptions options;
  options.limits.transport.max_inflight_bytes = 32 << 20;
  options.limits.transport.max_body_bytes = 16 << 20;
  options.limits.max_fields_per_export = 4'000'000;
  start(options);
  constexpr int kConnections = 12, kStreams = 8, kCalls = kConnections * kStreams;
  ExportBuilder big;  // 15 MiB: 1.9 M timestamps, over max_samples_per_export
  big.sample(1, 2, 0, std::vector<std::uint64_t>((15 << 20) / 8, kT0));
  const grpc::Slice body(big.bytes());  // one buffer shared by every call
  std::vector<std::shared_ptr<grpc::Channel>> channels;
  for (int c = 0; c < kConnections; ++c) {
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);  // a connection each
    channels.push_back(grpc::CreateCustomChannel("127.0.0.1:" + std::to_string(receiver->port()),
                                                 grpc::InsecureChannelCredentials(), args));
  }
  ASSERT_TRUE(reset_peak());
  const long before = peak_rss_kib();
  struct Call {
    grpc::ClientContext context;
    grpc::ByteBuffer request, response;
    std::promise<grpc::Status> done;
  };
  std::vector<std::unique_ptr<Call>> calls;
  std::vector<std::unique_ptr<grpc::GenericStub>> stubs;
  for (auto& channel : channels) {
    stubs.push_back(std::make_unique<grpc::GenericStub>(channel));
    for (int s = 0; s < kStreams; ++s) {
      auto call = std::make_unique<Call>();
      call->context.set_deadline(std::chrono::system_clock::now() + 120s);
      call->request = grpc::ByteBuffer(&body, 1);
      Call* raw = call.get();
      stubs.back()->UnaryCall(&raw->context, kExportMethod, grpc::StubOptions(), &raw->request, &raw->response,
                              [raw](grpc::Status status) { raw->done.set_value(std::move(status)); });
      calls.push_back(std::move(call));
    }
  }
  int refused = 0;
  for (auto& call : calls) refused += !call->done.get_future().get().ok();
  const long grown_mib = (peak_rss_kib() - before) / 1024;
  RecordProperty("peak_rss_growth_mib", static_cast<int>(grown_mib));
  EXPECT_EQ(refused, kCalls);  // each was over a bound: the quota, or its observations
  EXPECT_LT(grown_mib, 512) << "of " << kCalls * 15 << " MiB offered";
  // What reached the handler is recorded as over a bound (a call gRPC
  // resets under its quota may never reach it: counted by nobody).
  const auto counters = store->counters();
  EXPECT_GT(counters.exports, 0u);
  EXPECT_EQ(counters.of(Outcome::OverBounds) + counters.of(Outcome::Busy), counters.exports);
  EXPECT_TRUE(store->samples().empty());
}

TEST_F(ProfilesGrpcReceiver, StopsWhileClientsAreConnected) {
  UniqueFd silent = raw_connect(receiver->port());
  ASSERT_TRUE(send(one_sample().request).ok());
  const auto before = std::chrono::steady_clock::now();
  receiver.reset();
  EXPECT_LT(std::chrono::steady_clock::now() - before, 5s);
  EXPECT_TRUE(closed_by_server(silent.get(), 2s));
}

}  // namespace
}  // namespace tracecorr::profiles

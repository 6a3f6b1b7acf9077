// OTLP profiles over gRPC: opentelemetry.proto.collector.profiles.v1development
// .ProfilesService/Export, what the OpenTelemetry eBPF profiler's exporter
// speaks. Debian's gRPC serves the HTTP/2; tracecorr owns the listening socket
// on loopback and accepts every connection itself before handing it to gRPC,
// so it can count connections, cap them, ask who is at the other end, and cut
// one that outlives its age.
//
// The bounds are the OTLP/HTTP receiver's (ProfilesLimits::transport), mapped
// onto gRPC: a message over max_body_bytes is refused by gRPC before and after
// its grpc-encoding is undone (the decompression bomb: RESOURCE_EXHAUSTED);
// streams per connection (max_concurrent_streams), connections
// (max_connections: beyond, closed at accept), a connection idle for
// idle_timeout or older than max_connection_age is sent away (GOAWAY) and cut
// max_request_time later, bytes held by calls over max_inflight_bytes are
// answered UNAVAILABLE, and the decoder counts fields before it allocates
// (decode.hpp). Exports are decoded one at a time.
#pragma once

#include <sys/socket.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "tracecorr/error.hpp"
#include "tracecorr/profiles/decode.hpp"
#include "tracecorr/profiles/store.hpp"

namespace tracecorr::profiles {

// Who is at the other end of one accepted connection (issue 29's tie of every
// export to the judged process). The same shape as the OTLP/HTTP receiver's
// peer check: once that lands (otlp::PeerCheck), pass the same function here.
struct ConnectionVerdict {
  bool of_target = true;  // a process of the judged tree: its exports count
  std::string who;        // for the report: "pid 4242 (forger), uid 1000"
};
using ConnectionCheck = std::function<ConnectionVerdict(const sockaddr_storage& local, const sockaddr_storage& peer)>;

// gRPC metadata key a launched profiler sends the session token in
// (OTEL_EXPORTER_OTLP_HEADERS=x-tracecorr-session=TOKEN); the OTLP/HTTP
// receiver reads the same header.
inline constexpr char kSessionTokenMetadata[] = "x-tracecorr-session";

struct GrpcReceiverOptions {
  std::string host = "127.0.0.1";  // a numeric IPv4 or IPv6 address
  std::uint16_t port = 0;          // 0: an ephemeral port
  ProfilesLimits limits;
  // Unset, every connection is the target's. Set, a connection whose peer is
  // not the target's is foreign: at most max_foreign_connections of them are
  // open at once (beyond, closed at accept) and each of their exports is
  // refused (PERMISSION_DENIED, counted Refused, never decoded) unless it
  // carries `session_token` in kSessionTokenMetadata.
  ConnectionCheck check_connection;
  std::string session_token;
  std::size_t max_foreign_connections = 8;
};

struct GrpcConnectionCounters {
  std::uint64_t accepted = 0;          // connections handed to gRPC
  std::uint64_t closed_at_accept = 0;  // over max_connections (or max_foreign_connections)
  std::uint64_t foreign = 0;           // whose peer check said not the target's
  std::uint64_t cut = 0;               // shut down by tracecorr past their age and grace
  std::uint64_t open = 0;              // open now
};

class GrpcProfilesReceiver {
 public:
  // Binds (SO_REUSEADDR only), starts gRPC and the accepting thread. Fails
  // without throwing when the address cannot be bound or gRPC will not start.
  static Expected<std::unique_ptr<GrpcProfilesReceiver>> start(std::shared_ptr<SampleStore> store,
                                                               GrpcReceiverOptions options = {});
  // False in a build without gRPC (a cross build whose sysroot has none):
  // start() then always fails, saying so.
  static bool built();
  ~GrpcProfilesReceiver();  // stops accepting, shuts gRPC down (calls cancelled), joins
  GrpcProfilesReceiver(const GrpcProfilesReceiver&) = delete;
  GrpcProfilesReceiver& operator=(const GrpcProfilesReceiver&) = delete;

  std::uint16_t port() const;
  // "http://127.0.0.1:PORT": OTEL_EXPORTER_OTLP_ENDPOINT with
  // OTEL_EXPORTER_OTLP_PROTOCOL=grpc.
  std::string endpoint() const;
  GrpcConnectionCounters connections() const;

  struct Impl;

 private:
  explicit GrpcProfilesReceiver(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace tracecorr::profiles

// OTLP profiles over gRPC: a raw callback service (the message arrives as
// bytes, so the decoder counts its fields before anything is parsed), gRPC's
// own decompression off (grpc-encoding is undone here, bounded by
// max_decoded_bytes like the HTTP receiver's gzip), every connection accepted
// by GrpcConnections.
#include "tracecorr/profiles/grpc_receiver.hpp"

#include <grpcpp/grpcpp.h>
#include <grpcpp/resource_quota.h>
#include <grpcpp/server_posix.h>

#include <atomic>
#include <mutex>

#include "grpc_connections.hpp"
#include "opentelemetry/proto/collector/profiles/v1development/profiles_service.grpc.pb.h"

namespace tracecorr::profiles {
namespace {

namespace pb_collector = opentelemetry::proto::collector::profiles::v1development;

// Status messages quote what exporters sent: keep them short and ASCII.
std::string printable(std::string_view text, std::size_t max = 2048) {
  std::string out;
  for (unsigned char c : text.substr(0, max)) out += (c >= 0x20 && c < 0x7f) ? static_cast<char>(c) : '?';
  if (text.size() > max) out += "...";
  return out;
}

std::string metadata(const grpc::CallbackServerContext& context, std::string_view key) {
  const auto& all = context.client_metadata();
  auto it = all.find(grpc::string_ref(key.data(), key.size()));
  return it == all.end() ? std::string() : std::string(it->second.data(), it->second.size());
}

bool same_secret(const std::string& sent, const std::string& token) {
  if (token.empty() || sent.size() != token.size()) return false;
  unsigned char diff = 0;  // constant time: a local user may time the answers
  for (std::size_t i = 0; i < token.size(); ++i) diff |= static_cast<unsigned char>(sent[i] ^ token[i]);
  return diff == 0;
}

grpc::StatusCode status_code(Outcome outcome) {
  switch (outcome) {
    case Outcome::Accepted: return grpc::StatusCode::OK;
    case Outcome::Refused: return grpc::StatusCode::PERMISSION_DENIED;
    case Outcome::Malformed: return grpc::StatusCode::INVALID_ARGUMENT;
    case Outcome::OverBounds: return grpc::StatusCode::RESOURCE_EXHAUSTED;  // not retryable without RetryInfo
    case Outcome::Busy: return grpc::StatusCode::UNAVAILABLE;               // retryable
    case Outcome::Unsupported: return grpc::StatusCode::UNIMPLEMENTED;
  }
  return grpc::StatusCode::INTERNAL;
}

// A gzip member starts 1f 8b; a zlib stream with a header whose check bits
// hold. An honest ExportProfilesServiceRequest starts with field 1 or 2, so
// neither is ever mistaken for one.
bool looks_gzip(std::string_view body) { return body.size() >= 2 && body[0] == '\x1f' && body[1] == '\x8b'; }
bool looks_zlib(std::string_view body) {
  if (body.size() < 2) return false;
  const auto b0 = static_cast<unsigned char>(body[0]), b1 = static_cast<unsigned char>(body[1]);
  return (b0 & 0x0f) == 8 && (b0 * 256 + b1) % 31 == 0;
}

}  // namespace

struct GrpcProfilesReceiver::Impl
    : public pb_collector::ProfilesService::WithRawCallbackMethod_Export<pb_collector::ProfilesService::Service> {
  std::shared_ptr<SampleStore> store;
  GrpcReceiverOptions options;
  std::unique_ptr<detail::GrpcConnections> connections;
  std::unique_ptr<grpc::Server> server;
  std::mutex decoding;  // one export decoded at a time: decode memory is that of one bounded export
  std::atomic<std::size_t> inflight{0};

  grpc::ServerUnaryReactor* Export(grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
                                   grpc::ByteBuffer* response) override {
    grpc::Slice empty{std::string()};  // an empty ExportProfilesServiceResponse is zero bytes
    *response = grpc::ByteBuffer(&empty, 1);
    auto* reactor = context->DefaultReactor();
    reactor->Finish(take(*context, *request));
    return reactor;
  }

  grpc::Status take(const grpc::CallbackServerContext& context, const grpc::ByteBuffer& request);
  // The export's bytes, grpc-encoding undone; nullopt (record filled) when refused.
  std::optional<std::string> body_of(const grpc::ByteBuffer& request, ExportRecord& record);
  grpc::Status finish(ExportRecord record, DecodedProfiles decoded = {}) {
    const grpc::Status status(status_code(record.outcome), printable(record.message));
    store->record(std::move(record), std::move(decoded.samples));
    return status;
  }
};

grpc::Status GrpcProfilesReceiver::Impl::take(const grpc::CallbackServerContext& context,
                                              const grpc::ByteBuffer& request) {
  ExportRecord record;
  record.source = Source::OtlpGrpc;
  record.received_at = std::chrono::steady_clock::now();
  record.received_at_system = std::chrono::system_clock::now();
  const auto connection = connections->find(context.peer());
  record.peer = connection ? connection->peer : context.peer();
  // A connection tracecorr cannot place is foreign when anyone is checked.
  const bool foreign = options.check_connection && (!connection || connection->foreign);
  if (foreign && !same_secret(metadata(context, kSessionTokenMetadata), options.session_token)) {
    record.outcome = Outcome::Refused;
    record.message = "this receiver takes exports only from the process tree tracecorr judges" +
                     (connection && !connection->who.empty() ? " (not " + connection->who + ")" : std::string());
    return finish(std::move(record));
  }
  if (!request.Valid()) {  // gRPC gave up receiving it (its resource quota, or the call was cancelled)
    record.outcome = Outcome::Busy;
    record.message = "gRPC did not deliver the message whole: bytes in flight over its resource quota of " +
                     std::to_string(options.limits.transport.max_inflight_bytes) + " bytes, or the call was cancelled";
    return finish(std::move(record));
  }
  const std::size_t size = request.Length();
  if (inflight.fetch_add(size) + size > options.limits.transport.max_inflight_bytes) {
    inflight.fetch_sub(size);
    record.outcome = Outcome::Busy;
    record.message = "receiver busy: exports in flight exceed " +
                     std::to_string(options.limits.transport.max_inflight_bytes) + " bytes; retry later";
    return finish(std::move(record));
  }
  struct Release {
    std::atomic<std::size_t>& inflight;
    std::size_t size;
    ~Release() { inflight.fetch_sub(size); }
  } release{inflight, size};

  std::optional<std::string> body = body_of(request, record);
  if (!body) return finish(std::move(record));
  std::lock_guard lock(decoding);
  DecodedProfiles decoded = decode_profiles(*body, options.limits);
  record.bytes = body->size();
  record.profiles = decoded.profiles;
  record.samples = decoded.samples.size();
  if (!decoded.ok()) {
    record.outcome = outcome_of(decoded.first_fatal->reason);
    record.message = decoded.first_fatal->message();
    if (const std::size_t more = decoded.problems.size() + decoded.problems_not_kept - 1; more > 0)
      record.message += " (and " + std::to_string(more) + " more problems)";
  }
  record.problems = std::move(decoded.problems);
  return finish(std::move(record), std::move(decoded));
}

std::optional<std::string> GrpcProfilesReceiver::Impl::body_of(const grpc::ByteBuffer& request, ExportRecord& record) {
  std::vector<grpc::Slice> slices;
  std::string raw;
  if (request.Dump(&slices).ok()) {
    raw.reserve(request.Length());
    for (const auto& slice : slices) raw.append(reinterpret_cast<const char*>(slice.begin()), slice.size());
  }
  // gRPC keeps grpc-encoding to itself, and with its decompression off hands
  // over the message as sent: a gzip member cannot be a protobuf message (its
  // first byte is wire type 7); a zlib stream is taken for one only if it
  // inflates (an honest export never starts with field 15).
  const std::size_t max = options.limits.transport.max_decoded_bytes;
  Expected<std::string> decoded = std::move(raw);
  std::string encoding = "identity";
  if (looks_gzip(*decoded)) {
    encoding = "gzip";
    decoded = otlp::gunzip(*decoded, max);
  } else if (looks_zlib(*decoded)) {
    auto inflated = otlp::inflate_zlib(*decoded, max);
    if (inflated.ok() || inflated.error().kind == ErrorKind::kTooLong) {
      encoding = "deflate";
      decoded = std::move(inflated);
    }
  }
  if (!decoded.ok()) {
    const bool bomb = decoded.error().kind == ErrorKind::kTooLong;
    record.outcome = bomb ? Outcome::OverBounds : Outcome::Malformed;
    record.message = bomb ? "decoded message exceeds the " + std::to_string(max) + "-byte limit (grpc-encoding: " +
                                encoding + ")"
                          : "message is not valid " + encoding + " data: " + decoded.error().message();
    return std::nullopt;
  }
  if (decoded->size() > max) {
    record.outcome = Outcome::OverBounds;
    record.message = "message of " + std::to_string(decoded->size()) + " bytes exceeds the " + std::to_string(max) +
                     "-byte limit";
    return std::nullopt;
  }
  return std::move(*decoded);
}

GrpcProfilesReceiver::GrpcProfilesReceiver(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

GrpcProfilesReceiver::~GrpcProfilesReceiver() {
  impl_->connections.reset();  // no new connection from here on
  // Cancels calls in flight after a short grace; joins gRPC's threads.
  impl_->server->Shutdown(std::chrono::system_clock::now() + std::chrono::milliseconds(200));
  impl_->server->Wait();
}

bool GrpcProfilesReceiver::built() { return true; }

Expected<std::unique_ptr<GrpcProfilesReceiver>> GrpcProfilesReceiver::start(std::shared_ptr<SampleStore> store,
                                                                             GrpcReceiverOptions options) {
  auto impl = std::make_unique<Impl>();
  impl->store = std::move(store);
  impl->options = std::move(options);
  auto connections = detail::GrpcConnections::listen(impl->options);
  if (!connections) return connections.error();
  impl->connections = std::move(*connections);

  const ProfilesLimits& limits = impl->options.limits;
  auto ms = [](auto duration) {
    return static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(duration).count());
  };
  grpc::ServerBuilder builder;
  builder.RegisterService(impl.get());
  builder.SetMaxReceiveMessageSize(static_cast<int>(std::min<std::size_t>(limits.transport.max_body_bytes, INT32_MAX)));
  builder.SetMaxSendMessageSize(64 << 10);
  grpc::ResourceQuota quota("tracecorr-otlp-profiles");
  quota.Resize(limits.transport.max_inflight_bytes);
  builder.SetResourceQuota(quota);
  builder.AddChannelArgument(GRPC_ARG_ENABLE_PER_MESSAGE_DECOMPRESSION, 0);  // undone here, bounded
  builder.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS, static_cast<int>(limits.max_concurrent_streams));
  builder.AddChannelArgument(GRPC_ARG_MAX_METADATA_SIZE, static_cast<int>(limits.transport.max_header_bytes));
  builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_IDLE_MS, ms(limits.transport.idle_timeout));
  builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_AGE_MS, ms(limits.max_connection_age));
  builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_AGE_GRACE_MS, ms(limits.transport.max_request_time));
  builder.AddChannelArgument(GRPC_ARG_ENABLE_CHANNELZ, 0);
  impl->server = builder.BuildAndStart();
  if (!impl->server) return make_error("gRPC would not start", "OTLP profiles gRPC receiver");
  grpc::Server* server = impl->server.get();
  impl->connections->run([server](int fd) { grpc::AddInsecureChannelFromFd(server, fd); });
  return std::unique_ptr<GrpcProfilesReceiver>(new GrpcProfilesReceiver(std::move(impl)));
}

std::uint16_t GrpcProfilesReceiver::port() const { return impl_->connections ? impl_->connections->port() : 0; }

std::string GrpcProfilesReceiver::endpoint() const {
  const std::string& host = impl_->options.host;
  return "http://" + (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" + std::to_string(port());
}

GrpcConnectionCounters GrpcProfilesReceiver::connections() const {
  return impl_->connections ? impl_->connections->counters() : GrpcConnectionCounters{};
}

}  // namespace tracecorr::profiles

// The OTLP/HTTP receiver: cpp-httplib serves POST /v1/traces on a background
// thread; every export is bounded, decoded and recorded, accepted or not.
#include <httplib.h>

#include <algorithm>
#include <cctype>
#include <nlohmann/json.hpp>
#include <thread>

#include "google/rpc/status.pb.h"
#include "tracecorr/otlp.hpp"

namespace tracecorr::otlp {

struct OtlpReceiver::Server {
  httplib::Server http;
  std::thread thread;

  ~Server() {
    http.stop();
    if (thread.joinable()) thread.join();
  }
};

namespace {

constexpr char kProtobufType[] = "application/x-protobuf";
constexpr char kJsonType[] = "application/json";

// "Application/JSON; charset=utf-8" -> "application/json".
std::string media_type(std::string_view header) {
  std::string_view type = header.substr(0, header.find(';'));
  while (!type.empty() && std::isspace(static_cast<unsigned char>(type.back()))) type.remove_suffix(1);
  while (!type.empty() && std::isspace(static_cast<unsigned char>(type.front()))) type.remove_prefix(1);
  std::string lower(type);
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
  return lower;
}

// Header values end up in messages and reports: keep them short and printable.
std::string printable(std::string_view text, std::size_t max = 80) {
  std::string out;
  for (unsigned char c : text.substr(0, max)) out += (c >= 0x20 && c < 0x7f) ? static_cast<char>(c) : '?';
  if (text.size() > max) out += "...";
  return out;
}

// OTLP/HTTP: a 4xx carries a google.rpc.Status in the request's encoding.
void answer_error(httplib::Response& res, int http_status, std::optional<Encoding> encoding,
                  const std::string& raw_message) {
  res.status = http_status;
  // Messages quote attribute keys and header values sent to us: keep them ASCII.
  std::string message = printable(raw_message, 2048);
  // google.rpc.Code: INVALID_ARGUMENT for a bad export, RESOURCE_EXHAUSTED for an oversized one.
  int rpc_code = http_status == 413 ? 8 : 3;
  if (encoding == Encoding::Protobuf) {
    google::rpc::Status status;
    status.set_code(rpc_code);
    status.set_message(message);
    res.set_content(status.SerializeAsString(), kProtobufType);
  } else if (encoding == Encoding::Json) {
    nlohmann::json status = {{"code", rpc_code}, {"message", message}};
    res.set_content(status.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace), kJsonType);
  } else {
    res.set_content(message + "\n", "text/plain");
  }
}

}  // namespace

OtlpReceiver::OtlpReceiver(ReceiverOptions options) : options_(std::move(options)) {}

OtlpReceiver::~OtlpReceiver() { server_.reset(); }

Expected<std::unique_ptr<OtlpReceiver>> OtlpReceiver::start(ReceiverOptions options) {
  std::unique_ptr<OtlpReceiver> receiver(new OtlpReceiver(std::move(options)));
  auto server = std::make_unique<Server>();
  OtlpReceiver* self = receiver.get();
  const ReceiverLimits& limits = self->options_.limits;

  server->http.set_payload_max_length(limits.max_body_bytes);
  // httplib's default also sets SO_REUSEPORT, which would let a second
  // receiver bind a port that is in use and share its exports. Only REUSEADDR.
  server->http.set_socket_options([](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  });
  // Short keep-alive: the destructor waits for idle connections to time out.
  server->http.set_keep_alive_timeout(1);
  server->http.Post("/v1/traces", [self](const httplib::Request& req, httplib::Response& res,
                                         const httplib::ContentReader& read_body) {
    const ReceiverLimits& limits = self->options_.limits;
    ReceivedRequest request;
    request.received_at = std::chrono::steady_clock::now();
    request.received_at_system = std::chrono::system_clock::now();
    request.content_type = printable(req.get_header_value("Content-Type"));
    request.content_encoding = printable(req.get_header_value("Content-Encoding"));
    std::string type = media_type(req.get_header_value("Content-Type"));
    if (type == kProtobufType) request.encoding = Encoding::Protobuf;
    else if (type == kJsonType) request.encoding = Encoding::Json;

    auto reject = [&](RejectReason reason, int http_status, std::string message) {
      request.rejected = reason;
      request.http_status = http_status;
      request.response_message = message;
      answer_error(res, http_status, request.encoding, message);
      self->record(std::move(request), {});
    };

    // httplib hands multipart bodies to a multipart reader we do not install:
    // refuse them before reading.
    if (type.rfind("multipart/", 0) == 0) {
      reject(RejectReason::UnsupportedContentType, 415,
             "Content-Type \"" + request.content_type + "\" is not supported: send application/x-protobuf or application/json");
      return;
    }

    // httplib undoes gzip, deflate and br, and passes any other encoding
    // through as if it were identity: name those here instead of failing to
    // parse compressed bytes. (The body is still read below, so the
    // connection stays in step.)
    static constexpr std::string_view kDecodedEncodings[] = {"", "identity", "gzip", "deflate", "br"};
    std::string encoding_header = req.get_header_value("Content-Encoding");
    bool known_encoding = std::find(std::begin(kDecodedEncodings), std::end(kDecodedEncodings), encoding_header) !=
                          std::end(kDecodedEncodings);

    // httplib undoes Content-Encoding (gzip) while it reads; the receiver
    // below sees decoded bytes and stops at the decoded-size limit, which is
    // what defeats a gzip bomb. The raw size is bounded by set_payload_max_length.
    std::string body;
    bool decoded_too_large = false;
    bool complete = read_body([&](const char* data, std::size_t size) {
      if (body.size() + size > limits.max_decoded_bytes) {
        decoded_too_large = true;
        return false;
      }
      body.append(data, size);
      return true;
    });
    request.decoded_bytes = body.size();
    request.body_prefix = body.substr(0, ReceivedRequest::kBodyPrefixBytes);

    if (!complete) {
      // httplib has put its own verdict in res.status (413 over the payload
      // limit, 415 for an encoding it cannot undo, 400 otherwise).
      int httplib_status = res.status;
      if (decoded_too_large)
        return reject(RejectReason::DecompressedTooLarge, 413,
                      "decoded body exceeds the " + std::to_string(limits.max_decoded_bytes) +
                          "-byte limit (Content-Encoding: " + (request.content_encoding.empty() ? "none" : request.content_encoding) + ")");
      if (httplib_status == 413)
        return reject(RejectReason::BodyTooLarge, 413,
                      "body exceeds the " + std::to_string(limits.max_body_bytes) + "-byte limit");
      if (httplib_status == 415)
        return reject(RejectReason::UnsupportedContentEncoding, 415,
                      "Content-Encoding \"" + request.content_encoding + "\" is not supported: send gzip or no encoding");
      return reject(RejectReason::MalformedBody, 400,
                    request.content_encoding.empty()
                        ? "body could not be read (connection closed or chunking broken)"
                        : "body is not valid " + request.content_encoding + " data");
    }
    if (!known_encoding)
      return reject(RejectReason::UnsupportedContentEncoding, 415,
                    "Content-Encoding \"" + request.content_encoding + "\" is not supported: send gzip or no encoding");
    if (!request.encoding)
      return reject(RejectReason::UnsupportedContentType, 415,
                    "Content-Type \"" + request.content_type +
                        "\" is not supported: send application/x-protobuf or application/json");

    DecodedExport decoded = *request.encoding == Encoding::Protobuf ? decode_protobuf(body, limits)
                                                                    : decode_json(body, limits);
    request.problems = std::move(decoded.problems);
    if (!decoded.ok()) {
      const DecodeProblem& first = *decoded.first_fatal;
      std::string message = first.message();
      if (decoded.problems_not_kept + request.problems.size() > 1)
        message += " (and " + std::to_string(decoded.problems_not_kept + request.problems.size() - 1) + " more problems)";
      return reject(first.reason, 400, message);
    }
    request.http_status = 200;
    request.span_count = decoded.spans.size();
    if (*request.encoding == Encoding::Protobuf) {
      // An empty ExportTraceServiceResponse serialises to zero bytes.
      res.set_content(std::string(), kProtobufType);
    } else {
      res.set_content("{}", kJsonType);
    }
    res.status = 200;
    self->record(std::move(request), std::move(decoded.spans));
  });
  // Other methods on the export path: say which one works.
  auto only_post = [](const httplib::Request&, httplib::Response& res) {
    res.status = 405;
    res.set_header("Allow", "POST");
    res.set_content("only POST is supported on /v1/traces\n", "text/plain");
  };
  server->http.Get("/v1/traces", only_post);
  server->http.Put("/v1/traces", only_post);
  server->http.Delete("/v1/traces", only_post);

  const std::string& host = self->options_.host;
  if (self->options_.port == 0) {
    int port = server->http.bind_to_any_port(host);
    if (port <= 0) return make_error("cannot bind an ephemeral port", "OTLP receiver on " + host);
    self->port_ = static_cast<std::uint16_t>(port);
  } else {
    if (!server->http.bind_to_port(host, self->options_.port))
      return make_error("cannot bind (in use, or not a local address)",
                        "OTLP receiver on " + host + ":" + std::to_string(self->options_.port));
    self->port_ = self->options_.port;
  }
  Server* raw = server.get();
  server->thread = std::thread([raw] { raw->http.listen_after_bind(); });
  // stop() is a no-op until the listen loop runs; wait for it so the
  // destructor can never miss it. Connections made meanwhile wait in the
  // backlog, so this is not needed for correctness of requests.
  while (!raw->http.is_running()) std::this_thread::yield();
  receiver->server_ = std::move(server);
  return receiver;
}

std::string OtlpReceiver::endpoint() const {
  std::string host = options_.host.find(':') != std::string::npos ? "[" + options_.host + "]" : options_.host;
  return "http://" + host + ":" + std::to_string(port_);
}

void OtlpReceiver::record(ReceivedRequest request, std::vector<ReceivedSpan> spans) {
  {
    std::lock_guard lock(mutex_);
    request.index = next_request_index_++;
    ++counters_.requests;
    if (request.rejected) {
      ++counters_.rejected[*request.rejected];
    } else {
      ++counters_.accepted;
      counters_.spans += spans.size();
    }
    for (auto& span : spans) {
      if (spans_.size() >= options_.limits.max_stored_spans) {
        ++counters_.spans_not_kept;
        continue;
      }
      span.request_index = request.index;
      span.received_at = request.received_at;
      span.received_at_system = request.received_at_system;
      spans_.push_back(std::move(span));
    }
    if (requests_.size() < options_.limits.max_stored_requests) requests_.push_back(std::move(request));
  }
  arrived_.notify_all();
}

std::vector<ReceivedSpan> OtlpReceiver::spans() const {
  std::lock_guard lock(mutex_);
  return spans_;
}

std::vector<ReceivedRequest> OtlpReceiver::requests() const {
  std::lock_guard lock(mutex_);
  return requests_;
}

ReceiverCounters OtlpReceiver::counters() const {
  std::lock_guard lock(mutex_);
  return counters_;
}

std::optional<ReceivedSpan> OtlpReceiver::find_span(const SpanId& span_id) const {
  std::lock_guard lock(mutex_);
  for (const auto& span : spans_)
    if (span.span_id == span_id) return span;
  return std::nullopt;
}

bool OtlpReceiver::wait_for(const std::function<bool(const std::vector<ReceivedSpan>&)>& predicate,
                            std::chrono::milliseconds timeout) const {
  std::unique_lock lock(mutex_);
  return arrived_.wait_for(lock, timeout, [&] { return predicate(spans_); });
}

void OtlpReceiver::clear() {
  std::lock_guard lock(mutex_);
  spans_.clear();
  requests_.clear();
  counters_ = {};
}

}  // namespace tracecorr::otlp

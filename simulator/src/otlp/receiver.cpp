// The OTLP/HTTP receiver: libmicrohttpd serves POST /v1/traces from one event
// loop thread; every export is bounded, decoded and recorded, accepted or not.
//
// Why libmicrohttpd: any local user can reach the receiver. It bounds the
// request line and all headers of a request together in one per-connection
// buffer (cpp-httplib 0.11 bounds neither), caps connections, and serves every
// connection from one poll loop, so slow clients hold a socket each but never
// a worker. What it does not bound, the time one request may take, the
// Server's deadline watcher adds by shutting the connection's socket down.
#include <arpa/inet.h>
#include <linux/sock_diag.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <nlohmann/json.hpp>
#include <thread>
#include <unordered_map>

#include "google/rpc/status.pb.h"
#include "tracecorr/fd.hpp"
#include "tracecorr/otlp.hpp"
#include "tracecorr/tcp_peer.hpp"

namespace tracecorr::otlp {

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

std::string lowercase(std::string_view text) {
  std::string lower(text);
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

std::string header(MHD_Connection* connection, const char* name) {
  const char* value = MHD_lookup_connection_value(connection, MHD_HEADER_KIND, name);
  return value ? value : "";
}

// Queues a response (status, body, content type); false when MHD refused it.
bool respond(MHD_Connection* connection, unsigned status, const std::string& body, const char* content_type,
             const char* allow = nullptr) {
  MHD_Response* response =
      MHD_create_response_from_buffer(body.size(), const_cast<char*>(body.data()), MHD_RESPMEM_MUST_COPY);
  if (!response) return false;
  MHD_add_response_header(response, MHD_HTTP_HEADER_CONTENT_TYPE, content_type);
  if (allow) MHD_add_response_header(response, MHD_HTTP_HEADER_ALLOW, allow);
  MHD_Result queued = MHD_queue_response(connection, status, response);
  MHD_destroy_response(response);
  return queued == MHD_YES;
}

// OTLP/HTTP: a 4xx/5xx carries a google.rpc.Status in the request's encoding.
bool answer_error(MHD_Connection* connection, int http_status, std::optional<Encoding> encoding,
                  const std::string& raw_message) {
  // Messages quote attribute keys and header values sent to us: keep them ASCII.
  std::string message = printable(raw_message, 2048);
  // google.rpc.Code: INVALID_ARGUMENT for a bad export, RESOURCE_EXHAUSTED for
  // an oversized one, UNAVAILABLE when the receiver is busy, PERMISSION_DENIED
  // for an export from outside the judged tree.
  int rpc_code = http_status == 413 ? 8 : http_status == 503 ? 14 : http_status == 403 ? 7 : 3;
  if (encoding == Encoding::Protobuf) {
    google::rpc::Status status;
    status.set_code(rpc_code);
    status.set_message(message);
    return respond(connection, http_status, status.SerializeAsString(), kProtobufType);
  }
  if (encoding == Encoding::Json) {
    nlohmann::json status = {{"code", rpc_code}, {"message", message}};
    return respond(connection, http_status, status.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace),
                   kJsonType);
  }
  return respond(connection, http_status, message + "\n", "text/plain");
}

// A Content-Length header's value; nullopt when absent or not a number (MHD
// itself refuses a malformed one before the handler runs).
std::optional<std::uint64_t> content_length(std::string_view value) {
  if (value.empty() || value.size() > 18) return value.empty() ? std::nullopt : std::optional<std::uint64_t>(UINT64_MAX);
  std::uint64_t n = 0;
  for (char c : value) {
    if (c < '0' || c > '9') return std::nullopt;
    n = n * 10 + static_cast<std::uint64_t>(c - '0');
  }
  return n;
}

// Content-Encoding the receiver undoes itself (after the whole body is read,
// bounded by max_decoded_bytes).
enum class BodyEncoding { Identity, Gzip, Deflate, Unknown };
BodyEncoding body_encoding(std::string_view header_value) {
  std::string value = lowercase(header_value);
  if (value.empty() || value == "identity") return BodyEncoding::Identity;
  if (value == "gzip" || value == "x-gzip") return BodyEncoding::Gzip;
  if (value == "deflate") return BodyEncoding::Deflate;
  return BodyEncoding::Unknown;
}

}  // namespace

// One request being received: headers seen, body collected so far.
struct Upload {
  ExportRoute* route = nullptr;  // null: /v1/traces
  ReceivedRequest request;
  std::string type;  // media type, lower case
  BodyEncoding encoding = BodyEncoding::Identity;
  std::string body;
  std::size_t reserved = 0;  // bytes of Server::inflight_ this upload holds
  std::optional<RejectReason> overflow;  // body over a limit: the rest is discarded, then answered
  bool answered = false;                 // finish() ran: nothing more to record for this request
};

struct OtlpReceiver::Server {
  OtlpReceiver* owner = nullptr;
  MHD_Daemon* daemon = nullptr;

  // The deadline watcher: every open connection's socket and when its current
  // request began. Entries leave in MHD's "closed" notification, which MHD
  // sends before it closes the socket, so a socket found here is still ours.
  struct Open {
    int fd = -1;
    std::chrono::steady_clock::time_point since;
    bool cut = false;
    bool foreign = false;  // its peer is not a process of the judged tree (check_peer)
    bool in_pool = false;  // one of the max_foreign_connections foreign connections kept open
    pid_t exporter = 0;    // PeerVerdict::pid: stamped on each of its requests
    std::size_t requests = 0;  // requests whose headers arrived whole
    bool in_request = false;   // a request's headers arrived and it has not ended yet
    // When the watcher first saw the peer done sending while a request was
    // unfinished (or none had begun): see cut_half_closed.
    std::optional<std::chrono::steady_clock::time_point> peer_done_at;
  };
  std::mutex open_mutex;
  std::condition_variable open_changed;
  std::unordered_map<MHD_Connection*, Open> open;
  bool stopping = false;
  std::thread watcher;

  // Bytes held by uploads in progress (only the MHD thread touches it).
  std::size_t inflight = 0;
  // Foreign connections open now (only the MHD thread touches it).
  std::size_t foreign_open = 0;
  // The listening socket (MHD's; open until MHD_stop_daemon) and the drops
  // the kernel had counted at it when last looked at (only the watcher).
  int listen_fd = -1;
  std::uint64_t listen_drops_seen = 0;

  ~Server() {
    {
      std::lock_guard lock(open_mutex);
      stopping = true;
    }
    open_changed.notify_all();
    if (watcher.joinable()) watcher.join();
    // Closes every connection and joins the event loop thread. Handlers are
    // short (bounded decode), and no client can hold the loop: shutdown is
    // bounded by one decode.
    if (daemon) MHD_stop_daemon(daemon);
  }

  void watch_deadlines() {
    const auto limit = owner->options_.limits.max_request_time;
    const auto tick = std::clamp<std::chrono::milliseconds>(limit / 4, std::chrono::milliseconds(10),
                                                            std::chrono::milliseconds(250));
    std::unique_lock lock(open_mutex);
    while (!stopping) {
      open_changed.wait_for(lock, tick, [&] { return stopping; });
      auto now = std::chrono::steady_clock::now();
      for (auto& [connection, entry] : open) {
        if (entry.cut) continue;
        if (now - entry.since < limit) {
          cut_half_closed(entry, now);
          continue;
        }
        // MHD sees the connection end and closes it on its own thread.
        ::shutdown(entry.fd, SHUT_RDWR);
        entry.cut = true;
        owner->count_connection_cut();
        if (!entry.foreign) owner->count_loss(Loss::Cut);
      }
      look_at_listen_drops();
    }
  }

  // An exporter that closes its connection mid-request (it gave up: a timeout,
  // an interrupted send) leaves its request unfinished for good. MHD does not
  // always see that end: when the rest of the headers, part of the body and
  // the FIN arrive together, it waits for the body until the deadline, and a
  // session that ends first never learns of the loss (an abandoned export's
  // spans then look never exported). So the watcher looks: a peer done
  // sending (POLLRDHUP) while a request is unfinished, still so after
  // kHalfClosedGrace, is cut here and its export counted lost. The grace
  // leaves MHD time to answer a whole request whose client half-closed
  // after sending it (legal HTTP).
  static constexpr auto kHalfClosedGrace = std::chrono::milliseconds(500);
  void cut_half_closed(Open& entry, std::chrono::steady_clock::time_point now) {
    if (!(entry.in_request || entry.requests == 0) || !peer_done_sending(entry.fd)) {
      entry.peer_done_at.reset();
      return;
    }
    if (!entry.peer_done_at) entry.peer_done_at = now;
    if (now - *entry.peer_done_at < kHalfClosedGrace) return;
    ::shutdown(entry.fd, SHUT_RDWR);
    entry.cut = true;
    if (!entry.foreign) owner->count_loss(Loss::CutShort);
  }

  static bool peer_done_sending(int fd) {
    pollfd p{fd, POLLRDHUP, 0};
    return ::poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR));
  }

  // Connection attempts the kernel dropped at the listening socket (its
  // accept queue full): SO_MEMINFO's drop count of a listener is exactly
  // those (tcp_listendrop). Nobody can say whose they were, so all count.
  void look_at_listen_drops() {
    std::uint32_t meminfo[SK_MEMINFO_VARS] = {};
    socklen_t size = sizeof meminfo;
    if (listen_fd < 0 || ::getsockopt(listen_fd, SOL_SOCKET, SO_MEMINFO, meminfo, &size) != 0 ||
        size <= SK_MEMINFO_DROPS * sizeof(std::uint32_t))
      return;
    const std::uint64_t drops = meminfo[SK_MEMINFO_DROPS];
    if (drops > listen_drops_seen) owner->count_loss(Loss::ListenDrops, drops - listen_drops_seen);
    listen_drops_seen = std::max(listen_drops_seen, drops);
  }

  static void on_connection(void* cls, MHD_Connection* connection, void** /*socket_context*/,
                            MHD_ConnectionNotificationCode code) {
    auto* self = static_cast<Server*>(cls);
    if (code != MHD_CONNECTION_NOTIFY_STARTED) {
      std::lock_guard lock(self->open_mutex);
      if (auto it = self->open.find(connection); it != self->open.end()) {
        if (it->second.in_pool) --self->foreign_open;
        // The tree's connection ended before any request on it was whole: its
        // exporter gave up (or was interrupted) while sending. A request cut
        // short later on a kept-alive connection is on_completed's to count.
        const Open& entry = it->second;
        if (!entry.foreign && !entry.cut && entry.requests == 0) self->owner->count_loss(Loss::CutShort);
        self->open.erase(it);
      }
      return;
    }
    const MHD_ConnectionInfo* info = MHD_get_connection_info(connection, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!info) return;
    Open entry{info->connect_fd, std::chrono::steady_clock::now()};
    // Who is at the other end, asked before the lock (it reads /proc).
    if (const auto& check = self->owner->options_.check_peer) {
      PeerVerdict verdict = self->peer_of(entry.fd, check);
      entry.exporter = verdict.pid;
      if (verdict.gone) {
        self->owner->count_abandoned_connection();
        self->owner->count_loss(Loss::Abandoned);
        ::shutdown(entry.fd, SHUT_RDWR);  // nobody is there to answer
        entry.cut = true;
        entry.foreign = true;
      } else if (!verdict.of_target) {
        entry.foreign = true;
        entry.in_pool = self->foreign_open < self->owner->options_.max_foreign_connections;
        self->owner->count_foreign_connection(verdict.who, !entry.in_pool);
        if (entry.in_pool) {
          ++self->foreign_open;
        } else {
          ::shutdown(entry.fd, SHUT_RDWR);  // MHD closes it on its next look
          entry.cut = true;
        }
      }
    }
    std::lock_guard lock(self->open_mutex);
    self->open[connection] = entry;
  }

  static PeerVerdict peer_of(int fd, const PeerCheck& check) {
    sockaddr_storage local{}, peer{};
    socklen_t local_size = sizeof local, peer_size = sizeof peer;
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &local_size) != 0 ||
        ::getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &peer_size) != 0)
      return {false, true, "a peer whose address could not be read (" + std::string(std::strerror(errno)) + ")"};
    return check(local, peer);
  }

  pid_t exporter_of(MHD_Connection* connection) {
    std::lock_guard lock(open_mutex);
    auto it = open.find(connection);
    return it == open.end() ? 0 : it->second.exporter;
  }

  void count_request(MHD_Connection* connection) {
    std::lock_guard lock(open_mutex);
    if (auto it = open.find(connection); it != open.end()) {
      ++it->second.requests;
      it->second.in_request = true;
    }
  }

  // The request on the connection ended; whether the watcher had cut it (and
  // counted what that lost).
  bool end_request(MHD_Connection* connection) {
    std::lock_guard lock(open_mutex);
    auto it = open.find(connection);
    if (it == open.end()) return false;
    it->second.since = std::chrono::steady_clock::now();
    it->second.in_request = false;
    it->second.peer_done_at.reset();
    return it->second.cut;
  }

  bool is_foreign(MHD_Connection* connection) {
    std::lock_guard lock(open_mutex);
    auto it = open.find(connection);
    return it != open.end() && it->second.foreign;
  }

  // A foreign connection's export: admitted only with the session token.
  bool carries_session_token(MHD_Connection* connection) const {
    const std::string& token = owner->options_.session_token;
    const std::string sent = header(connection, kSessionTokenHeader);
    if (token.empty() || sent.size() != token.size()) return false;
    unsigned char diff = 0;  // constant time: a local user may time the answers
    for (std::size_t i = 0; i < token.size(); ++i) diff |= static_cast<unsigned char>(sent[i] ^ token[i]);
    return diff == 0;
  }

  // A request ended (answered, or its connection died): release its upload
  // and start the connection's clock again for the next request.
  static void on_completed(void* cls, MHD_Connection* connection, void** con_cls, MHD_RequestTerminationCode code) {
    auto* self = static_cast<Server*>(cls);
    auto* upload = static_cast<Upload*>(*con_cls);
    const bool counted_by_watcher = self->end_request(connection);
    // An export of the tree's that ended unanswered: its body never came whole.
    if (upload && !upload->answered && code != MHD_REQUEST_TERMINATED_COMPLETED_OK && !counted_by_watcher &&
        !self->is_foreign(connection))
      self->owner->count_loss(Loss::CutShort);
    if (upload) {
      self->inflight -= upload->reserved;
      delete upload;
      *con_cls = nullptr;
    }
  }

  static MHD_Result on_request(void* cls, MHD_Connection* connection, const char* url, const char* method,
                               const char* /*version*/, const char* upload_data, std::size_t* upload_data_size,
                               void** con_cls) {
    auto* self = static_cast<Server*>(cls);
    const ReceiverLimits& limits = self->owner->options_.limits;
    auto* upload = static_cast<Upload*>(*con_cls);
    if (!upload) {
      // Headers are complete; the body (if any) follows in later calls.
      ExportRoute* route = self->route_for(url);
      if (!route && std::strcmp(url, "/v1/traces") != 0)
        return respond(connection, 404, "only " + self->served_paths() + " served\n", "text/plain") ? MHD_YES : MHD_NO;
      if (std::strcmp(method, "POST") != 0)
        return respond(connection, 405, "only POST is supported on " + printable(url) + "\n", "text/plain", "POST")
                   ? MHD_YES
                   : MHD_NO;
      if (self->is_foreign(connection)) {
        const bool admitted = self->carries_session_token(connection);
        self->owner->count_foreign_export(admitted);
        if (!admitted)  // not read, not decoded, not recorded: a count, and the connection closes
          return answer_error(connection, 403, std::nullopt,
                              "this receiver takes exports only from the process tree tracecorr judges")
                     ? MHD_YES
                     : MHD_NO;
      }
      upload = new Upload;
      upload->route = route;
      *con_cls = upload;
      self->count_request(connection);
      ReceivedRequest& request = upload->request;
      request.received_at = std::chrono::steady_clock::now();
      request.received_at_system = std::chrono::system_clock::now();
      request.exporter_pid = self->exporter_of(connection);
      std::string content_type = header(connection, MHD_HTTP_HEADER_CONTENT_TYPE);
      std::string content_encoding = header(connection, MHD_HTTP_HEADER_CONTENT_ENCODING);
      request.content_type = printable(content_type);
      request.content_encoding = printable(content_encoding);
      upload->type = media_type(content_type);
      if (upload->type == kProtobufType) request.encoding = Encoding::Protobuf;
      else if (upload->type == kJsonType) request.encoding = Encoding::Json;
      upload->encoding = body_encoding(content_encoding);
      // A declared length over the limit is answered before any byte is read
      // (MHD then closes the connection instead of reading the body).
      if (auto length = content_length(header(connection, MHD_HTTP_HEADER_CONTENT_LENGTH));
          length && *length > limits.max_body_bytes) {
        upload->overflow = RejectReason::BodyTooLarge;
        return self->finish(connection, *upload) ? MHD_YES : MHD_NO;
      }
      return MHD_YES;
    }

    if (upload->answered) {
      *upload_data_size = 0;
      return MHD_YES;
    }
    if (*upload_data_size != 0) {
      std::size_t size = *upload_data_size;
      *upload_data_size = 0;  // consumed (kept or discarded)
      if (upload->overflow) return MHD_YES;
      if (upload->body.size() + size > limits.max_body_bytes) {
        upload->overflow = RejectReason::BodyTooLarge;
      } else if (self->inflight + size > limits.max_inflight_bytes) {
        upload->overflow = RejectReason::Busy;
      } else {
        upload->body.append(upload_data, size);
        upload->reserved += size;
        self->inflight += size;
        return MHD_YES;
      }
      // Over a limit: free what was collected; the rest is read and dropped
      // until the client finishes (or its request time runs out).
      self->inflight -= upload->reserved;
      upload->reserved = 0;
      std::string().swap(upload->body);
      return MHD_YES;
    }

    // The whole body has arrived.
    return self->finish(connection, *upload) ? MHD_YES : MHD_NO;
  }

  // Undoes the encoding, decodes, answers and records one export.
  bool finish(MHD_Connection* connection, Upload& upload);

  ExportRoute* route_for(const char* url) const {
    for (const auto& route : owner->options_.routes)
      if (route->path() == url) return route.get();
    return nullptr;
  }
  std::string served_paths() const {
    std::string paths = "/v1/traces";
    for (const auto& route : owner->options_.routes) paths += ", " + route->path();
    return paths + (owner->options_.routes.empty() ? " is" : " are");
  }
};

bool OtlpReceiver::Server::finish(MHD_Connection* connection, Upload& upload) {
  upload.answered = true;
  const ReceiverLimits& limits = owner->options_.limits;
  ReceivedRequest& request = upload.request;
  bool answered = false;
  auto reject = [&](RejectReason reason, int http_status, std::string message) {
    request.rejected = reason;
    request.http_status = http_status;
    request.response_message = message;
    answered = answer_error(connection, http_status, request.encoding, message);
    if (upload.route)
      upload.route->handle(request, nullptr);
    else
      owner->record(std::move(request), {});
    return answered;
  };

  if (upload.overflow == RejectReason::BodyTooLarge)
    return reject(RejectReason::BodyTooLarge, 413,
                  "body exceeds the " + std::to_string(limits.max_body_bytes) + "-byte limit");
  if (upload.overflow == RejectReason::Busy)
    return reject(RejectReason::Busy, 503,
                  "receiver busy: bodies in flight exceed " + std::to_string(limits.max_inflight_bytes) +
                      " bytes; retry later");
  if (upload.encoding == BodyEncoding::Unknown)
    return reject(RejectReason::UnsupportedContentEncoding, 415,
                  "Content-Encoding \"" + request.content_encoding +
                      "\" is not supported: send gzip, deflate or no encoding");
  if (upload.type.rfind("multipart/", 0) == 0 || !request.encoding)
    return reject(RejectReason::UnsupportedContentType, 415,
                  "Content-Type \"" + request.content_type +
                      "\" is not supported: send application/x-protobuf or application/json");

  std::string decoded_body;
  std::string_view body = upload.body;
  if (upload.encoding != BodyEncoding::Identity) {
    auto inflated = upload.encoding == BodyEncoding::Gzip ? gunzip(upload.body, limits.max_decoded_bytes)
                                                          : inflate_zlib(upload.body, limits.max_decoded_bytes);
    if (!inflated.ok()) {
      request.decoded_bytes = 0;
      if (inflated.error().kind == ErrorKind::kTooLong)
        return reject(RejectReason::DecompressedTooLarge, 413,
                      "decoded body exceeds the " + std::to_string(limits.max_decoded_bytes) +
                          "-byte limit (Content-Encoding: " + request.content_encoding + ")");
      return reject(RejectReason::MalformedBody, 400,
                    "body is not valid " + request.content_encoding + " data: " + inflated.error().message());
    }
    decoded_body = std::move(*inflated);
    body = decoded_body;
  } else if (body.size() > limits.max_decoded_bytes) {
    return reject(RejectReason::DecompressedTooLarge, 413,
                  "decoded body exceeds the " + std::to_string(limits.max_decoded_bytes) + "-byte limit");
  }
  request.decoded_bytes = body.size();
  request.body_prefix = std::string(body.substr(0, ReceivedRequest::kBodyPrefixBytes));
  if (upload.route) {  // another signal: the route decodes and keeps it
    upload.route->handle(request, &body);
    if (request.rejected) return answer_error(connection, request.http_status, request.encoding, request.response_message);
    return respond(connection, 200, "", kProtobufType);
  }

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
  // An empty ExportTraceServiceResponse serialises to zero bytes.
  answered = *request.encoding == Encoding::Protobuf ? respond(connection, 200, "", kProtobufType)
                                                     : respond(connection, 200, "{}", kJsonType);
  owner->record(std::move(request), std::move(decoded.spans));
  return answered;
}

OtlpReceiver::OtlpReceiver(ReceiverOptions options) : options_(std::move(options)) {}

OtlpReceiver::~OtlpReceiver() { server_.reset(); }

namespace {

// The receiver's own listening socket, bound and listening: SO_REUSEADDR only
// (never SO_REUSEPORT, which would let a second receiver share a port in use
// and its exports). Made inside the network namespace of
// options.network_namespace_of when that is not tracecorr's (a container's
// loopback): the socket stays there. `family` and `port` say what was bound.
Expected<UniqueFd> listen_for(const ReceiverOptions& o, int& family, std::uint16_t& port) {
  const std::string where = "OTLP receiver on " + o.host + ":" + std::to_string(o.port);
  sockaddr_storage address{};
  socklen_t address_size = 0;
  family = AF_INET;
  if (auto* v4 = reinterpret_cast<sockaddr_in*>(&address); inet_pton(AF_INET, o.host.c_str(), &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons(o.port);
    address_size = sizeof(sockaddr_in);
  } else if (auto* v6 = reinterpret_cast<sockaddr_in6*>(&address);
             inet_pton(AF_INET6, o.host.c_str(), &v6->sin6_addr) == 1) {
    v6->sin6_family = family = AF_INET6;
    v6->sin6_port = htons(o.port);
    address_size = sizeof(sockaddr_in6);
  } else {
    return make_error("not a numeric IPv4 or IPv6 address", where);
  }
  std::string failed;
  auto fail = [&](const std::string& what) {
    failed = what + std::strerror(errno) + (what.back() == '(' ? ")" : "");
    return UniqueFd();
  };
  auto make = [&]() -> UniqueFd {
    UniqueFd listener(::socket(family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    if (!listener) return fail("socket: ");
    int yes = 1;
    ::setsockopt(listener.get(), SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    if (::bind(listener.get(), reinterpret_cast<sockaddr*>(&address), address_size) != 0) return fail("cannot bind (");
    // A deep accept queue: a burst of attacker connections must not fill it, or
    // the agent's SYN is dropped and retried a second later, which a timing
    // judge would see as a late export (the kernel caps it at somaxconn).
    if (::listen(listener.get(), SOMAXCONN) != 0) return fail("listen: ");
    return listener;
  };
  Expected<UniqueFd> listener = UniqueFd();
  const auto shared = o.network_namespace_of > 0 ? shares_network_namespace(o.network_namespace_of) : Expected<bool>(true);
  if (shared && !*shared) {
    listener = make_in_network_namespace(o.network_namespace_of, make);
    if (!listener) return failed.empty() ? listener.error() : make_error(failed, where + " in " + network_namespace_name(o.network_namespace_of));
  } else {
    listener = make();
    if (!*listener) return make_error(failed, where);
  }
  if (::getsockname(listener->get(), reinterpret_cast<sockaddr*>(&address), &address_size) != 0)
    return make_error(std::string("getsockname: ") + std::strerror(errno), where);
  port = ntohs(family == AF_INET ? reinterpret_cast<sockaddr_in*>(&address)->sin_port
                                 : reinterpret_cast<sockaddr_in6*>(&address)->sin6_port);
  return listener;
}

}  // namespace

Expected<std::unique_ptr<OtlpReceiver>> OtlpReceiver::start(ReceiverOptions options) {
  std::unique_ptr<OtlpReceiver> receiver(new OtlpReceiver(std::move(options)));
  const ReceiverOptions& o = receiver->options_;
  const std::string where = "OTLP receiver on " + o.host + ":" + std::to_string(o.port);
  int family = AF_INET;
  auto bound = listen_for(o, family, receiver->port_);
  if (!bound) return bound.error();
  UniqueFd listener = std::move(*bound);

  auto server = std::make_unique<Server>();
  server->owner = receiver.get();
  const ReceiverLimits& limits = o.limits;
  unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_USE_ITC;
  if (family == AF_INET6) flags |= MHD_USE_IPv6;
  int listen_fd = listener.get();
  server->look_at_listen_drops();  // what the kernel counted before (none: a new socket)
  server->daemon = MHD_start_daemon(
      flags, 0, nullptr, nullptr, &Server::on_request, server.get(),                               //
      MHD_OPTION_LISTEN_SOCKET, listen_fd,                                                         //
      MHD_OPTION_CONNECTION_MEMORY_LIMIT, static_cast<std::size_t>(limits.max_header_bytes),       //
      MHD_OPTION_CONNECTION_LIMIT, static_cast<unsigned>(limits.max_connections),                  //
      MHD_OPTION_CONNECTION_TIMEOUT, static_cast<unsigned>(std::max<long long>(1, limits.idle_timeout.count())),
      MHD_OPTION_NOTIFY_COMPLETED, &Server::on_completed, server.get(),                            //
      MHD_OPTION_NOTIFY_CONNECTION, &Server::on_connection, server.get(),                          //
      MHD_OPTION_END);
  if (!server->daemon) return make_error("libmicrohttpd could not start", where);
  server->listen_fd = listener.release();  // MHD closes it in MHD_stop_daemon
  server->watcher = std::thread([raw = server.get()] { raw->watch_deadlines(); });
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
      count_loss_locked(Loss::Rejected, 1);
    } else {
      ++counters_.accepted;
      counters_.spans += spans.size();
    }
    bool keep = stored_bytes_ + request.decoded_bytes <= options_.limits.max_stored_bytes;
    if (keep && !spans.empty()) stored_bytes_ += request.decoded_bytes;
    for (auto& span : spans) {
      if (!keep || spans_.size() >= options_.limits.max_stored_spans) {
        ++counters_.spans_not_kept;
        count_loss_locked(Loss::NotKept, 1);
        continue;
      }
      span.request_index = request.index;
      span.exporter_pid = request.exporter_pid;
      span.received_at = request.received_at;
      span.received_at_system = request.received_at_system;
      spans_.push_back(std::move(span));
    }
    if (requests_.size() < options_.limits.max_stored_requests) requests_.push_back(std::move(request));
  }
  arrived_.notify_all();
}

void OtlpReceiver::count_connection_cut() {
  std::lock_guard lock(mutex_);
  ++counters_.connections_cut;
}

void OtlpReceiver::count_foreign_connection(const std::string& who, bool closed) {
  std::lock_guard lock(mutex_);
  ++counters_.foreign_connections;
  if (closed) ++counters_.foreign_connections_closed;
  auto& named = counters_.foreign_peers;
  if (named.size() < ReceiverCounters::kForeignPeersNamed && std::find(named.begin(), named.end(), who) == named.end())
    named.push_back(who);
}

void OtlpReceiver::count_loss(Loss kind, std::uint64_t n) {
  std::lock_guard lock(mutex_);
  count_loss_locked(kind, n);
}

void OtlpReceiver::count_loss_locked(Loss kind, std::uint64_t n) {
  ExportLosses& l = counters_.losses;
  switch (kind) {
    case Loss::Abandoned: l.abandoned += n; break;
    case Loss::CutShort: l.cut_short += n; break;
    case Loss::Cut: l.cut += n; break;
    case Loss::Rejected: l.rejected += n; break;
    case Loss::NotKept: l.not_kept += n; break;
    case Loss::ListenDrops: l.listen_drops += n; break;
  }
  l.last_at = std::chrono::steady_clock::now();
  l.last_at_system = std::chrono::system_clock::now();
}

void OtlpReceiver::count_abandoned_connection() {
  std::lock_guard lock(mutex_);
  ++counters_.connections_abandoned;
}

void OtlpReceiver::count_foreign_export(bool carried_token) {
  std::lock_guard lock(mutex_);
  ++(carried_token ? counters_.exports_by_token : counters_.foreign_exports);
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
  stored_bytes_ = 0;
}

}  // namespace tracecorr::otlp

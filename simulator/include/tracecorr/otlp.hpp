// An OTLP/HTTP trace receiver: what an agent under test exports its spans to.
//
// The receiver answers like an OpenTelemetry collector (POST /v1/traces,
// binary protobuf or JSON, optionally gzip-compressed) and decodes every export
// into a model that does not depend on protobuf. Attribute values keep their
// OTLP type exactly: a judge needs to tell a string-array from a string, an
// int-array or a kvlist.
//
// Everything received is hostile, and any local user can connect: the request
// line and headers, connections, the time one request may take, body size,
// decompressed size, bytes in flight and stored, span count, attribute count,
// value length and nesting are all bounded (ReceiverLimits), and a rejected
// export is kept as evidence (ReceivedRequest::problems) rather than dropped
// silently.
#pragma once

#include <sys/socket.h>
#include <sys/types.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "tracecorr/error.hpp"
#include "tracecorr/ids.hpp"

namespace tracecorr::otlp {

struct KeyValue;

// An OTLP AnyValue. `Empty` is an AnyValue with no member set (allowed by OTLP,
// and distinct from a missing attribute).
struct AttributeValue {
  enum class Type { Empty, String, Bool, Int, Double, Bytes, Array, KvList };
  struct Empty {
    bool operator==(const Empty&) const = default;
  };
  using Bytes = std::vector<std::uint8_t>;
  using Array = std::vector<AttributeValue>;
  using KvList = std::vector<KeyValue>;  // order and duplicate keys kept as sent

  std::variant<Empty, std::string, bool, std::int64_t, double, Bytes, Array, KvList> value;

  // Defined below KeyValue: constructing the variant checks every
  // alternative, and vector<KeyValue> needs KeyValue complete for that
  // (clang with libstdc++ 12 insists).
  AttributeValue() = default;
  AttributeValue(std::string s);
  AttributeValue(const char* s);
  AttributeValue(bool b);
  AttributeValue(std::int64_t i);
  AttributeValue(double d);
  AttributeValue(Bytes b);
  AttributeValue(Array a);
  AttributeValue(KvList kv);

  Type type() const { return static_cast<Type>(value.index()); }
  const std::string* as_string() const { return std::get_if<std::string>(&value); }
  const Array* as_array() const { return std::get_if<Array>(&value); }
  // True for an array whose elements are all strings (an empty array is one:
  // OTLP cannot say what its element type would have been).
  bool is_string_array() const;
  // The strings of a string-array; nullopt for anything else.
  std::optional<std::vector<std::string>> string_array() const;
  // "string", "int", "string-array", "int-array", "mixed-array", "empty-array",
  // "kvlist", "empty", ...: what a report says the attribute's type was.
  std::string type_name() const;
  // A short, bounded rendering for reports: ["a", "b"], 42, true, 0x0102.
  std::string to_display(std::size_t max_chars = 200) const;

  bool operator==(const AttributeValue& other) const;
};

struct KeyValue {
  std::string key;
  AttributeValue value;
  bool operator==(const KeyValue&) const = default;
};

inline AttributeValue::AttributeValue(std::string s) : value(std::move(s)) {}
inline AttributeValue::AttributeValue(const char* s) : value(std::string(s)) {}
inline AttributeValue::AttributeValue(bool b) : value(b) {}
inline AttributeValue::AttributeValue(std::int64_t i) : value(i) {}
inline AttributeValue::AttributeValue(double d) : value(d) {}
inline AttributeValue::AttributeValue(Bytes b) : value(std::move(b)) {}
inline AttributeValue::AttributeValue(Array a) : value(std::move(a)) {}
inline AttributeValue::AttributeValue(KvList kv) : value(std::move(kv)) {}

std::string_view to_string(AttributeValue::Type type);

// name -> value. Duplicate keys in one export keep the first value; the
// duplicate is recorded as a problem of the request.
using Attributes = std::map<std::string, AttributeValue, std::less<>>;

enum class SpanKind : std::int32_t { Unspecified = 0, Internal = 1, Server = 2, Client = 3, Producer = 4, Consumer = 5 };
std::string to_string(SpanKind kind);  // "SPAN_KIND_SERVER", or "SPAN_KIND(42)" for values OTLP does not define

// The instrumentation scope of a scopeSpans entry.
struct Scope {
  std::string name;
  std::string version;
  bool operator==(const Scope&) const = default;
};

struct ReceivedSpan {
  TraceId trace_id{};
  SpanId span_id{};
  std::optional<SpanId> parent_span_id;  // nullopt: a root span (empty on the wire)
  std::string trace_state;
  std::string name;
  SpanKind kind = SpanKind::Unspecified;
  std::uint64_t start_unix_nano = 0;
  std::uint64_t end_unix_nano = 0;
  std::uint32_t flags = 0;  // W3C trace flags in bits 0-7, OTLP "is remote" bits 8-9
  Attributes attributes;
  std::uint32_t dropped_attributes_count = 0;
  std::int32_t status_code = 0;
  std::string status_message;
  // Resource and scope are shared by every span of their resourceSpans /
  // scopeSpans entry: stored once per export, never copied per span (a 1 MB
  // resource attribute on 3000 spans stays 1 MB). Null means empty.
  std::shared_ptr<const Attributes> resource;
  std::shared_ptr<const Scope> scope;
  // Arrival of the export that carried the span.
  std::chrono::steady_clock::time_point received_at{};
  std::chrono::system_clock::time_point received_at_system{};
  std::size_t request_index = 0;  // ReceivedRequest::index of that export
  pid_t exporter_pid = 0;         // ReceivedRequest::exporter_pid of that export

  bool sampled() const { return flags & 0x01; }
  const AttributeValue* attribute(std::string_view key) const;
  const AttributeValue* resource_attribute(std::string_view key) const;
  const Attributes& resource_attributes() const;
  const std::string& scope_name() const;
  const std::string& scope_version() const;
  // For spans built by hand (tests, encoders' callers): each call makes a new
  // shared object; decoders share one per resourceSpans / scopeSpans entry.
  void set_resource_attributes(Attributes attributes) {
    resource = std::make_shared<const Attributes>(std::move(attributes));
  }
  void set_scope(std::string name, std::string version = {}) {
    scope = std::make_shared<const Scope>(Scope{std::move(name), std::move(version)});
  }
};

enum class Encoding { Protobuf, Json };

// Why an export was turned away; one counter each.
enum class RejectReason {
  UnsupportedContentType,      // 415: neither application/x-protobuf nor application/json
  UnsupportedContentEncoding,  // 415: not identity, gzip or deflate
  BodyTooLarge,                // 413: Content-Length or bytes read over ReceiverLimits::max_body_bytes
  DecompressedTooLarge,        // 413: decoded body over ReceiverLimits::max_decoded_bytes (gzip bomb)
  MalformedBody,               // 400: not a parseable ExportTraceServiceRequest (protobuf, JSON, gzip)
  InvalidSpan,                 // 400: parsed, but a span breaks OTLP (id length, missing id)
  LimitExceeded,               // 400: too many spans or attributes, value too long, nesting too deep
  Busy,                        // 503: bodies in flight over ReceiverLimits::max_inflight_bytes (retry later)
};
std::string_view to_string(RejectReason reason);

// One problem found while decoding an export. `where` is a path into the
// request ("resourceSpans[0].scopeSpans[1].spans[2].spanId").
struct DecodeProblem {
  std::string where;
  std::string what;
  bool fatal = true;  // fatal problems reject the whole export (400)
  RejectReason reason = RejectReason::MalformedBody;  // for fatal problems

  std::string message() const { return where.empty() ? what : where + ": " + what; }
};

// Every POST /v1/traces, accepted or not: a malformed export is evidence too.
struct ReceivedRequest {
  std::size_t index = 0;
  std::chrono::steady_clock::time_point received_at{};
  std::chrono::system_clock::time_point received_at_system{};
  std::string content_type;
  std::string content_encoding;
  std::optional<Encoding> encoding;
  std::size_t decoded_bytes = 0;         // body size after Content-Encoding was undone
  std::string body_prefix;               // the first kBodyPrefixBytes decoded bytes, for evidence
  int http_status = 0;
  std::optional<RejectReason> rejected;  // nullopt: accepted
  std::string response_message;          // what the 4xx answer said
  std::vector<DecodeProblem> problems;   // bounded: see kMaxProblemsKept
  std::size_t span_count = 0;
  // The process that held the connection's other end, as check_peer found it
  // (PeerVerdict::pid); 0 when unknown or no check_peer is set.
  pid_t exporter_pid = 0;

  static constexpr std::size_t kBodyPrefixBytes = 256;
  static constexpr std::size_t kMaxProblemsKept = 64;
};

struct ReceiverLimits {
  // HTTP, enforced by libmicrohttpd before any handler runs. The request line
  // and every header line of a request share one buffer of this size per
  // connection: a longer request line or more headers are answered 414/431.
  std::size_t max_header_bytes = 32u << 10;
  std::size_t max_connections = 512;  // open at once; beyond, a new connection is closed at accept
  std::chrono::seconds idle_timeout{3};  // a connection that sends nothing this long is closed
  // From a connection's first byte (or its previous response) to the end of
  // the next response: a client that trickles its request is cut off here.
  std::chrono::milliseconds max_request_time{10'000};
  // Bodies being received, all connections together (each is at most
  // max_body_bytes); an export that would go over is answered 503.
  std::size_t max_inflight_bytes = 64u << 20;
  std::size_t max_body_bytes = 16u << 20;     // as sent (before gzip is undone)
  std::size_t max_decoded_bytes = 64u << 20;  // after gzip: the gzip-bomb bound
  std::size_t max_spans_per_request = 100'000;
  // Every field and value of one export (protobuf fields counted on the wire,
  // JSON values while tokenising), checked before the decoder allocates: two
  // bytes on the wire can be a few hundred in memory.
  std::size_t max_fields_per_request = 1'000'000;
  std::size_t max_attributes_per_span = 4096;    // also per resource, per kvlist
  std::size_t max_value_bytes = 1u << 20;        // one string or bytes value
  std::size_t max_array_elements = 65'536;       // one array value
  std::size_t max_nesting_depth = 32;            // arrays and kvlists inside each other
  std::size_t max_stored_spans = 1'000'000;      // beyond: spans are counted, not kept
  std::size_t max_stored_requests = 100'000;
  // Decoded bytes of the exports whose spans are kept; beyond, spans are
  // counted, not kept (like max_stored_spans).
  std::size_t max_stored_bytes = 128u << 20;
};

// The decoded content of one export (what the receiver stores per request).
struct DecodedExport {
  std::vector<ReceivedSpan> spans;
  std::vector<DecodeProblem> problems;  // at most ReceivedRequest::kMaxProblemsKept
  std::size_t problems_not_kept = 0;
  std::optional<DecodeProblem> first_fatal;  // kept even when `problems` is full
  bool ok() const { return !first_fatal.has_value(); }
};

// Decoders, usable without a server (tests, offline captures). They never
// throw; a body they cannot read comes back with a fatal problem.
DecodedExport decode_protobuf(std::string_view body, const ReceiverLimits& limits = {});
DecodedExport decode_json(std::string_view body, const ReceiverLimits& limits = {});

// Encoders for the other direction (tests, an exporting fixture): spans are
// grouped by their resource attributes and scope.
std::string encode_protobuf(const std::vector<ReceivedSpan>& spans);
std::string encode_json(const std::vector<ReceivedSpan>& spans);

// gzip (RFC 1952) with zlib. gunzip stops with an error once the output would
// exceed max_output bytes, so it is safe on hostile input.
std::string gzip_compress(std::string_view data);
Expected<std::string> gunzip(std::string_view data, std::size_t max_output);
// HTTP "deflate": a zlib stream (RFC 1950), bounded the same way.
Expected<std::string> inflate_zlib(std::string_view data, std::size_t max_output);

// Exports of the judged tree that the receiver can show did not arrive whole:
// the spans in them are missing from spans() whatever the agent did (an
// exporter whose blocking call was interrupted, or that gave up waiting on a
// busy receiver, closes its connection and drops the batch). A judge that
// takes a span's absence for "the agent never exported it" may do so only for
// spans that ended after the last of these (last_at): an export lost at T was
// begun before T, so it held only spans that had ended by then.
struct ExportLosses {
  std::uint64_t abandoned = 0;     // connections closed by their exporter before the receiver accepted them
  std::uint64_t cut_short = 0;     // the tree's requests (or connections) that ended before a whole request was answered
  std::uint64_t cut = 0;           // the tree's connections cut at ReceiverLimits::max_request_time
  std::uint64_t rejected = 0;      // the tree's exports answered 4xx/5xx: their spans were not recorded
  std::uint64_t not_kept = 0;      // spans received over the storage bounds
  std::uint64_t listen_drops = 0;  // connection attempts the kernel dropped at the receiver's full accept queue
  std::optional<std::chrono::steady_clock::time_point> last_at;  // when the receiver saw the latest
  std::optional<std::chrono::system_clock::time_point> last_at_system;
  bool any() const { return last_at.has_value(); }
  std::uint64_t total() const { return abandoned + cut_short + cut + rejected + not_kept + listen_drops; }
  // Whether an export lost after `t` could have carried a span still active at `t`.
  bool lost_after(std::chrono::steady_clock::time_point t) const { return last_at && *last_at > t; }
  bool lost_after(std::chrono::system_clock::time_point t) const { return last_at_system && *last_at_system > t; }
  // "4 connections closed by the exporter before they were accepted, 1 request cut short"
  std::string describe() const;
};

struct ReceiverCounters {
  std::uint64_t requests = 0;  // every POST /v1/traces of the target's (foreign ones are counted below)
  std::uint64_t accepted = 0;
  std::uint64_t spans = 0;          // spans in accepted exports
  std::uint64_t spans_not_kept = 0; // over ReceiverLimits::max_stored_spans or max_stored_bytes
  std::uint64_t connections_cut = 0;  // closed at ReceiverLimits::max_request_time
  std::map<RejectReason, std::uint64_t> rejected;
  std::uint64_t rejected_total() const;
  // Connections whose peer is not a process of the judged tree (ReceiverOptions::check_peer).
  std::uint64_t foreign_connections = 0;
  std::uint64_t foreign_connections_closed = 0;  // of those, closed at once: max_foreign_connections were open
  std::uint64_t foreign_exports = 0;    // their POSTs, answered 403 and neither recorded nor decoded
  std::uint64_t exports_by_token = 0;   // exports from outside the tree that carried the session token
  std::uint64_t connections_abandoned = 0;  // peers gone before their connection was accepted (PeerVerdict::gone)
  std::vector<std::string> foreign_peers;  // who they were, the first kForeignPeersNamed distinct
  static constexpr std::size_t kForeignPeersNamed = 4;
  ExportLosses losses;
  // Something outside the judged tree connected: export timing may be its
  // doing. Every foreign export, well-formed or not, and every foreign flood
  // comes on a foreign connection, so this is all the receiver can tell of an
  // attack. Never counted here: what the judged tree itself sends (a flood,
  // malformed or oversized exports, connections it lets time out: its own
  // doing, judged by the MSG rules and the timing rules), and connections whose
  // peer was gone before the accept (connections_abandoned: nobody's to name;
  // a forger that closes before the accept sends nothing that is read).
  bool attacked() const { return foreign_connections > 0; }
  // "37 connections (12 closed at once) and 25 exports from outside the judged process tree, from pid 4242 (forger) uid 1000"
  std::string describe_foreign() const;
};

// The process at the other end of one connection, as ReceiverOptions::check_peer judges it.
struct PeerVerdict {
  bool of_target = false;  // a process of the judged tree: its exports count
  // Nobody holds the peer's socket any more (it closed it, or exited, before
  // the connection was accepted: an exporter that gave up waiting): nothing
  // can read an answer, and nothing says whose it was. Closed at once and
  // counted apart (ReceiverCounters::connections_abandoned), not as an attack.
  bool gone = false;
  std::string who;         // for the report: "pid 4242 (forger) uid 1000"
  pid_t pid = 0;           // the process holding the peer's socket, when known (0: not)
};
// Asked once per connection, on the receiver's thread, with the accepted
// socket's own (local) and peer addresses.
using PeerCheck = std::function<PeerVerdict(const sockaddr_storage& local, const sockaddr_storage& peer)>;

// The header an exporter sends the session token in (OTEL_EXPORTER_OTLP_HEADERS).
inline constexpr char kSessionTokenHeader[] = "x-tracecorr-session";
// Another OTLP signal served beside /v1/traces, on the same port and within
// the same bounds (request line and headers, connections, request time, body,
// bytes in flight, gzip): OTLP profiles at /v1development/profiles
// (profiles/http_route.hpp), as a collector serves every signal on 4318.
class ExportRoute {
 public:
  virtual ~ExportRoute() = default;
  virtual std::string path() const = 0;  // "/v1development/profiles"
  // Called once per POST to path(), on the receiver's thread, before it
  // answers. `body`: the export, whole, its Content-Encoding undone, within
  // the limits; null when the receiver turned it away already
  // (request.rejected says why). To refuse a body, set request.rejected,
  // http_status (4xx) and response_message; left alone, it is answered 200.
  virtual void handle(ReceivedRequest& request, const std::string_view* body) = 0;
};

struct ReceiverOptions {
  std::string host = "127.0.0.1";
  std::uint16_t port = 0;  // 0: an ephemeral port
  ReceiverLimits limits;
  // Only the target's spans count (issue 29): any local user can reach the
  // port. Unset, every connection is taken for the target's. Set, a connection
  // whose peer is not the target's is foreign: at most max_foreign_connections
  // of them are open at once (beyond, closed at accept, so nobody outside the
  // tree can hold the receiver's connections), and each of their exports is
  // answered 403 and counted, never recorded, unless it carries
  // `session_token` in kSessionTokenHeader (launch mode: the agent was handed
  // it; an exporter that left the tree still counts).
  PeerCheck check_peer;
  std::string session_token;
  std::size_t max_foreign_connections = 8;
  // Listen inside the network namespace of this process (0: tracecorr's own):
  // an agent in a container of its own network exports to its own loopback.
  pid_t network_namespace_of = 0;
  std::vector<std::shared_ptr<ExportRoute>> routes;  // requests to these paths are theirs, not spans
};

class OtlpReceiver {
 public:
  // Binds, then serves on a background thread. Fails (without throwing) when
  // the address cannot be bound.
  static Expected<std::unique_ptr<OtlpReceiver>> start(ReceiverOptions options = {});
  ~OtlpReceiver();  // stops the server and joins its thread
  OtlpReceiver(const OtlpReceiver&) = delete;
  OtlpReceiver& operator=(const OtlpReceiver&) = delete;

  std::string endpoint() const;  // "http://127.0.0.1:PORT" (OTEL_EXPORTER_OTLP_ENDPOINT)
  std::string traces_url() const { return endpoint() + "/v1/traces"; }
  std::uint16_t port() const { return port_; }
  const ReceiverLimits& limits() const { return options_.limits; }

  // Snapshots (copies), safe to use while exports keep arriving.
  std::vector<ReceivedSpan> spans() const;
  std::vector<ReceivedRequest> requests() const;
  ReceiverCounters counters() const;
  // The first span received with this id.
  std::optional<ReceivedSpan> find_span(const SpanId& span_id) const;

  // Blocks until predicate(spans received so far) holds or the timeout passes;
  // returns whether it held. The predicate runs under the receiver's lock: it
  // must not call back into the receiver.
  bool wait_for(const std::function<bool(const std::vector<ReceivedSpan>&)>& predicate,
                std::chrono::milliseconds timeout) const;
  // Forgets received spans, requests and counters. Request indices keep
  // increasing, so an index is never reused.
  void clear();

 private:
  struct Server;
  explicit OtlpReceiver(ReceiverOptions options);
  void record(ReceivedRequest request, std::vector<ReceivedSpan> spans);
  void count_connection_cut();
  void count_foreign_connection(const std::string& who, bool closed);
  void count_abandoned_connection();
  void count_foreign_export(bool carried_token);
  enum class Loss { Abandoned, CutShort, Cut, Rejected, NotKept, ListenDrops };
  void count_loss(Loss kind, std::uint64_t n = 1);
  void count_loss_locked(Loss kind, std::uint64_t n);  // with mutex_ held

  ReceiverOptions options_;
  std::uint16_t port_ = 0;
  mutable std::mutex mutex_;
  mutable std::condition_variable arrived_;
  std::vector<ReceivedSpan> spans_;
  std::vector<ReceivedRequest> requests_;
  ReceiverCounters counters_;
  std::size_t next_request_index_ = 0;
  std::size_t stored_bytes_ = 0;
  std::unique_ptr<Server> server_;  // last: destroyed (stopped, joined) first
};

}  // namespace tracecorr::otlp

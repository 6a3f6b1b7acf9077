#include "elastic_v1/wire.hpp"

#include <algorithm>
#include <cstring>

namespace tracecorr::elastic_v1 {
namespace {

template <typename T>
T load(const std::uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof v);  // native byte order, possibly unaligned
  return v;
}

template <typename T>
void store(std::uint8_t* p, T v) {
  std::memcpy(p, &v, sizeof v);
}

template <typename T>
void append(std::vector<std::uint8_t>& out, T v) {
  std::uint8_t b[sizeof v];
  store(b, v);
  out.insert(out.end(), b, b + sizeof v);
}

void append_str(std::vector<std::uint8_t>& out, const std::string& s) {
  append<std::uint32_t>(out, static_cast<std::uint32_t>(s.size()));
  out.insert(out.end(), s.begin(), s.end());
}

template <std::size_t N>
void copy_id(std::array<std::uint8_t, N>& id, const std::uint8_t* p) {
  std::memcpy(id.data(), p, N);
}

std::string at(std::uint64_t offset) { return "offset " + std::to_string(offset); }

// Reads one utf8-str field: uint32 length, then the bytes. Bounded by `max`.
Expected<std::string> read_str(const ByteSource& src, std::uint64_t& offset, const char* field, std::size_t max,
                               const char* requirement) {
  std::uint8_t len_bytes[4];
  if (auto s = src(offset, len_bytes); !s) return s.error().within(std::string(field) + " length at " + at(offset));
  auto len = load<std::uint32_t>(len_bytes);
  if (len > max)
    return make_error("string length " + std::to_string(len) + " exceeds the " + std::to_string(max) + "-byte bound",
                      std::string(field) + " at " + at(offset), requirement);
  std::string value(len, '\0');
  if (len) {
    auto* p = reinterpret_cast<std::uint8_t*>(value.data());
    if (auto s = src(offset + 4, {p, len}); !s)
      return s.error().within(std::string(field) + " bytes at " + at(offset + 4) + " (length " + std::to_string(len) + ")");
  }
  if (auto bad = utf8_invalid_at(value))
    return make_error("invalid UTF-8 at byte " + std::to_string(*bad), std::string(field) + " at " + at(offset),
                      requirement);
  offset += 4 + len;
  return value;
}

}  // namespace

// ---- per-thread record -------------------------------------------------------
const RecordLayout& tls_record_layout() {
  static const RecordLayout layout = [] {
    RecordLayout l;
    l.name = std::string(elastic_v1::spec::kTlsSymbol);
    l.length = FixedSize{elastic_v1::spec::kTlsRecordSize};
    l.max_size = elastic_v1::spec::kTlsRecordSize;
    l.valid_offset = elastic_v1::spec::kTlsValidOffset;
    l.valid_values = ByteValues::any_nonzero();  // spec/elastic-v1.md: "valid != 0"
    l.presence_offset = elastic_v1::spec::kTlsTracePresentOffset;
    // Names as the spec's prose spells them; reports name changed bytes by them (TLS-04).
    l.fields = {
        {"minor", elastic_v1::spec::kTlsLayoutMinorVersionOffset, elastic_v1::spec::kTlsLayoutMinorVersionSize},
        {"valid", elastic_v1::spec::kTlsValidOffset, elastic_v1::spec::kTlsValidSize},
        {"trace-present", elastic_v1::spec::kTlsTracePresentOffset, elastic_v1::spec::kTlsTracePresentSize},
        {"trace-flags", elastic_v1::spec::kTlsTraceFlagsOffset, elastic_v1::spec::kTlsTraceFlagsSize},
        {"trace-id", elastic_v1::spec::kTlsTraceIdOffset, elastic_v1::spec::kTlsTraceIdSize},
        {"span-id", elastic_v1::spec::kTlsSpanIdOffset, elastic_v1::spec::kTlsSpanIdSize},
        {"transaction-id", elastic_v1::spec::kTlsTransactionIdOffset, elastic_v1::spec::kTlsTransactionIdSize},
    };
    l.indirection = PointerInTlsSlot{};
    return l;
  }();
  return layout;
}

TlsRecordBytes encode_tls_record(const TlsRecord& r) {
  TlsRecordBytes b{};
  store(b.data() + elastic_v1::spec::kTlsLayoutMinorVersionOffset, r.minor);
  b[elastic_v1::spec::kTlsValidOffset] = r.valid;
  b[elastic_v1::spec::kTlsTracePresentOffset] = r.trace_present;
  b[elastic_v1::spec::kTlsTraceFlagsOffset] = r.trace_flags;
  std::memcpy(b.data() + elastic_v1::spec::kTlsTraceIdOffset, r.trace_id.data(), elastic_v1::spec::kTlsTraceIdSize);
  std::memcpy(b.data() + elastic_v1::spec::kTlsSpanIdOffset, r.span_id.data(), elastic_v1::spec::kTlsSpanIdSize);
  std::memcpy(b.data() + elastic_v1::spec::kTlsTransactionIdOffset, r.transaction_id.data(), elastic_v1::spec::kTlsTransactionIdSize);
  return b;
}

Expected<TlsRecord> decode_tls_record(std::span<const std::uint8_t> b) {
  if (b.size() < elastic_v1::spec::kTlsRecordSize)
    return make_error("record is " + std::to_string(b.size()) + " bytes, the layout needs " +
                          std::to_string(elastic_v1::spec::kTlsRecordSize),
                      "thread record", "TLS-01");
  TlsRecord r;
  r.minor = load<std::uint16_t>(b.data() + elastic_v1::spec::kTlsLayoutMinorVersionOffset);
  r.valid = b[elastic_v1::spec::kTlsValidOffset];
  r.trace_present = b[elastic_v1::spec::kTlsTracePresentOffset];
  r.trace_flags = b[elastic_v1::spec::kTlsTraceFlagsOffset];
  copy_id(r.trace_id, b.data() + elastic_v1::spec::kTlsTraceIdOffset);
  copy_id(r.span_id, b.data() + elastic_v1::spec::kTlsSpanIdOffset);
  copy_id(r.transaction_id, b.data() + elastic_v1::spec::kTlsTransactionIdOffset);
  return r;
}

// ---- process storage ----------------------------------------------------------
std::vector<std::uint8_t> encode_process_storage(const ProcessStorage& s) {
  std::vector<std::uint8_t> out;
  append<std::uint16_t>(out, s.minor);
  append_str(out, s.service_name);
  append_str(out, s.service_environment);
  append_str(out, s.socket_file_path);
  return out;
}

Expected<ProcessStorage> decode_process_storage(const ByteSource& src) {
  ProcessStorage s;
  std::uint8_t minor[2];
  if (auto st = src(0, minor); !st) return st.error().within("layout_minor_version at offset 0");
  s.minor = load<std::uint16_t>(minor);
  std::uint64_t offset = 2;
  auto name = read_str(src, offset, "service_name", elastic_v1::spec::kUtf8StrMaxLengthRead, "PROC-03");
  if (!name) return name.error();
  auto env = read_str(src, offset, "service_environment", elastic_v1::spec::kUtf8StrMaxLengthRead, "PROC-03");
  if (!env) return env.error();
  auto path = read_str(src, offset, "socket_file_path", elastic_v1::spec::kProcessStorageSocketFilePathMaxLength, "PROC-03");
  if (!path) return path.error();
  s.service_name = std::move(*name);
  s.service_environment = std::move(*env);
  s.socket_file_path = std::move(*path);
  s.encoded_size = offset;
  return s;
}

// ---- messages -----------------------------------------------------------------
namespace {
void append_header(std::vector<std::uint8_t>& out, std::uint16_t type, std::uint16_t minor) {
  append<std::uint16_t>(out, type);
  append<std::uint16_t>(out, minor);
}
}  // namespace

std::vector<std::uint8_t> encode(const Registration& m) {
  std::vector<std::uint8_t> out;
  append_header(out, elastic_v1::spec::kMsgRegistrationType, m.minor);
  append<std::uint32_t>(out, m.samples_delay_ms);
  append_str(out, m.host_id);
  out.insert(out.end(), m.trailing.begin(), m.trailing.end());
  return out;
}

std::vector<std::uint8_t> encode(const Correlation& m) {
  std::vector<std::uint8_t> out;
  append_header(out, elastic_v1::spec::kMsgCorrelationType, m.minor);
  out.insert(out.end(), m.trace_id.begin(), m.trace_id.end());
  out.insert(out.end(), m.transaction_id.begin(), m.transaction_id.end());
  out.insert(out.end(), m.stack_trace_id.begin(), m.stack_trace_id.end());
  append<std::uint16_t>(out, m.count);
  out.insert(out.end(), m.trailing.begin(), m.trailing.end());
  return out;
}

std::vector<std::uint8_t> encode(const UnknownMessage& m) {
  std::vector<std::uint8_t> out;
  append_header(out, m.type, m.minor);
  out.insert(out.end(), m.payload.begin(), m.payload.end());
  return out;
}

std::vector<std::uint8_t> encode(const Message& m) {
  return std::visit([](const auto& v) { return encode(v); }, m);
}

Expected<Message> decode_message(std::span<const std::uint8_t> d) {
  if (d.size() < elastic_v1::spec::kMessageHeaderSize)
    return make_error("datagram is " + std::to_string(d.size()) + " bytes, shorter than the 4-byte header",
                      "message header", "MSG-04");
  auto type = load<std::uint16_t>(d.data() + elastic_v1::spec::kHeaderMessageTypeOffset);
  auto minor = load<std::uint16_t>(d.data() + elastic_v1::spec::kHeaderMinorVersionOffset);
  auto unknown = [&]() -> Message {
    return UnknownMessage{type, minor, {d.begin() + elastic_v1::spec::kMessageHeaderSize, d.end()}};
  };
  if (minor == 0) return unknown();

  if (type == elastic_v1::spec::kMsgCorrelationType) {
    if (d.size() < elastic_v1::spec::kMsgCorrelationFixedSize)
      return make_error("correlation message is " + std::to_string(d.size()) + " bytes, needs " +
                            std::to_string(elastic_v1::spec::kMsgCorrelationFixedSize),
                        "correlation message", "MSG-04");
    Correlation m;
    m.minor = minor;
    copy_id(m.trace_id, d.data() + elastic_v1::spec::kMsgCorrelationTraceIdOffset);
    copy_id(m.transaction_id, d.data() + elastic_v1::spec::kMsgCorrelationTransactionIdOffset);
    copy_id(m.stack_trace_id, d.data() + elastic_v1::spec::kMsgCorrelationStackTraceIdOffset);
    m.count = load<std::uint16_t>(d.data() + elastic_v1::spec::kMsgCorrelationCountOffset);
    m.trailing.assign(d.begin() + elastic_v1::spec::kMsgCorrelationFixedSize, d.end());
    return Message{std::move(m)};
  }
  if (type == elastic_v1::spec::kMsgRegistrationType) {
    if (d.size() < elastic_v1::spec::kMsgRegistrationFixedSize)
      return make_error("registration message is " + std::to_string(d.size()) + " bytes, needs at least " +
                            std::to_string(elastic_v1::spec::kMsgRegistrationFixedSize),
                        "registration message", "MSG-04");
    Registration m;
    m.minor = minor;
    m.samples_delay_ms = load<std::uint32_t>(d.data() + elastic_v1::spec::kMsgRegistrationSamplesDelayMsOffset);
    auto len = load<std::uint32_t>(d.data() + elastic_v1::spec::kMsgRegistrationHostIdOffset);
    std::size_t avail = d.size() - elastic_v1::spec::kMsgRegistrationFixedSize;
    if (len > avail)
      return make_error("host_id length " + std::to_string(len) + " exceeds the " + std::to_string(avail) +
                            " bytes left in the datagram",
                        "registration message host_id at offset 8", "MSG-04");
    auto* p = reinterpret_cast<const char*>(d.data() + elastic_v1::spec::kMsgRegistrationFixedSize);
    m.host_id.assign(p, len);
    m.trailing.assign(d.begin() + elastic_v1::spec::kMsgRegistrationFixedSize + len, d.end());
    return Message{std::move(m)};
  }
  return unknown();
}

std::size_t minimum_size(const Message& m) {
  if (auto* r = std::get_if<Registration>(&m)) return elastic_v1::spec::kMsgRegistrationFixedSize + r->host_id.size();
  if (std::holds_alternative<Correlation>(m)) return elastic_v1::spec::kMsgCorrelationFixedSize;
  return elastic_v1::spec::kMessageHeaderSize + std::get<UnknownMessage>(m).payload.size();
}

std::string describe(const Message& m) {
  if (auto* r = std::get_if<Registration>(&m))
    return "registration minor=" + std::to_string(r->minor) + " samples_delay_ms=" +
           std::to_string(r->samples_delay_ms) + " host_id=\"" + r->host_id + "\"" +
           (r->trailing.empty() ? "" : " trailing=" + std::to_string(r->trailing.size()) + "B");
  if (auto* c = std::get_if<Correlation>(&m))
    return "correlation minor=" + std::to_string(c->minor) + " trace_id=" + to_hex(c->trace_id) +
           " transaction_id=" + to_hex(c->transaction_id) + " stack_trace_id=" + to_hex(c->stack_trace_id) +
           " count=" + std::to_string(c->count) +
           (c->trailing.empty() ? "" : " trailing=" + std::to_string(c->trailing.size()) + "B");
  auto& u = std::get<UnknownMessage>(m);
  return "unknown type=" + std::to_string(u.type) + " minor=" + std::to_string(u.minor) + " payload=" +
         std::to_string(u.payload.size()) + "B";
}

}  // namespace tracecorr::elastic_v1

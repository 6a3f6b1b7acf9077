// Encoders and decoders for everything that crosses the boundary between the
// agent and the profiler: the process storage, the per-thread record and the
// datagram messages. Sizes and offsets come from the generated registry.
//
// Decoders bound every length and name the field and offset that was wrong.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include "tracecorr/error.hpp"
#include "tracecorr/ids.hpp"
#include "tracecorr/memory.hpp"
#include "tracecorr/record_layout.hpp"
#include "elastic_v1/registry.hpp"

namespace tracecorr::elastic_v1 {

// ---- per-thread record -------------------------------------------------------
struct TlsRecord {
  std::uint16_t minor = elastic_v1::spec::kTlsRecordMinor;
  std::uint8_t valid = 0;
  std::uint8_t trace_present = 0;
  std::uint8_t trace_flags = 0;
  TraceId trace_id{};
  SpanId span_id{};
  SpanId transaction_id{};
  bool operator==(const TlsRecord&) const = default;
};
using TlsRecordBytes = std::array<std::uint8_t, elastic_v1::spec::kTlsRecordSize>;

// The record as data for the engine (samplers, readers, watchers): 37 bytes,
// valid byte accepted when non-zero, trace-present as the presence byte, a
// pointer in a TLS slot. Built from the registry's constants.
const RecordLayout& tls_record_layout();

TlsRecordBytes encode_tls_record(const TlsRecord& r);
// Decodes the layout only; the semantic checks (minor, valid) are the caller's.
Expected<TlsRecord> decode_tls_record(std::span<const std::uint8_t> bytes);

// ---- process storage ----------------------------------------------------------
struct ProcessStorage {
  std::uint16_t minor = elastic_v1::spec::kProcessStorageMinor;
  std::string service_name;
  std::string service_environment;
  std::string socket_file_path;
  std::size_t encoded_size = 0;  // bytes the decoder consumed
  bool operator==(const ProcessStorage&) const = default;
};


std::vector<std::uint8_t> encode_process_storage(const ProcessStorage& s);
// Checks layout, length bounds and UTF-8 (PROC-03). The minor version is
// returned as found; judging it is the caller's (PROC-02).
Expected<ProcessStorage> decode_process_storage(const ByteSource& source);

// ---- messages -----------------------------------------------------------------
struct Registration {
  std::uint16_t minor = elastic_v1::spec::kMsgRegistrationMinor;
  std::uint32_t samples_delay_ms = 0;
  std::string host_id;
  std::vector<std::uint8_t> trailing;  // bytes after the known fields (a later minor)
  bool operator==(const Registration&) const = default;
};

struct Correlation {
  std::uint16_t minor = elastic_v1::spec::kMsgCorrelationMinor;
  TraceId trace_id{};
  SpanId transaction_id{};
  StackTraceId stack_trace_id{};
  std::uint16_t count = 1;
  std::vector<std::uint8_t> trailing;
  bool operator==(const Correlation&) const = default;
};

struct UnknownMessage {
  std::uint16_t type = 0;
  std::uint16_t minor = 0;
  std::vector<std::uint8_t> payload;
  bool operator==(const UnknownMessage&) const = default;
};

using Message = std::variant<Registration, Correlation, UnknownMessage>;

std::vector<std::uint8_t> encode(const Registration& m);
std::vector<std::uint8_t> encode(const Correlation& m);
std::vector<std::uint8_t> encode(const UnknownMessage& m);
std::vector<std::uint8_t> encode(const Message& m);

// Decodes as a conforming agent must: a message shorter than its type and
// version require is an error (MSG-04), trailing bytes are kept (MSG-02, MSG-06),
// minor version 0 of a known type is unknown (MSG-05). The host-id is not
// required to be UTF-8 here: a receiver must survive it either way (MSG-07).
Expected<Message> decode_message(std::span<const std::uint8_t> datagram);

// The smallest datagram that carries every field of `m` (its size without trailing bytes).
std::size_t minimum_size(const Message& m);
std::string describe(const Message& m);  // one line, ids in hex, for reports

}  // namespace tracecorr::elastic_v1

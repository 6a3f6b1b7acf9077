// The record a walk reaches, and the reference data that names its keys
// (spec/otel-nodejs-thread-context.md §3, NJSR-12): OTEP 4947's record,
// unchanged, with this schema's process-context keys.
//
// COPY, flagged for the lead: decode_record, name_attributes and value_text
// restate otel_thread_context/record.cpp's OTEP 4947 decoder (a package may
// not include another package). Both packages need it; it belongs in the
// engine (the redesign of issue 26), after which this file keeps only the
// schema's own parts (reference data, discovery, the record layout).
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tracecorr/discovery.hpp"
#include "tracecorr/error.hpp"
#include "tracecorr/ids.hpp"
#include "tracecorr/otlp.hpp"
#include "tracecorr/process_context.hpp"
#include "tracecorr/record_layout.hpp"

namespace tracecorr::otel_nodejs_thread_context {

// The record as the engine's read_record takes it: a 28-byte header whose u16
// at 26 says how many bytes follow, valid at 24 (only 1 readable), at most
// kRecordMaxBytes read. Its indirection is the walk (walk.hpp's
// context_map_walk), not one pointer.
const RecordLayout& thread_context_record_layout();

// Where the struct is: `otel_thread_ctx_nodejs_v1` in the .dynsym of any
// library the process maps (the addon) or of the executable (NJSR-02).
DiscoveryOptions discovery_options();

struct AttributeEntry {
  std::size_t offset = 0;  // of the entry's key byte in attrs_data
  std::uint8_t key = 0;
  std::vector<std::uint8_t> value;
};

struct ThreadContextRecord {
  TraceId trace_id{};
  SpanId span_id{};
  std::uint8_t valid = 0;
  std::uint8_t trace_flags = 0;
  std::uint16_t attrs_data_size = 0;
  std::vector<AttributeEntry> entries;
  bool entries_complete = true;    // the last entry ends at attrs_data_size (false: one did not fit, or the read bound cut it)
  std::size_t attrs_data_read = 0;  // bytes of attrs_data the read holds
  bool readable() const;            // valid is 1
  std::size_t declared_size() const;
};

// Decodes a record from the bytes read at its address; entries only when
// valid is 1, walked until one does not fit the declared size or the read.
// kTruncated: fewer than 28 bytes.
Expected<ThreadContextRecord> decode_record(std::span<const std::uint8_t> bytes);

using KeyMap = std::vector<std::string>;

struct ReferenceData {
  std::optional<otlp::AttributeValue> schema_version_value;
  std::optional<otlp::AttributeValue> key_map_value;
  std::optional<std::string> schema_version;
  std::optional<KeyMap> key_map;  // an array of at most 256 strings
  // Revision 1's layout keys, as found (ambiguity 2): key -> display value.
  std::vector<std::pair<std::string, std::string>> revision_1_keys;
  bool known_schema() const;  // nodejs_v1_dev or nodejs_v1 (NJSR-01)
  bool key_map_distinct() const;
};
ReferenceData reference_data_of(const process_context::Payload& payload);
std::optional<ReferenceData> reference_data_of(const process_context::Snapshot& snapshot);

struct NamedAttribute {
  std::string key;
  std::uint8_t index = 0;
  std::vector<std::uint8_t> value;  // the last occurrence's
  std::size_t occurrences = 1;
};
struct NamedAttributes {
  std::vector<NamedAttribute> attributes;
  std::vector<std::uint8_t> unknown_indexes;  // outside the key map even after the refresh
  bool refreshed = false;
};
// Names entries through `key_map`; an unknown index asks `refresh` once.
NamedAttributes name_attributes(const ThreadContextRecord& record, const KeyMap& key_map,
                                const std::function<std::optional<KeyMap>()>& refresh = {});
std::optional<KeyMap> current_key_map(pid_t pid);

nlohmann::json record_json(const ThreadContextRecord& record, const NamedAttributes* named);
// UTF-8 text as is; control bytes, backslashes and invalid bytes as \xNN.
std::string value_text(std::span<const std::uint8_t> value);

}  // namespace tracecorr::otel_nodejs_thread_context

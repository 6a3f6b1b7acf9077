// OTEP 4947's thread record and the reference data that names its keys
// (spec/otel-thread-context.md §3, §4, §6): the codec every part of the
// package reads through.
//
// The engine reads a thread's record bytes through thread_context_record_layout()
// (the record pointer in `otel_thread_ctx_v1`, the 28-byte header, then
// attrs_data_size more, cut at TC_RECORD_MAX_BYTES); decode_record() makes a
// ThreadContextRecord of them, following the reader rules (TCTXR-07, 08, 09,
// 16); resolve_attributes() names its entries through the key map the process
// context publishes (TCTXR-10, 11, 12). Judging is checks.hpp's: the decoder
// keeps what a check needs (where the entry walk stopped and why) and drops
// nothing silently.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <sys/types.h>

#include <nlohmann/json.hpp>

#include "tracecorr/discovery.hpp"
#include "tracecorr/error.hpp"
#include "tracecorr/ids.hpp"
#include "tracecorr/otlp.hpp"
#include "tracecorr/process_context.hpp"
#include "tracecorr/record_layout.hpp"

namespace tracecorr::otel_thread_context {

// The record as the engine's readers take it (samplers, read_thread_record,
// the record watcher, the BPF loader): a pointer in a TLS slot, a 28-byte
// header whose u16 at 26 says how many bytes follow, valid at 24 with the one
// accepted value 1, at most kRecordMaxBytes read.
const RecordLayout& thread_context_record_layout();

// Where the variable is: `otel_thread_ctx_v1` in the .dynsym of the executable
// or of any library the process maps (TCTXR-04). The OTEP names no library,
// so no file is chosen by its name.
DiscoveryOptions discovery_options();

// One {key, length, value} entry of attrs_data, as stored.
struct AttributeEntry {
  std::size_t offset = 0;  // of the entry's key byte in attrs_data
  std::uint8_t key = 0;    // index into the key map
  std::vector<std::uint8_t> value;  // `length` bytes (UTF-8 is TCTX-17's to judge)
};

// How the walk over attrs_data ended.
enum class EntriesEnd {
  Complete,         // the last entry ends exactly at attrs_data_size (or there is none)
  IncompleteEntry,  // the bytes left before attrs_data_size cannot hold the next entry: parsing stopped (TCTXR-09)
  ReadBound,        // the read stopped at TC_RECORD_MAX_BYTES first: the entry it cut is not decoded (TCTXR-16)
  NotRead,          // the record is not valid: its attrs_data is not parsed (TCTXR-07, 08)
};
const char* to_string(EntriesEnd end);  // "complete", "incomplete-entry", "read-bound", "not-read"

struct ThreadContextRecord {
  TraceId trace_id{};
  SpanId span_id{};
  std::uint8_t valid = 0;
  std::uint8_t trace_flags = 0;
  std::uint16_t attrs_data_size = 0;
  std::vector<AttributeEntry> entries;  // in record order, a key repeated as often as it is stored
  EntriesEnd entries_end = EntriesEnd::Complete;
  std::size_t entries_stop = 0;     // offset in attrs_data where the walk ended (attrs_data_size when Complete)
  std::size_t attrs_data_read = 0;  // bytes of attrs_data the read holds (less than attrs_data_size: cut at the bound)
  // IncompleteEntry: the bytes the entry at entries_stop declares, its
  // 2-byte header included (0 when not even its header fits).
  std::size_t incomplete_entry_needs = 0;

  // 1 is the only value that marks a record readable (TCTXR-08).
  bool readable() const;
  // 28 + attrs_data_size: the length the record declares.
  std::size_t declared_size() const;
  bool ids_zero() const { return is_zero(trace_id) && is_zero(span_id); }
};

// How a reader applies the reader rules. The default is the conforming
// reader, which `inspect`, conform's writer judges and the host agent use;
// each field set is one reader defect (reader_defects.hpp: `tracecorr agent
// --reader-defect`, for conformance kill matrices), given only by the host agent.
struct ReadingPolicy {
  bool ignore_valid = false;            // ignores-valid, TCTXR-08: valid != 1 read as if valid
  bool never_refresh_key_map = false;   // never-refreshes-key-map, TCTXR-10: the key map of discovery, always
  bool keep_out_of_map = false;         // keeps-out-of-map, TCTXR-11: named "tracecorr.index.N"
  bool first_duplicate_wins = false;    // first-duplicate-wins, TCTXR-12
  bool read_any_schema = false;         // reads-any-schema, TCTXR-03: a lookalike variable read under any schema
  bool static_tls_only = false;         // static-tls-only, TCTXR-05: no DTV walk, dynamic TLS gives no context
  bool unbounded_record = false;        // unbounded-record, TCTXR-16: a record past the bound read whole (the agent's)
  bool never_look_again = false;        // never-looks-again, TCTXR-02: no threadlocal keys at discovery, never read (the agent's)
};
// The key an entry past the key map is exported under by keeps-out-of-map.
std::string out_of_map_key(std::uint8_t index);

// Decodes a record from the bytes read at its address (the header, then as
// much of attrs_data as the read holds). The header is always decoded; the
// entries only when `valid` is 1 (TCTXR-07, 08; any value under
// policy.ignore_valid), walked until one does not fit (TCTXR-09) or the bytes
// end. kTruncated: fewer than 28 bytes. Never reads past `bytes`.
Expected<ThreadContextRecord> decode_record(std::span<const std::uint8_t> bytes, const ReadingPolicy& policy = {});

// The entries encoded back to back (tests, tools): key, length, value each.
// Values longer than 255 bytes are an error (kTooLong), not cut.
Expected<std::vector<std::uint8_t>> encode_entries(const std::vector<AttributeEntry>& entries);
// A record's bytes from its fields: the header with attrs_data_size set to
// `attrs_data.size()` (kTooLong past 65535), then attrs_data.
Expected<std::vector<std::uint8_t>> encode_record(const ThreadContextRecord& header_fields,
                                                  std::span<const std::uint8_t> attrs_data);

// ---- The reference data in the process context (TCTX-06, 07; TCTXR-01, 03) ----

using KeyMap = std::vector<std::string>;  // index i names key byte i

struct ReferenceData {
  // The values under the two keys in the process context's `attributes`
  // (the first of duplicates), whatever their type; nullopt when absent.
  std::optional<otlp::AttributeValue> schema_version_value;
  std::optional<otlp::AttributeValue> key_map_value;
  // The schema version when the value is a string.
  std::optional<std::string> schema_version;
  // The key map when the value is an array of at most 256 strings.
  std::optional<KeyMap> key_map;
  // threadlocal.* keys in the process context's resource (OTEP 4719 field 1),
  // where no reader looks (TCTXR-01): TCTX-06 and 07 put them in `attributes`.
  std::vector<std::string> keys_in_resource;
  // The key map as the resource carries it, when `attributes` carries none:
  // what the writer meant its records to be read by (key_map stays nullopt).
  std::optional<KeyMap> resource_key_map;
  // The writer announces thread context, in either place.
  bool announces_thread_context() const { return schema_version_value || key_map_value || !keys_in_resource.empty(); }
  // A schema version this reader reads records under (TCTXR-03).
  bool known_schema() const;
};
ReferenceData reference_data_of(const process_context::Payload& payload);
// The reference data of the first mapping whose read and decode succeeded;
// nullopt when no mapping has a decoded payload.
std::optional<ReferenceData> reference_data_of(const process_context::Snapshot& snapshot);

// ---- Another schema (TCTXR-03) ----

// "no mapped module defines otel_thread_ctx_v1 in its .dynsym", naming the
// lookalike variables discovery passed over when there were any
// (", only otel_thread_ctx_nodejs_v1 in /app/lib.so").
std::string variable_not_found(const std::vector<PassedOver>& passed_over);
// When `data` names a schema this reader does not read (a string other than
// tlsdesc_v1_dev and tls_v1: TCTXR-03, the records live elsewhere and none
// is read), what was seen, for people: "schema nodejs_v1_dev; variable
// otel_thread_ctx_nodejs_v1 in /app/lib.so, no otel_thread_ctx_v1; the OTEP
// 4947 reader reads records under tlsdesc_v1_dev or tls_v1 only (TCTXR-03)"
// (another package may read that schema: its own inspector says). nullopt: the
// schema is one of these, absent or not a string (TCTX-06 judges those).
// The modules of `pid` are looked at for the variables (through `cache`).
std::optional<std::string> other_schema(pid_t pid, const ReferenceData& data, LibraryCache& cache);

// ---- Naming the entries (TCTXR-10, 11, 12) ----

struct NamedAttribute {
  std::string key;                  // the key map's name
  std::uint8_t index = 0;           // the key byte
  std::vector<std::uint8_t> value;  // the last occurrence's value (TCTXR-12)
  std::size_t offset = 0;           // of that occurrence in attrs_data
  std::size_t occurrences = 1;      // how many entries carried the key (TCTX-18 lets a writer append)
};

struct NamedAttributes {
  std::vector<NamedAttribute> attributes;  // one per key, in the order each key first appears
  std::vector<std::uint8_t> unknown_indexes;  // ignored: outside the key map even after the refresh (TCTXR-11), each once
  bool refreshed = false;  // the key map was refreshed for this record (TCTXR-10)
};

// Names a record's entries through `key_map`. When an entry carries an index
// the map does not have, `refresh` (when given) is asked once for this record
// and its map, when it answers one, names every entry (TCTXR-10); indexes
// still outside it are ignored (TCTXR-11). A key stored more than once takes
// its last value (TCTXR-12). `policy` may break the last two (reader defects).
NamedAttributes name_attributes(const ThreadContextRecord& record, const KeyMap& key_map,
                                const std::function<std::optional<KeyMap>()>& refresh = {},
                                const ReadingPolicy& policy = {});

// The key map the process context of `pid` publishes now (TCTXR-10's
// refresh); nullopt when none can be read.
std::optional<KeyMap> current_key_map(pid_t pid);

// The engine's (process_context.hpp), reading this schema's key map.
using process_context::KeyMapRefresher;

// A record as inspect --json and the host agent's summary show it: ids in
// hex, valid, flags, sizes, whether the read cut it, how the entry walk
// ended, the entries as stored and, given `named`, the attributes by key and
// the indexes the key map lacks (empty lists without).
nlohmann::json record_json(const ThreadContextRecord& record, const NamedAttributes* named);

// A value for people: the UTF-8 text when it is valid, else its bytes with
// every byte that is not printable ASCII as \xNN.
std::string value_text(std::span<const std::uint8_t> value);

}  // namespace tracecorr::otel_thread_context

#include "otel_nodejs_thread_context/record.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <set>

#include "otel_nodejs_thread_context/registry.hpp"
#include "otel_nodejs_thread_context/walk.hpp"

namespace tracecorr::otel_nodejs_thread_context {

static_assert(spec::kRecordRecommendedMaxSize <= kRecordMaxBytes);
static_assert(spec::kRecordAttrsDataOffset == spec::kRecordHeaderSize);
static_assert(spec::kRecordTraceIdSize == std::tuple_size_v<TraceId>);
static_assert(spec::kRecordSpanIdSize == std::tuple_size_v<SpanId>);

const RecordLayout& thread_context_record_layout() {
  static const RecordLayout layout = [] {
    RecordLayout l;
    l.name = std::string(spec::kTlsSymbol) + " record";
    l.length = SizeField{spec::kRecordAttrsDataSizeOffset, spec::kRecordAttrsDataSizeSize, spec::kRecordHeaderSize};
    l.max_size = kRecordMaxBytes;
    l.valid_offset = spec::kRecordValidOffset;
    l.valid_values = ByteValues::only({static_cast<std::uint8_t>(spec::kRecordValidValue)});
    l.fields = {
        {"trace_id", spec::kRecordTraceIdOffset, spec::kRecordTraceIdSize},
        {"span_id", spec::kRecordSpanIdOffset, spec::kRecordSpanIdSize},
        {"valid", spec::kRecordValidOffset, spec::kRecordValidSize},
        {"trace_flags", spec::kRecordTraceFlagsOffset, spec::kRecordTraceFlagsSize},
        {"attrs_data_size", spec::kRecordAttrsDataSizeOffset, spec::kRecordAttrsDataSizeSize},
        {"attrs_data", spec::kRecordAttrsDataOffset, kRecordMaxBytes - spec::kRecordAttrsDataOffset},
    };
    l.indirection = WalkFromTlsSlot{context_map_walk()};
    return l;
  }();
  return layout;
}

DiscoveryOptions discovery_options() {
  DiscoveryOptions o;
  o.tls_symbol = std::string(spec::kTlsSymbol);
  o.look_past_names = true;
  o.look_in_executables = true;
  return o;
}

bool ThreadContextRecord::readable() const { return valid == spec::kRecordValidValue; }
std::size_t ThreadContextRecord::declared_size() const { return spec::kRecordHeaderSize + attrs_data_size; }

Expected<ThreadContextRecord> decode_record(std::span<const std::uint8_t> bytes) {
  if (bytes.size() < spec::kRecordHeaderSize)
    return make_error(ErrorKind::kTruncated,
                      std::to_string(bytes.size()) + " bytes, fewer than the " + std::to_string(spec::kRecordHeaderSize) +
                          "-byte header",
                      std::string(spec::kTlsSymbol) + " record");
  ThreadContextRecord r;
  std::memcpy(r.trace_id.data(), bytes.data() + spec::kRecordTraceIdOffset, r.trace_id.size());
  std::memcpy(r.span_id.data(), bytes.data() + spec::kRecordSpanIdOffset, r.span_id.size());
  r.valid = bytes[spec::kRecordValidOffset];
  r.trace_flags = bytes[spec::kRecordTraceFlagsOffset];
  std::memcpy(&r.attrs_data_size, bytes.data() + spec::kRecordAttrsDataSizeOffset, sizeof r.attrs_data_size);
  const auto attrs = bytes.subspan(spec::kRecordAttrsDataOffset);
  r.attrs_data_read = std::min<std::size_t>(attrs.size(), r.attrs_data_size);
  if (!r.readable()) return r;
  std::size_t at = 0;
  while (at < r.attrs_data_size) {
    const std::size_t end = at + spec::kAttributeEntryHeaderSize > r.attrs_data_read
                                ? SIZE_MAX
                                : at + spec::kAttributeEntryValueOffset + attrs[at + spec::kAttributeEntryLengthOffset];
    if (end > r.attrs_data_size || end > r.attrs_data_read) {  // does not fit, or the read bound cut it
      r.entries_complete = false;
      break;
    }
    AttributeEntry e;
    e.offset = at;
    e.key = attrs[at + spec::kAttributeEntryKeyOffset];
    e.value.assign(attrs.begin() + static_cast<std::ptrdiff_t>(at + spec::kAttributeEntryValueOffset),
                   attrs.begin() + static_cast<std::ptrdiff_t>(end));
    r.entries.push_back(std::move(e));
    at = end;
  }
  return r;
}

bool ReferenceData::known_schema() const {
  return schema_version &&
         std::find(spec::kSchemaVersions.begin(), spec::kSchemaVersions.end(), *schema_version) != spec::kSchemaVersions.end();
}

bool ReferenceData::key_map_distinct() const {
  return key_map && std::set<std::string>(key_map->begin(), key_map->end()).size() == key_map->size();
}

ReferenceData reference_data_of(const process_context::Payload& payload) {
  ReferenceData d;
  if (const auto* v = process_context::find_attribute(payload.attributes, spec::kSchemaVersionKey)) {
    d.schema_version_value = *v;
    if (const auto* s = v->as_string()) d.schema_version = *s;
  }
  if (const auto* v = process_context::find_attribute(payload.attributes, spec::kAttributeKeyMapKey)) {
    d.key_map_value = *v;
    auto keys = v->string_array();
    if (keys && keys->size() <= spec::kMaxKeys) d.key_map = std::move(*keys);
  }
  for (auto key : spec::kRevision1LayoutKeys)
    if (const auto* v = process_context::find_attribute(payload.attributes, key))
      d.revision_1_keys.emplace_back(std::string(key), v->to_display());
  return d;
}

std::optional<ReferenceData> reference_data_of(const process_context::Snapshot& snapshot) {
  for (const auto& m : snapshot.mappings)
    if (m.read.ok() && m.decoded && m.decoded->ok()) return reference_data_of(m.decoded->value());
  return std::nullopt;
}

NamedAttributes name_attributes(const ThreadContextRecord& record, const KeyMap& key_map,
                                const std::function<std::optional<KeyMap>()>& refresh) {
  NamedAttributes out;
  const KeyMap* map = &key_map;
  std::optional<KeyMap> refreshed;
  const bool unknown = std::any_of(record.entries.begin(), record.entries.end(),
                                   [&](const AttributeEntry& e) { return e.key >= key_map.size(); });
  if (unknown && refresh) {
    refreshed = refresh();
    out.refreshed = true;
    if (refreshed) map = &*refreshed;
  }
  for (const auto& e : record.entries) {
    if (e.key >= map->size()) {
      if (std::find(out.unknown_indexes.begin(), out.unknown_indexes.end(), e.key) == out.unknown_indexes.end())
        out.unknown_indexes.push_back(e.key);
      continue;
    }
    auto same = std::find_if(out.attributes.begin(), out.attributes.end(),
                             [&](const NamedAttribute& a) { return a.index == e.key; });
    if (same != out.attributes.end()) {  // the last occurrence wins
      same->value = e.value;
      ++same->occurrences;
      continue;
    }
    out.attributes.push_back(NamedAttribute{(*map)[e.key], e.key, e.value, 1});
  }
  return out;
}

std::optional<KeyMap> current_key_map(pid_t pid) {
  auto snapshot = process_context::take_contents_snapshot(pid);
  if (!snapshot) return std::nullopt;
  auto data = reference_data_of(*snapshot);
  return data ? data->key_map : std::nullopt;
}

std::string value_text(std::span<const std::uint8_t> value) {
  std::string out;
  std::string_view rest(reinterpret_cast<const char*>(value.data()), value.size());
  auto escape = [&](unsigned char b) {
    char hex[8];
    std::snprintf(hex, sizeof hex, "\\x%02x", b);
    out += hex;
  };
  while (!rest.empty()) {
    auto bad = utf8_invalid_at(rest);
    const std::size_t good = bad ? *bad : rest.size();
    for (char c : rest.substr(0, good)) {
      const auto b = static_cast<unsigned char>(c);
      if (b < 0x20 || b == 0x7f || b == '\\') escape(b);
      else out += c;
    }
    if (!bad) break;
    escape(static_cast<unsigned char>(rest[good]));
    rest.remove_prefix(good + 1);
  }
  return out;
}

nlohmann::json record_json(const ThreadContextRecord& r, const NamedAttributes* named) {
  nlohmann::json j = {{"trace_id", to_hex(r.trace_id)},       {"span_id", to_hex(r.span_id)},
                      {"valid", r.valid},                      {"trace_flags", r.trace_flags},
                      {"attrs_data_size", r.attrs_data_size}, {"size", r.declared_size()},
                      {"entries_complete", r.entries_complete}};
  nlohmann::json attributes = nlohmann::json::array(), unknown = nlohmann::json::array();
  if (named) {
    for (const auto& a : named->attributes)
      attributes.push_back({{"key", a.key}, {"index", a.index}, {"value", value_text(a.value)}, {"occurrences", a.occurrences}});
    for (auto i : named->unknown_indexes) unknown.push_back(i);
  }
  j["attributes"] = attributes;
  j["unknown_keys"] = unknown;
  return j;
}

}  // namespace tracecorr::otel_nodejs_thread_context

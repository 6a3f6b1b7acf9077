#include "otel_thread_context/record.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "otel_thread_context/registry.hpp"

namespace tracecorr::otel_thread_context {

// The record layout is read by the engine with TC_RECORD_MAX_BYTES as its
// bound; the OTEP's own recommendation is well inside it.
static_assert(spec::kRecordRecommendedMaxSize <= kRecordMaxBytes);
static_assert(spec::kRecordAttrsDataOffset == spec::kRecordHeaderSize);
static_assert(spec::kRecordAttrsDataSizeSize == sizeof(std::uint16_t));
static_assert(spec::kRecordTraceIdSize == std::tuple_size_v<TraceId>);
static_assert(spec::kRecordSpanIdSize == std::tuple_size_v<SpanId>);

const RecordLayout& thread_context_record_layout() {
  static const RecordLayout layout = [] {
    RecordLayout l;
    l.name = std::string(spec::kTlsSymbol) + " record";
    l.length = SizeField{spec::kRecordAttrsDataSizeOffset, spec::kRecordAttrsDataSizeSize, spec::kRecordHeaderSize};
    l.max_size = kRecordMaxBytes;  // TCTXR-16
    l.valid_offset = spec::kRecordValidOffset;
    l.valid_values = ByteValues::only({static_cast<std::uint8_t>(spec::kRecordValidValue)});  // TCTXR-08
    // Names as the registry spells them; reports name changed bytes by them.
    l.fields = {
        {"trace_id", spec::kRecordTraceIdOffset, spec::kRecordTraceIdSize},
        {"span_id", spec::kRecordSpanIdOffset, spec::kRecordSpanIdSize},
        {"valid", spec::kRecordValidOffset, spec::kRecordValidSize},
        {"trace_flags", spec::kRecordTraceFlagsOffset, spec::kRecordTraceFlagsSize},
        {"attrs_data_size", spec::kRecordAttrsDataSizeOffset, spec::kRecordAttrsDataSizeSize},
        {"attrs_data", spec::kRecordAttrsDataOffset, kRecordMaxBytes - spec::kRecordAttrsDataOffset},
    };
    l.indirection = PointerInTlsSlot{};
    return l;
  }();
  return layout;
}

DiscoveryOptions discovery_options() {
  DiscoveryOptions o;
  o.tls_symbol = std::string(spec::kTlsSymbol);
  o.look_past_names = true;      // any shared library may define it
  o.look_in_executables = true;  // and so may the executable, static-pie included
  return o;
}

const char* to_string(EntriesEnd end) {
  switch (end) {
    case EntriesEnd::Complete: return "complete";
    case EntriesEnd::IncompleteEntry: return "incomplete-entry";
    case EntriesEnd::ReadBound: return "read-bound";
    case EntriesEnd::NotRead: return "not-read";
  }
  return "?";
}

bool ThreadContextRecord::readable() const { return valid == spec::kRecordValidValue; }

std::size_t ThreadContextRecord::declared_size() const { return spec::kRecordHeaderSize + attrs_data_size; }

std::string out_of_map_key(std::uint8_t index) { return "tracecorr.index." + std::to_string(index); }

Expected<ThreadContextRecord> decode_record(std::span<const std::uint8_t> bytes, const ReadingPolicy& policy) {
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
  std::memcpy(&r.attrs_data_size, bytes.data() + spec::kRecordAttrsDataSizeOffset, sizeof r.attrs_data_size);  // native order

  const auto attrs = bytes.subspan(spec::kRecordAttrsDataOffset);
  r.attrs_data_read = std::min<std::size_t>(attrs.size(), r.attrs_data_size);
  if (!r.readable() && !policy.ignore_valid) {
    r.entries_end = EntriesEnd::NotRead;
    return r;
  }
  // Walk what the record declares, within what was read: an entry the
  // declared size cannot hold ends the walk (the writer's fault), one the
  // read bound cut ends it too (tracecorr's bound: not decoded, not judged).
  const std::size_t declared = r.attrs_data_size;
  const std::size_t held = r.attrs_data_read;
  std::size_t at = 0;
  while (at < declared) {
    if (at + spec::kAttributeEntryHeaderSize > declared) {  // one byte left: no entry fits, whatever it holds
      r.entries_end = EntriesEnd::IncompleteEntry;
      break;
    }
    if (at + spec::kAttributeEntryHeaderSize > held) {
      r.entries_end = EntriesEnd::ReadBound;
      break;
    }
    const std::size_t length = attrs[at + spec::kAttributeEntryLengthOffset];
    const std::size_t end = at + spec::kAttributeEntryValueOffset + length;
    if (end > declared) {
      r.entries_end = EntriesEnd::IncompleteEntry;
      r.incomplete_entry_needs = end - at;
      break;
    }
    if (end > held) {
      r.entries_end = EntriesEnd::ReadBound;
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
  r.entries_stop = at;
  return r;
}

Expected<std::vector<std::uint8_t>> encode_entries(const std::vector<AttributeEntry>& entries) {
  std::vector<std::uint8_t> out;
  for (const auto& e : entries) {
    if (e.value.size() > spec::kAttributeEntryValueMaxLength)
      return make_error(ErrorKind::kTooLong,
                        "a value of " + std::to_string(e.value.size()) + " bytes does not fit the length byte",
                        "attribute entry with key " + std::to_string(e.key));
    out.push_back(e.key);
    out.push_back(static_cast<std::uint8_t>(e.value.size()));
    out.insert(out.end(), e.value.begin(), e.value.end());
  }
  return out;
}

Expected<std::vector<std::uint8_t>> encode_record(const ThreadContextRecord& h, std::span<const std::uint8_t> attrs_data) {
  if (attrs_data.size() > 0xffff)
    return make_error(ErrorKind::kTooLong, std::to_string(attrs_data.size()) + " bytes do not fit attrs_data_size",
                      "attrs_data");
  std::vector<std::uint8_t> out(spec::kRecordHeaderSize);
  std::memcpy(out.data() + spec::kRecordTraceIdOffset, h.trace_id.data(), h.trace_id.size());
  std::memcpy(out.data() + spec::kRecordSpanIdOffset, h.span_id.data(), h.span_id.size());
  out[spec::kRecordValidOffset] = h.valid;
  out[spec::kRecordTraceFlagsOffset] = h.trace_flags;
  const auto size = static_cast<std::uint16_t>(attrs_data.size());
  std::memcpy(out.data() + spec::kRecordAttrsDataSizeOffset, &size, sizeof size);
  out.insert(out.end(), attrs_data.begin(), attrs_data.end());
  return out;
}

bool ReferenceData::known_schema() const {
  return schema_version &&
         std::find(spec::kSchemaVersions.begin(), spec::kSchemaVersions.end(), *schema_version) != spec::kSchemaVersions.end();
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
  d.keys_in_resource = process_context::keys_with_prefix(payload.resource, process_context::kThreadLocalPrefix);
  if (!d.key_map_value)
    if (const auto* v = process_context::find_attribute(payload.resource, spec::kAttributeKeyMapKey)) {
      auto keys = v->string_array();
      if (keys && keys->size() <= spec::kMaxKeys) d.resource_key_map = std::move(*keys);
    }
  return d;
}

std::optional<ReferenceData> reference_data_of(const process_context::Snapshot& snapshot) {
  for (const auto& m : snapshot.mappings)
    if (m.read.ok() && m.decoded && m.decoded->ok()) return reference_data_of(m.decoded->value());
  return std::nullopt;
}

std::string variable_not_found(const std::vector<PassedOver>& passed_over) {
  std::string text = "no mapped module defines " + std::string(spec::kTlsSymbol) + " in its .dynsym";
  if (!passed_over.empty()) text += " (passed over: " + describe(passed_over) + ")";
  return text;
}

std::optional<std::string> other_schema(pid_t pid, const ReferenceData& data, LibraryCache& cache) {
  if (!data.schema_version || data.known_schema()) return std::nullopt;
  // The schema string is the target's: bounded here, escaped by whoever prints it.
  constexpr std::size_t kShown = 128;
  std::string schema = data.schema_version->substr(0, kShown);
  if (data.schema_version->size() > kShown) schema += "...";
  std::string text = "schema " + schema + " (" + std::string(spec::kSchemaVersionKey) + " in the process context)";
  std::vector<PassedOver> passed_over;
  auto found = discover_process(pid, discovery_options(), cache, &passed_over);
  if (!passed_over.empty()) text += "; variable " + describe(passed_over);
  if (found && *found) text += "; " + std::string(spec::kTlsSymbol) + " in " + (*found)->path + " (not read under it)";
  else text += "; no " + std::string(spec::kTlsSymbol);
  std::string ours;
  for (auto v : spec::kSchemaVersions) ours += (ours.empty() ? "" : " or ") + std::string(v);
  return text + "; the OTEP 4947 reader reads records under " + ours + " only (TCTXR-03)";
}

NamedAttributes name_attributes(const ThreadContextRecord& record, const KeyMap& key_map,
                                const std::function<std::optional<KeyMap>()>& refresh, const ReadingPolicy& policy) {
  NamedAttributes out;
  const KeyMap* map = &key_map;
  std::optional<KeyMap> refreshed;
  const bool unknown = std::any_of(record.entries.begin(), record.entries.end(),
                                   [&](const AttributeEntry& e) { return e.key >= key_map.size(); });
  if (unknown && refresh) {  // TCTXR-10: once per record, before any entry is named
    refreshed = refresh();
    out.refreshed = true;
    if (refreshed) map = &*refreshed;
  }
  for (const auto& e : record.entries) {
    const bool outside = e.key >= map->size();
    if (outside && !policy.keep_out_of_map) {  // TCTXR-11
      if (std::find(out.unknown_indexes.begin(), out.unknown_indexes.end(), e.key) == out.unknown_indexes.end())
        out.unknown_indexes.push_back(e.key);
      continue;
    }
    auto same = std::find_if(out.attributes.begin(), out.attributes.end(),
                             [&](const NamedAttribute& a) { return a.index == e.key; });
    if (same != out.attributes.end()) {  // TCTXR-12: the last occurrence wins
      if (!policy.first_duplicate_wins) {
        same->value = e.value;
        same->offset = e.offset;
      }
      ++same->occurrences;
      continue;
    }
    out.attributes.push_back(NamedAttribute{outside ? out_of_map_key(e.key) : (*map)[e.key], e.key, e.value, e.offset, 1});
  }
  return out;
}

std::string value_text(std::span<const std::uint8_t> value) {
  std::string out;
  std::string_view rest(reinterpret_cast<const char*>(value.data()), value.size());
  while (!rest.empty()) {
    auto bad = utf8_invalid_at(rest);
    std::size_t good = bad ? *bad : rest.size();
    for (char c : rest.substr(0, good)) {
      const auto b = static_cast<unsigned char>(c);
      if (b < 0x20 || b == 0x7f || b == '\\') {
        char hex[8];
        std::snprintf(hex, sizeof hex, "\\x%02x", b);
        out += hex;
      } else {
        out += c;
      }
    }
    if (!bad) break;
    char hex[8];
    std::snprintf(hex, sizeof hex, "\\x%02x", static_cast<unsigned char>(rest[good]));
    out += hex;
    rest.remove_prefix(good + 1);
  }
  return out;
}

std::optional<KeyMap> current_key_map(pid_t pid) {
  auto snapshot = process_context::take_contents_snapshot(pid);
  if (!snapshot) return std::nullopt;
  auto data = reference_data_of(*snapshot);
  return data ? data->key_map : std::nullopt;
}

nlohmann::json record_json(const ThreadContextRecord& r, const NamedAttributes* named) {
  nlohmann::json j = {{"trace_id", to_hex(r.trace_id)},
                      {"span_id", to_hex(r.span_id)},
                      {"valid", r.valid},
                      {"trace_flags", r.trace_flags},
                      {"attrs_data_size", r.attrs_data_size},
                      {"size", r.declared_size()},
                      {"truncated", r.attrs_data_read < r.attrs_data_size},
                      {"entries_end", to_string(r.entries_end)}};
  nlohmann::json entries = nlohmann::json::array();
  for (const auto& e : r.entries)
    entries.push_back({{"offset", e.offset}, {"key", e.key}, {"value", value_text(e.value)}});
  j["entries"] = std::move(entries);
  nlohmann::json attributes = nlohmann::json::array();
  nlohmann::json unknown = nlohmann::json::array();
  if (named) {
    for (const auto& a : named->attributes)
      attributes.push_back({{"key", a.key}, {"index", a.index}, {"value", value_text(a.value)}, {"occurrences", a.occurrences}});
    for (auto i : named->unknown_indexes) unknown.push_back(i);
  }
  j["attributes"] = std::move(attributes);
  j["unknown_keys"] = std::move(unknown);
  return j;
}

}  // namespace tracecorr::otel_thread_context

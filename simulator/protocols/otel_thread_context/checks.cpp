#include "otel_thread_context/checks.hpp"

#include <elf.h>

#include <algorithm>

#include "otel_thread_context/registry.hpp"

namespace tracecorr::otel_thread_context {
namespace {

const std::string kSymbol(spec::kTlsSymbol);

std::string symbol_facts(const elf::Symbol& s) {
  return "type " + elf::describe_type(s.type) + ", binding " + elf::describe_binding(s.binding) + ", visibility " +
         elf::describe_visibility(s.visibility) + ", size " + std::to_string(s.size) +
         (s.defined() ? "" : ", undefined (imported, not defined here)");
}

std::string relocation_list(const elf::TlsAccess& access) {
  std::string out;
  for (const auto& r : access.relocations) out += (out.empty() ? "" : ", ") + r;
  return out.empty() ? "none" : out;
}

const char* descriptor_flag(elf::Machine machine) {
  return machine == elf::Machine::AArch64 ? "-mtls-dialect=desc" : "-mtls-dialect=gnu2";
}

// "thread 1234: record at 0x7f...": where a record finding is.
std::string record_where(const RecordLook& look) {
  return "thread " + std::to_string(look.tid) + ": record at " + hex_address(look.address);
}

// "entry at attrs_data offset 40 (record byte 68)".
std::string entry_where(std::size_t offset) {
  return "entry at attrs_data offset " + std::to_string(offset) + " (record byte " +
         std::to_string(spec::kRecordAttrsDataOffset + offset) + ")";
}

std::uint16_t byte_swapped(std::uint16_t v) { return static_cast<std::uint16_t>((v << 8) | (v >> 8)); }

// Whether attrs_data_size, read in the other byte order, is where the
// entries end: the sign of a size stored big-endian on a little-endian
// machine (or the reverse). Only asked of a size past the OTEP's 640-byte
// recommendation whose swap is within it, so a conforming record never
// shows it.
bool entries_end_at_swapped_size(const ThreadContextRecord& r) {
  const std::size_t swapped = byte_swapped(r.attrs_data_size);
  if (swapped == r.attrs_data_size || r.declared_size() <= spec::kRecordRecommendedMaxSize ||
      spec::kRecordHeaderSize + swapped > spec::kRecordRecommendedMaxSize)
    return false;
  if (swapped == 0) return r.entries.empty() || r.entries.front().offset == 0;
  return std::any_of(r.entries.begin(), r.entries.end(), [&](const AttributeEntry& e) {
    return e.offset + spec::kAttributeEntryValueOffset + e.value.size() == swapped;
  });
}

Finding check_tctx_11(const RecordLook& look, const KeyMap* key_map) {
  const auto& r = look.record;
  if (r.entries.empty()) return met("TCTX-11", 1, record_where(look) + ": no attribute entries");
  if (!key_map)
    return not_applicable("TCTX-11", record_where(look) + ": " + std::to_string(r.entries.size()) +
                                         " attribute entries, but no key map is published (TCTX-07)");
  std::string outside;
  std::size_t count = 0;
  for (const auto& e : r.entries) {
    if (e.key < key_map->size()) continue;
    if (++count <= 4) outside += (outside.empty() ? "" : "; ") + std::string("key ") + std::to_string(e.key) + " in the " + entry_where(e.offset);
  }
  if (count == 0)
    return met("TCTX-11", 1, record_where(look) + ": " + std::to_string(r.entries.size()) + " entries, every key inside the " +
                                 std::to_string(key_map->size()) + "-key map");
  return violated("TCTX-11",
                  record_where(look) + ": " + std::to_string(count) + " entr" + (count == 1 ? "y carries" : "ies carry") +
                      " a key outside the " + std::to_string(key_map->size()) + "-key map: " + outside,
                  {text_evidence("key index", "< " + std::to_string(key_map->size()), outside)});
}

Finding check_tctx_12(const RecordLook& look) {
  const auto& r = look.record;
  if (entries_end_at_swapped_size(r))
    return violated("TCTX-12",
                    record_where(look) + ": attrs_data_size reads " + std::to_string(r.attrs_data_size) +
                        " in the machine's byte order; byte-swapped it is " + std::to_string(byte_swapped(r.attrs_data_size)) +
                        ", exactly where the entries end: the size is stored in the wrong byte order",
                    {text_evidence("attrs_data_size (native byte order)", std::to_string(byte_swapped(r.attrs_data_size)),
                                   std::to_string(r.attrs_data_size))});
  return met("TCTX-12", 1, record_where(look) + ": the 28-byte header and " + std::to_string(r.attrs_data_read) +
                               " byte(s) of attrs_data readable");
}

Finding check_tctx_13(const RecordLook& look) {
  const auto v = look.record.valid;
  if (v == spec::kRecordValidValue || v == spec::kRecordInvalidValue)
    return met("TCTX-13", 1, record_where(look) + ": valid " + std::to_string(v));
  return violated("TCTX-13",
                  record_where(look) + ": valid is " + std::to_string(v) + "; a writer stores only 1 (readable) or 0",
                  {text_evidence("valid (byte 24)", "1 or 0", std::to_string(v))});
}

Finding check_tctx_15(const RecordLook& look) {
  const auto& r = look.record;
  const bool trace = !is_zero(r.trace_id), span = !is_zero(r.span_id);
  if (trace == span)
    return met("TCTX-15", 1, record_where(look) + (trace ? ": trace_id and span_id both set" : ": no ids (both zero)"));
  return violated("TCTX-15",
                  record_where(look) + ": " + (trace ? "trace_id " + to_hex(r.trace_id) + " is set but span_id is zero"
                                                     : "span_id " + to_hex(r.span_id) + " is set but trace_id is zero"),
                  {text_evidence("trace_id / span_id", "both set or both zero",
                                 to_hex(r.trace_id) + " / " + to_hex(r.span_id))});
}

Finding check_tctx_16(const RecordLook& look) {
  const auto& r = look.record;
  const std::string size = "attrs_data_size " + std::to_string(r.attrs_data_size);
  switch (r.entries_end) {
    case EntriesEnd::IncompleteEntry: {
      const std::size_t left = r.attrs_data_size - r.entries_stop;
      std::string needs = r.incomplete_entry_needs ? std::to_string(r.incomplete_entry_needs) + " bytes"
                                                   : "its 2-byte header";
      return violated("TCTX-16",
                      record_where(look) + ": the " + entry_where(r.entries_stop) + " needs " + needs + ", only " +
                          std::to_string(left) + " left before " + size + " (" + std::to_string(r.entries.size()) +
                          " complete entries before it)",
                      {text_evidence("attrs_data", "complete entries ending exactly at " + size,
                                     std::to_string(left) + " byte(s) after the last complete entry")});
    }
    case EntriesEnd::ReadBound:
      return met("TCTX-16", 1, record_where(look) + ": " + std::to_string(r.entries.size()) +
                                   " complete entries up to tracecorr's " + std::to_string(kRecordMaxBytes) +
                                   "-byte read bound; the rest of " + size + " is not read");
    case EntriesEnd::Complete:
      return met("TCTX-16", 1, record_where(look) + ": " + std::to_string(r.entries.size()) + " entries ending at " + size);
    case EntriesEnd::NotRead: break;
  }
  return not_applicable("TCTX-16", record_where(look) + ": attrs_data not read (the record is not valid)");
}

Finding check_tctx_17(const RecordLook& look) {
  const auto& r = look.record;
  std::string problems;
  std::size_t count = 0;
  std::vector<std::uint8_t> first_bad;
  for (const auto& e : r.entries) {
    auto p = utf8_problem(e.value);
    if (!p) continue;
    if (++count > 4) continue;
    if (first_bad.empty()) first_bad = e.value;
    problems += (problems.empty() ? "" : "; ") + std::string("the value of key ") + std::to_string(e.key) + " in the " +
                entry_where(e.offset) +
                (p->cut_at_end ? " ends inside a multi-byte character (cut at byte " + std::to_string(p->offset) + " of " +
                                     std::to_string(e.value.size()) + ")"
                               : " is not UTF-8 at byte " + std::to_string(p->offset));
  }
  if (count == 0) return met("TCTX-17", 1, record_where(look) + ": " + std::to_string(r.entries.size()) + " value(s), all UTF-8");
  Evidence e = text_evidence("attribute value", "UTF-8, cut at a code-point boundary", problems);
  e.bytes = first_bad;
  return violated("TCTX-17", record_where(look) + ": " + problems, {std::move(e)});
}

Finding check_tctx_19(const RecordLook& look) {
  if (look.address % spec::kRecordAlignment == 0)
    return met("TCTX-19", 1, record_where(look) + ": aligned to " + std::to_string(spec::kRecordAlignment));
  return violated("TCTX-19",
                  record_where(look) + ": the address is not a multiple of " + std::to_string(spec::kRecordAlignment),
                  {text_evidence("record address", "aligned to " + std::to_string(spec::kRecordAlignment) + " bytes",
                                 hex_address(look.address))});
}

Finding check_tctx_20(const RecordLook& look) {
  const std::size_t size = look.record.declared_size();
  const std::string limit = std::to_string(spec::kRecordRecommendedMaxSize);
  if (size > spec::kRecordRecommendedMaxSize)
    return violated("TCTX-20",
                    record_where(look) + ": " + std::to_string(size) + " bytes (28 + attrs_data_size " +
                        std::to_string(look.record.attrs_data_size) + "), more than " + limit +
                        ": readers with the OTel eBPF profiler's limit drop it",
                    {text_evidence("record size", "<= " + limit, std::to_string(size))});
  if (look.recommended_window_readable == false)
    return tolerated("TCTX-20",
                     record_where(look) + ": " + std::to_string(size) + " bytes, but the " + limit +
                         " bytes from its start are not all readable: a reader copying a fixed " + limit +
                         "-byte window loses it");
  return met("TCTX-20", 1, record_where(look) + ": " + std::to_string(size) + " bytes");
}

}  // namespace

std::optional<Utf8Problem> utf8_problem(std::span<const std::uint8_t> value) {
  const std::string_view text(reinterpret_cast<const char*>(value.data()), value.size());
  const auto at = utf8_invalid_at(text);
  if (!at) return std::nullopt;
  Utf8Problem p{*at, false};
  const std::uint8_t lead = value[*at];
  const std::size_t length = lead >= 0xc2 && lead <= 0xdf ? 2 : lead >= 0xe0 && lead <= 0xef ? 3
                           : lead >= 0xf0 && lead <= 0xf4 ? 4 : 0;
  const std::size_t left = value.size() - *at;
  if (length > left) {
    p.cut_at_end = std::all_of(value.begin() + static_cast<std::ptrdiff_t>(*at + 1), value.end(),
                               [](std::uint8_t b) { return (b & 0xc0) == 0x80; });
  }
  return p;
}

std::vector<Finding> check_variable(const AgentLibrary& module) {
  std::vector<Finding> out;
  const auto& sym = module.elf.tls;
  const std::string in = " in " + module.path;
  if (!sym || !sym->defined()) {
    out.push_back(violated("TCTX-01", kSymbol + " is not defined among the dynamic symbols" + in,
                           {text_evidence(".dynsym", "a definition of " + kSymbol, sym ? "an undefined reference" : "absent")}));
    for (auto id : {"TCTX-02", "TCTX-03", "TCTX-04", "TCTX-05"})
      out.push_back(not_applicable(id, kSymbol + " is not defined" + in));
    return out;
  }
  const std::string facts = symbol_facts(*sym);

  // TCTX-01: visible to readers: global or weak, default or protected.
  const bool bound = sym->binding == STB_GLOBAL || sym->binding == STB_WEAK;
  const bool visible = sym->visibility == STV_DEFAULT || sym->visibility == STV_PROTECTED;
  if (bound && visible) out.push_back(met("TCTX-01", 1, kSymbol + in + ": " + facts));
  else
    out.push_back(violated("TCTX-01", kSymbol + in + " is exported as " + facts + ": readers resolve only a global or weak, default or protected symbol",
                           {text_evidence(kSymbol, "binding GLOBAL or WEAK, visibility DEFAULT or PROTECTED", facts)}));

  // TCTX-02
  if (sym->thread_local_storage()) out.push_back(met("TCTX-02", 1, kSymbol + in + " is " + elf::describe_type(sym->type)));
  else
    out.push_back(violated("TCTX-02",
                           kSymbol + in + " is " + elf::describe_type(sym->type) +
                               ", not a thread-local variable: every thread shares one pointer",
                           {text_evidence(kSymbol + " type", "TLS", elf::describe_type(sym->type))}));

  // TCTX-03: 8, 0 tolerated (the OTEP never spells st_size).
  const std::string pointer = std::to_string(spec::kPointerSize);
  if (sym->size == spec::kPointerSize) out.push_back(met("TCTX-03", 1, kSymbol + in + " has size " + pointer));
  else if (sym->size == 0)
    out.push_back(tolerated("TCTX-03", kSymbol + in + " has size 0 (defined without .size); readers read " + pointer +
                                           " bytes either way",
                            {text_evidence("st_size", pointer, "0")}));
  else
    out.push_back(violated("TCTX-03", kSymbol + in + " has size " + std::to_string(sym->size) + ", not one pointer",
                           {text_evidence("st_size", pointer, std::to_string(sym->size))}));

  // TCTX-04 and 05: the relocations a shared library carries for it.
  const auto& access = module.elf.tls_access;
  if (module.elf.executable) {
    const std::string why = module.path + " is an executable: the linker relaxes its accesses to local-exec";
    out.push_back(not_applicable("TCTX-04", why));
    out.push_back(not_applicable("TCTX-05", why));
    return out;
  }
  if (!sym->thread_local_storage()) {
    out.push_back(not_applicable("TCTX-04", kSymbol + in + " is not thread-local (TCTX-02)"));
    out.push_back(not_applicable("TCTX-05", kSymbol + in + " is not thread-local (TCTX-02)"));
    return out;
  }
  const std::string relocations = relocation_list(access);
  const bool module_only = access.relocations.empty() && access.own_module_id_vaddr;
  const bool through_module_base = access.named_by_addend_only && sym->visibility == STV_DEFAULT;
  if (module_only || through_module_base)
    out.push_back(violated(
        "TCTX-04",
        module.path + " reaches " + kSymbol + " with the local-dynamic model: " +
            (module_only ? "a module relocation naming no symbol, and none naming the variable"
                         : "its TLS relocations (" + relocations + ") name no symbol although " + kSymbol +
                               " is exported with default visibility, so they reach the module's base, not the variable"),
        {text_evidence("relocations for " + kSymbol, "relocations naming " + kSymbol,
                       module_only ? "a module relocation without a symbol" : relocations + ", without a symbol")}));
  else if (access.relocations.empty())
    out.push_back(not_applicable("TCTX-04", "no TLS relocation" + in + " reaches " + kSymbol + " (its code never accesses it)"));
  else
    out.push_back(met("TCTX-04", 1, kSymbol + in + " is reached by " + relocations));

  switch (access.dialect) {
    case elf::TlsDialect::Descriptor:
      if (!access.mixed) out.push_back(met("TCTX-05", 1, "TLS descriptor relocation" + in + ": " + relocations));
      else
        out.push_back(violated("TCTX-05",
                               module.path + " reaches " + kSymbol + " with TLS descriptors and legacy relocations both (" +
                                   relocations + ")",
                               {text_evidence("relocations for " + kSymbol, "a TLSDESC relocation only", relocations)}));
      break;
    case elf::TlsDialect::Traditional: {
      const std::string model = access.tp_offset_vaddr && !access.module_id_vaddr ? "initial-exec" : "legacy general-dynamic";
      out.push_back(violated("TCTX-05",
                             module.path + " reaches " + kSymbol + " with the " + model + " model (" + relocations +
                                 "); the OTEP recommends TLS descriptors (compile with " + descriptor_flag(module.elf.machine) + ")",
                             {text_evidence("relocations for " + kSymbol, "a TLSDESC relocation", relocations)}));
      break;
    }
    case elf::TlsDialect::None:
      out.push_back(not_applicable("TCTX-05", "no TLS relocation" + in + " reaches " + kSymbol));
      break;
  }
  return out;
}

std::vector<Finding> check_reference_data(const std::optional<ReferenceData>& data, bool records_carry_entries) {
  std::vector<Finding> out;
  if (!data) {
    out.push_back(not_applicable("TCTX-06", "no process context was read"));
    out.push_back(not_applicable("TCTX-07", "no process context was read"));
    return out;
  }
  const std::string version_key(spec::kSchemaVersionKey), map_key(spec::kAttributeKeyMapKey);
  std::string versions;
  for (auto v : spec::kSchemaVersions) versions += (versions.empty() ? "\"" : " or \"") + std::string(v) + "\"";

  // A key in the resource is where no reader looks for it (TCTXR-01).
  auto in_resource = [&](const std::string& key) {
    return std::find(data->keys_in_resource.begin(), data->keys_in_resource.end(), key) != data->keys_in_resource.end();
  };
  const std::string misplaced = " is in the process context's resource, not its attributes (OTEP 4719's field 2, where "
                                "readers take threadlocal.* keys; PCTX-16)";
  if (!data->schema_version_value && in_resource(version_key))
    out.push_back(violated("TCTX-06", version_key + misplaced,
                           {text_evidence(version_key, "in attributes: " + versions, "in the resource")}));
  else if (!data->schema_version_value)
    out.push_back(violated("TCTX-06", version_key + " is not among the process context's attributes",
                           {text_evidence(version_key, versions, "absent")}));
  else if (!data->schema_version)
    out.push_back(violated("TCTX-06", version_key + " is a " + data->schema_version_value->type_name() + ", not a string",
                           {text_evidence(version_key, "a string: " + versions, data->schema_version_value->to_display())}));
  else if (data->known_schema())
    out.push_back(met("TCTX-06", 1, version_key + " \"" + *data->schema_version + "\""));
  else
    out.push_back(violated("TCTX-06", version_key + " is \"" + *data->schema_version + "\", not this schema",
                           {text_evidence(version_key, versions, "\"" + *data->schema_version + "\"")}));

  const std::string array = "an array of at most " + std::to_string(spec::kMaxKeys) + " strings";
  if (!data->key_map_value && in_resource(map_key)) {
    out.push_back(violated("TCTX-07", map_key + misplaced, {text_evidence(map_key, "in attributes: " + array, "in the resource")}));
  } else if (!data->key_map_value) {
    if (records_carry_entries)
      out.push_back(violated("TCTX-07", map_key + " is not among the process context's attributes, yet records carry attribute entries",
                             {text_evidence(map_key, array, "absent")}));
    else
      out.push_back(tolerated("TCTX-07", map_key + " is not among the process context's attributes (no record read carries an attribute)"));
  } else if (data->key_map) {
    out.push_back(met("TCTX-07", 1, map_key + ": " + std::to_string(data->key_map->size()) + " key(s)"));
  } else {
    const auto& v = *data->key_map_value;
    const auto strings = v.string_array();
    const std::string actual = strings ? std::to_string(strings->size()) + " strings" : v.type_name() + " " + v.to_display();
    out.push_back(violated("TCTX-07", map_key + " is " + (strings ? "an array of " + actual : "a " + v.type_name()) + ", not " + array,
                           {text_evidence(map_key, array, actual)}));
  }
  return out;
}

std::vector<Finding> check_record(const RecordLook& look, const KeyMap* key_map) {
  const auto& r = look.record;
  if (!r.readable()) {
    const std::string why = record_where(look) + ": valid is " + std::to_string(r.valid) + ", readers ignore the record";
    return {not_applicable("TCTX-11", why), not_applicable("TCTX-12", why), check_tctx_13(look),
            not_applicable("TCTX-15", why), not_applicable("TCTX-16", why), not_applicable("TCTX-17", why),
            check_tctx_19(look),             not_applicable("TCTX-20", why)};
  }
  return {check_tctx_11(look, key_map), check_tctx_12(look), check_tctx_13(look), check_tctx_15(look),
          check_tctx_16(look),          check_tctx_17(look), check_tctx_19(look), check_tctx_20(look)};
}

std::string requirement_of_record_read_error(const Error& error) {
  // The pointer is the writer's word that 28 + attrs_data_size bytes are readable there.
  return error.kind == ErrorKind::kUnmapped || error.kind == ErrorKind::kTruncated ? "TCTX-12" : std::string();
}

}  // namespace tracecorr::otel_thread_context

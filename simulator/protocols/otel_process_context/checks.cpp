#include "otel_process_context/checks.hpp"

#include <algorithm>
#include <functional>
#include <map>

#include "otel_process_context/registry.hpp"

namespace tracecorr::otel_process_context {

// The engine's reader spells the header layout for every package that reads
// a context; the registry is this protocol's statement of it. They agree.
static_assert(spec::kContextHeaderSize == pc::kHeaderSize);
static_assert(spec::kContextHeaderSignatureOffset == pc::kSignatureOffset);
static_assert(spec::kContextHeaderSignatureSize == pc::kSignatureSize);
static_assert(spec::kContextHeaderVersionOffset == pc::kVersionOffset);
static_assert(spec::kContextHeaderPayloadSizeOffset == pc::kPayloadSizeOffset);
static_assert(spec::kContextHeaderMonotonicPublishedAtNsOffset == pc::kPublishedAtOffset);
static_assert(spec::kContextHeaderPayloadOffset == pc::kPayloadPointerOffset);
static_assert(spec::kContextCurrentVersion == pc::kCurrentVersion);
static_assert(spec::kContextDevelopmentVersion == pc::kDevelopmentVersion);
static_assert(spec::kContextSignature == std::string_view(pc::kSignature.data(), pc::kSignature.size()));
static_assert(spec::kThreadlocalPrefix == pc::kThreadLocalPrefix);
static_assert(spec::kPayloadReaderDefaultMaxSize == pc::kDefaultMaxPayloadBytes);

namespace {

std::string mapping_names() {
  return "\"" + std::string(spec::kMappingNameAnonShmem) + "\", \"" + std::string(spec::kMappingNameAnon) + "\" or \"" +
         std::string(spec::kMappingNameMemfd) + "\"";
}

std::string perms_of(const Mapping& m) {
  return std::string{m.read ? 'r' : '-', m.write ? 'w' : '-', m.exec ? 'x' : '-', m.shared ? 's' : 'p'};
}

std::string describe(const pc::ContextMapping& m) {
  return std::string(pc::to_string(m.kind)) + " mapping at " + hex_address(m.mapping.start);
}

std::string join(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& i : items) out += (out.empty() ? "\"" : ", \"") + i + "\"";
  return out;
}

Evidence signature_evidence(const pc::Header& header) {
  Evidence e;
  e.label = "header.signature";
  e.expected = "\"" + std::string(spec::kContextSignature) + "\"";
  e.actual = "\"" + header.signature_text() + "\"";
  e.bytes.assign(header.signature.begin(), header.signature.end());
  return e;
}

// The payload the rules on its content judge: the decoded payload, or, when
// payload_size runs past the message (PCTX-04), the message before the
// trailing bytes. nullopt when neither decodes.
struct JudgedPayload {
  const pc::Payload* payload = nullptr;
  std::optional<pc::Payload> prefix;       // decoded message before trailing bytes
  std::optional<std::size_t> message_end;  // set with `prefix`
};

JudgedPayload judged_payload(const pc::MappingSnapshot& m) {
  JudgedPayload j;
  if (!m.decoded) return j;
  if (m.decoded->ok()) {
    j.payload = &m.decoded->value();
    return j;
  }
  if (m.decoded->error().kind != ErrorKind::kMalformed) return j;
  if (auto end = message_end_before_payload_end(m.read.payload)) {
    auto prefix = pc::decode_payload(std::span(m.read.payload).first(*end));
    if (prefix) {
      j.prefix = std::move(*prefix);
      j.payload = &*j.prefix;
      j.message_end = end;
    }
  }
  return j;
}

// Why the rules that need the payload cannot be judged from this read.
Finding unreachable(std::string id, const pc::MappingSnapshot& m) {
  const auto& read = m.read;
  if (read.ok()) {
    if (m.decoded && !m.decoded->ok() && m.decoded->error().kind == ErrorKind::kTooLong)
      return kit_error(std::move(id), "the payload is beyond tracecorr's decode bounds: " + m.decoded->error().message());
    return not_applicable(std::move(id), "the payload does not decode (PCTX-05)");
  }
  std::string cause = requirement_of_read_error(read);
  if (!cause.empty()) return not_applicable(std::move(id), "not read: " + read.error->message());
  return kit_error(std::move(id), "no consistent read of the context: " + read.error->message());
}

}  // namespace

// "a at 0x1, b at 0x2" for the mappings listed, "and N more" for those only counted.
static std::string listed_mappings(const std::vector<pc::ContextMapping>& mappings, std::size_t found,
                            const std::function<std::string(const pc::ContextMapping&)>& name) {
  std::string list;
  for (const auto& m : mappings) list += (list.empty() ? "" : ", ") + name(m);
  if (found > mappings.size()) list += " and " + std::to_string(found - mappings.size()) + " more (not read)";
  return list;
}

Finding check_mapping_present(const std::vector<pc::ContextMapping>& mappings, std::size_t found) {
  found = std::max(found, mappings.size());
  if (found == 0)
    return violated("PCTX-01", "no mapping in /proc/PID/maps is named " + mapping_names(),
                    {text_evidence("process context mapping", mapping_names(), "none")});
  return met("PCTX-01", found, "found " + listed_mappings(mappings, found, [](const pc::ContextMapping& m) {
               return m.mapping.path + " at " + hex_address(m.mapping.start);
             }));
}

Finding check_single_mapping(const std::vector<pc::ContextMapping>& mappings, std::size_t found) {
  found = std::max(found, mappings.size());
  if (found <= 1) return met("PCTX-12", 1, found == 0 ? "no process context mapping" : "one process context mapping");
  return violated("PCTX-12",
                  std::to_string(found) + " process context mappings: " +
                      listed_mappings(mappings, found, [](const pc::ContextMapping& m) { return describe(m); }),
                  {text_evidence("process context mappings", "at most 1", std::to_string(found))});
}

Finding check_dont_fork(const pc::ContextMapping& m) {
  if (!m.dont_fork)
    return kit_error("PCTX-11", "the VmFlags of the " + describe(m) + " could not be read from /proc/PID/smaps");
  if (*m.dont_fork) return met("PCTX-11", 1, "the " + describe(m) + " has VmFlags dc (MADV_DONTFORK)");
  return violated("PCTX-11",
                  "the " + describe(m) + " is not marked MADV_DONTFORK: a forked child inherits its parent's context",
                  {text_evidence("VmFlags", "contains " + std::string(spec::kVmFlagDontfork), "no " + std::string(spec::kVmFlagDontfork))});
}

Finding check_private_read_write(const pc::ContextMapping& m) {
  const auto& map = m.mapping;
  std::string perms = perms_of(map);
  if (perms == spec::kMappingPerms) return met("PCTX-17", 1, "the " + describe(m) + " is " + perms);
  std::string why = map.shared ? "shared (MAP_SHARED), not private" : !(map.read && map.write) ? "not readable and writable" : "executable";
  return violated("PCTX-17", "the " + describe(m) + " is " + why,
                  {text_evidence("permissions", std::string(spec::kMappingPerms), perms)});
}

Finding check_signature(const pc::Header& header) {
  if (header.signature_matches()) return met("PCTX-02", 1, "signature \"" + std::string(spec::kContextSignature) + "\"");
  return violated("PCTX-02", "the header's first 8 bytes are \"" + header.signature_text() + "\"", {signature_evidence(header)});
}

Finding check_version(const pc::Header& header) {
  if (header.version == spec::kContextCurrentVersion) return met("PCTX-03", 1, "version " + std::to_string(header.version));
  auto evidence = text_evidence("header.version", std::to_string(spec::kContextCurrentVersion), std::to_string(header.version));
  if (header.version == spec::kContextDevelopmentVersion)
    return tolerated("PCTX-03", "version 1 is for development; released writers publish version 2", {evidence});
  return violated("PCTX-03", "version " + std::to_string(header.version) + " is not one the OTEP defines", {evidence});
}

Finding check_clock(const pc::Header& header, std::optional<std::uint64_t> start, std::uint64_t now) {
  const std::uint64_t ts = header.published_at_ns;
  auto seconds = [](std::uint64_t ns) { return std::to_string(ns / 1000000000ull) + "." + std::to_string(ns / 1000000ull % 1000 + 1000).substr(1) + " s"; };
  std::string window = (start ? "[" + seconds(*start) : "[?") + ", " + seconds(now) + "]";
  auto evidence = text_evidence("monotonic_published_at_ns", "CLOCK_BOOTTIME within the process's lifetime " + window,
                                std::to_string(ts) + " ns (" + seconds(ts) + ")");
  if (ts > now)
    return violated("PCTX-06", "monotonic_published_at_ns is " + seconds(ts) + ", later than now on CLOCK_BOOTTIME (" +
                                   seconds(now) + "): not a boot-time clock (CLOCK_REALTIME?)",
                    {evidence});
  // /proc/PID/stat gives the start rounded down to a clock tick: a
  // publication cannot be earlier than that.
  if (start && ts < *start)
    return violated("PCTX-06", "monotonic_published_at_ns is " + seconds(ts) + ", before the process started (" +
                                   seconds(*start) + " on CLOCK_BOOTTIME)",
                    {evidence});
  return met("PCTX-06", 1, "published at " + seconds(ts) + " on CLOCK_BOOTTIME, within " + window);
}

Finding check_payload_size(const pc::Header& header) {
  if (header.payload_size <= spec::kPayloadInteroperableMaxSize)
    return met("PCTX-18", 1, "payload_size " + std::to_string(header.payload_size));
  return violated("PCTX-18",
                  "payload_size " + std::to_string(header.payload_size) + " exceeds " +
                      std::to_string(spec::kPayloadInteroperableMaxSize) + ": readers with a 64 KiB limit drop the context",
                  {text_evidence("payload_size", "<= " + std::to_string(spec::kPayloadInteroperableMaxSize),
                                 std::to_string(header.payload_size))});
}

Finding check_unique_keys(const pc::Payload& payload) {
  auto in_resource = pc::duplicate_keys(payload.resource);
  auto in_attributes = pc::duplicate_keys(payload.attributes);
  if (in_resource.empty() && in_attributes.empty())
    return met("PCTX-15", 1, std::to_string(payload.resource.size()) + " resource attribute(s) and " +
                                 std::to_string(payload.attributes.size()) + " attribute(s), keys unique");
  std::string where;
  if (!in_resource.empty()) where = "resource: " + join(in_resource);
  if (!in_attributes.empty()) where += (where.empty() ? "" : "; ") + std::string("attributes: ") + join(in_attributes);
  return violated("PCTX-15", "duplicate keys (" + where + ")", {text_evidence("attribute keys", "unique", where)});
}

Finding check_threadlocal_placement(const pc::Payload& payload) {
  auto misplaced = pc::keys_with_prefix(payload.resource, spec::kThreadlocalPrefix);
  if (misplaced.empty())
    return met("PCTX-16", 1, std::to_string(pc::keys_with_prefix(payload.attributes, spec::kThreadlocalPrefix).size()) +
                                 " threadlocal.* key(s), all in attributes");
  return violated("PCTX-16", "threadlocal.* keys in the resource: " + join(misplaced) + " (they belong in attributes)",
                  {text_evidence("resource attributes", "no threadlocal.* key", join(misplaced))});
}

std::optional<std::size_t> message_end_before_payload_end(std::span<const std::uint8_t> payload) {
  if (pc::decode_payload(payload)) return std::nullopt;
  const std::size_t end = pc::complete_prefix_length(payload);
  if (end == 0 || end >= payload.size() || !pc::decode_payload(payload.first(end))) return std::nullopt;
  return end;
}

std::vector<Finding> check_mapping_read(const pc::MappingSnapshot& m, const pc::Snapshot& snapshot) {
  std::vector<Finding> out;
  const auto& read = m.read;
  const auto& header = read.header;
  // A header whose timestamp is 0 is being written (the first publication
  // included): its other fields are not yet the writer's word, and a read
  // that stopped at them says nothing against it.
  const bool being_written = header && header->published_at_ns == 0;
  const std::string requirement = read.ok() || being_written ? std::string() : requirement_of_read_error(read);

  // PCTX-01: the header is at the mapping's start (its first bytes readable).
  if (requirement == "PCTX-01") out.push_back(violated("PCTX-01", read.error->message()));
  else if (header) out.push_back(met("PCTX-01", 1, "the header is at the start of the " + describe(m.mapping)));
  else out.push_back(kit_error("PCTX-01", "the header could not be read: " + read.error->message()));

  if (being_written) {
    for (const char* id : {"PCTX-02", "PCTX-03"})
      out.push_back(not_applicable(id, "the header was being written (timestamp 0) when it was read"));
  } else if (header) {
    out.push_back(check_signature(*header));
    out.push_back(check_version(*header));
  } else {
    out.push_back(not_applicable("PCTX-02", "the header was not read"));
    out.push_back(not_applicable("PCTX-03", "the header was not read"));
  }

  const JudgedPayload judged = judged_payload(m);
  // PCTX-04: payload_size bytes readable at the pointer, and all of them the message.
  if (read.ok()) {
    if (judged.message_end)
      out.push_back(violated("PCTX-04",
                             "payload_size is " + std::to_string(header->payload_size) + " but the ProcessContext ends at byte " +
                                 std::to_string(*judged.message_end) + "; the last " +
                                 std::to_string(header->payload_size - *judged.message_end) + " byte(s) are not part of it",
                             {text_evidence("payload_size", std::to_string(*judged.message_end), std::to_string(header->payload_size))}));
    else
      out.push_back(met("PCTX-04", 1, std::to_string(header->payload_size) + " payload byte(s) readable at " + hex_address(header->payload)));
  } else if (requirement == "PCTX-04") {
    out.push_back(violated("PCTX-04", read.error->message()));
  } else {
    out.push_back(unreachable("PCTX-04", m));
  }

  // PCTX-05: it decodes.
  if (read.ok() && m.decoded && m.decoded->ok()) {
    const auto& p = m.decoded->value();
    out.push_back(met("PCTX-05", 1, "a ProcessContext: " + std::to_string(p.resource.size()) + " resource attribute(s), " +
                                        std::to_string(p.attributes.size()) + " attribute(s)" +
                                        (p.unknown_fields ? ", " + std::to_string(p.unknown_fields) + " unknown field(s)" : "")));
  } else if (judged.message_end) {
    out.push_back(met("PCTX-05", 1, "the ProcessContext before the trailing bytes decodes (payload_size: PCTX-04)"));
  } else if (read.ok() && m.decoded && requirement_of_decode_error(m.decoded->error()) == "PCTX-05") {
    out.push_back(violated("PCTX-05", "the payload is not a ProcessContext: " + m.decoded->error().message()));
  } else {
    out.push_back(unreachable("PCTX-05", m));
  }

  if (read.ok()) out.push_back(check_clock(*header, snapshot.process_start_boottime_ns, snapshot.boottime_now_ns));
  else out.push_back(unreachable("PCTX-06", m));

  if (judged.payload) {
    out.push_back(check_unique_keys(*judged.payload));
    out.push_back(check_threadlocal_placement(*judged.payload));
  } else {
    out.push_back(unreachable("PCTX-15", m));
    out.push_back(unreachable("PCTX-16", m));
  }

  if (being_written) out.push_back(not_applicable("PCTX-18", "the header was being written (timestamp 0) when it was read"));
  else if (header) out.push_back(check_payload_size(*header));
  else out.push_back(not_applicable("PCTX-18", "the header was not read"));
  return out;
}

std::vector<Finding> check_snapshot(const pc::Snapshot& snapshot) {
  std::vector<pc::ContextMapping> mappings;
  for (const auto& m : snapshot.mappings) mappings.push_back(m.mapping);

  // Every finding, by requirement, each with the mapping it is about ("" for the process).
  std::map<std::string, std::vector<std::pair<std::string, Finding>>> by_id;
  auto add = [&](std::string about, Finding f) { by_id[f.requirement].emplace_back(std::move(about), std::move(f)); };
  add("", check_mapping_present(mappings, snapshot.mappings_found));
  add("", check_single_mapping(mappings, snapshot.mappings_found));
  for (const auto& m : snapshot.mappings) {
    std::string about = describe(m.mapping);
    add(about, check_dont_fork(m.mapping));
    add(about, check_private_read_write(m.mapping));
    for (auto& f : check_mapping_read(m, snapshot)) add(about, std::move(f));
  }

  std::vector<Finding> out;
  for (auto id : kSnapshotRequirements) {
    auto found = by_id.find(std::string(id));
    if (found == by_id.end()) {
      out.push_back(not_applicable(std::string(id), "no process context mapping"));
      continue;
    }
    auto& list = found->second;
    auto worst = std::min_element(list.begin(), list.end(), [](const auto& a, const auto& b) {
      return severity(a.second.outcome) > severity(b.second.outcome);  // the worst first
    });
    Finding f = worst->second;
    if (f.outcome == Finding::Outcome::Met) {
      f.evidence_count = 0;
      for (const auto& [about, each] : list)
        if (each.outcome == Finding::Outcome::Met) f.evidence_count += each.evidence_count;
    }
    if (snapshot.mappings.size() > 1 && !worst->first.empty()) f.reason = worst->first + ": " + f.reason;
    out.push_back(std::move(f));
  }
  return out;
}

std::string requirement_of_read_error(const pc::ContextRead& read) {
  if (!read.error) return {};
  const ErrorKind kind = read.error->kind;
  switch (read.stage) {
    case pc::ReadStage::Header:
      if (kind == ErrorKind::kBadSignature) return "PCTX-02";
      if (kind == ErrorKind::kUnsupportedVersion) return "PCTX-03";
      if (kind == ErrorKind::kUnmapped) return "PCTX-01";  // the mapping's own first bytes unreadable
      return {};
    case pc::ReadStage::Payload:
      if (kind == ErrorKind::kTooLong) return "PCTX-18";
      if (kind == ErrorKind::kUnmapped) return "PCTX-04";
      return {};
    case pc::ReadStage::Timestamp:
    case pc::ReadStage::Retries:
      return {};
  }
  return {};
}

std::string requirement_of_decode_error(const Error& error) {
  // kTooLong is tracecorr's own bound, not the protocol's: no rule broken.
  return error.kind == ErrorKind::kMalformed ? "PCTX-05" : std::string();
}

}  // namespace tracecorr::otel_process_context

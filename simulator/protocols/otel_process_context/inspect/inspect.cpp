#include "otel_process_context/inspect/inspect.hpp"

#include <algorithm>
#include <cstdio>

#include "otel_process_context/checks.hpp"
#include "otel_process_context/registry.hpp"
#include "tracecorr/text.hpp"
#include "tracecorr/ids.hpp"

namespace tracecorr::otel_process_context {
namespace {

nlohmann::json or_null(const std::optional<std::uint64_t>& v) { return v ? nlohmann::json(*v) : nlohmann::json(nullptr); }

std::string perms_of(const Mapping& m) {
  return std::string{m.read ? 'r' : '-', m.write ? 'w' : '-', m.exec ? 'x' : '-', m.shared ? 's' : 'p'};
}

// How long ago, on CLOCK_BOOTTIME; nullopt for a timestamp in the future (or 0).
std::optional<std::uint64_t> age_of(std::uint64_t published_at, std::uint64_t now) {
  if (published_at == 0 || published_at > now) return std::nullopt;
  return now - published_at;
}

std::string seconds(std::uint64_t ns) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%llu.%09llu s", static_cast<unsigned long long>(ns / 1000000000ull),
                static_cast<unsigned long long>(ns % 1000000000ull));
  return buf;
}

nlohmann::json attributes_json(const process_context::AttributeList& list) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& kv : list) out.push_back({{"key", kv.key}, {"type", kv.value.type_name()}, {"value", value_json(kv.value)}});
  return out;
}

nlohmann::json mapping_json(const process_context::MappingSnapshot& m, const process_context::Snapshot& snapshot) {
  const auto& map = m.mapping.mapping;
  nlohmann::json j = {{"address", hex_address(map.start)},
                      {"end", hex_address(map.end)},
                      {"name", map.path},
                      {"kind", process_context::to_string(m.mapping.kind)},
                      {"perms", perms_of(map)},
                      {"dont_fork", m.mapping.dont_fork ? nlohmann::json(*m.mapping.dont_fork) : nlohmann::json(nullptr)}};
  const auto& read = m.read;
  if (read.header) {
    const auto& h = *read.header;
    j["header"] = {{"signature", h.signature_text()},
                   {"signature_matches", h.signature_matches()},
                   {"version", h.version},
                   {"payload_size", h.payload_size},
                   {"monotonic_published_at_ns", h.published_at_ns},
                   {"age_ns", or_null(age_of(h.published_at_ns, snapshot.boottime_now_ns))},
                   {"payload", hex_address(h.payload)}};
  } else {
    j["header"] = nullptr;
  }
  nlohmann::json retries = nlohmann::json::array();
  for (const auto& r : read.retries)
    retries.push_back({{"reason", process_context::to_string(r.reason)},
                       {"timestamp_before", r.timestamp_before},
                       {"timestamp_after", r.timestamp_after}});
  j["read"] = {{"consistent", read.ok()},
               {"retry_count", read.retries.size()},
               {"retries", retries},
               {"stage", read.ok() ? nlohmann::json(nullptr) : nlohmann::json(process_context::to_string(read.stage))},
               {"error", read.ok() ? nlohmann::json(nullptr) : nlohmann::json(read.error->message())}};
  if (m.decoded && m.decoded->ok()) {
    const auto& p = m.decoded->value();
    j["payload"] = {{"has_resource", p.has_resource},
                    {"resource", attributes_json(p.resource)},
                    {"resource_dropped_attributes_count", p.resource_dropped_attributes_count},
                    {"attributes", attributes_json(p.attributes)},
                    {"unknown_fields", p.unknown_fields},
                    {"threadlocal_keys",
                     {{"resource", process_context::keys_with_prefix(p.resource, spec::kThreadlocalPrefix)},
                      {"attributes", process_context::keys_with_prefix(p.attributes, spec::kThreadlocalPrefix)}}},
                    {"error", nullptr}};
  } else if (m.decoded) {
    j["payload"] = {{"error", m.decoded->error().message()}};
  } else {
    j["payload"] = nullptr;
  }
  return j;
}

// Target-controlled text is escaped: control characters could fake lines.
std::string safe(std::string_view text) { return tracecorr::printable_text(text); }

void print_attributes(std::string& out, const char* title, const process_context::AttributeList& list) {
  char head[64];
  std::snprintf(head, sizeof head, "  %-14s %zu\n", title, list.size());
  out += head;
  std::size_t width = 0;  // keys aligned, up to a bound (a long key takes its own width)
  for (const auto& kv : list) width = std::max(width, std::min<std::size_t>(safe(kv.key).size(), 40));
  for (const auto& kv : list) {
    std::string key = safe(kv.key);
    key.resize(std::max(key.size(), width), ' ');
    char type[32];
    std::snprintf(type, sizeof type, "%-12s", kv.value.type_name().c_str());
    out += "    " + key + "  " + type + " " + safe(kv.value.to_display()) + "\n";
  }
}

void print_mapping(std::string& out, const process_context::MappingSnapshot& m, const process_context::Snapshot& snapshot) {
  const auto& map = m.mapping.mapping;
  out += "mapping          " + safe(map.path) + "\n";
  out += "  at             " + hex_address(map.start) + "-" + hex_address(map.end) + " " + perms_of(map) + ", " +
         std::string(process_context::to_string(m.mapping.kind)) + ", MADV_DONTFORK " +
         (m.mapping.dont_fork ? (*m.mapping.dont_fork ? "yes (dc)" : "NO") : "unknown (smaps unreadable)") + "\n";
  const auto& read = m.read;
  if (read.header) {
    const auto& h = *read.header;
    out += "  header         signature \"" + h.signature_text() + "\", version " + std::to_string(h.version) +
           ", payload_size " + std::to_string(h.payload_size) + ", payload at " + hex_address(h.payload) + "\n";
    out += "  published      " + (h.published_at_ns ? seconds(h.published_at_ns) + " on CLOCK_BOOTTIME" : std::string("0 (being written)"));
    if (auto age = age_of(h.published_at_ns, snapshot.boottime_now_ns)) out += ", " + seconds(*age) + " ago";
    else if (h.published_at_ns) out += ", in the future on CLOCK_BOOTTIME";
    out += "\n";
  }
  std::string reasons;
  for (const auto& r : read.retries) reasons += (reasons.empty() ? "" : ", ") + std::string(process_context::to_string(r.reason));
  out += "  read           " + std::string(read.ok() ? "consistent" : "failed") + " after " +
         std::to_string(read.retries.size()) + " retr" + (read.retries.size() == 1 ? "y" : "ies") +
         (reasons.empty() ? "" : " (" + reasons + ")") + "\n";
  if (!read.ok()) out += "  error          " + safe(read.error->message()) + "\n";
  if (!m.decoded) return;
  if (!m.decoded->ok()) {
    out += "  payload        undecodable: " + safe(m.decoded->error().message()) + "\n";
    return;
  }
  const auto& p = m.decoded->value();
  print_attributes(out, "resource", p.resource);
  print_attributes(out, "attributes", p.attributes);
  auto in_resource = process_context::keys_with_prefix(p.resource, spec::kThreadlocalPrefix);
  auto in_attributes = process_context::keys_with_prefix(p.attributes, spec::kThreadlocalPrefix);
  std::string keys;
  for (const auto& k : in_attributes) keys += (keys.empty() ? "" : ", ") + safe(k);
  for (const auto& k : in_resource) keys += (keys.empty() ? "" : ", ") + safe(k) + " (in the resource)";
  out += "  threadlocal.*  " + (keys.empty() ? std::string("none") : keys) + "\n";
  if (p.unknown_fields) out += "  unknown fields " + std::to_string(p.unknown_fields) + "\n";
}

}  // namespace

nlohmann::json value_json(const otlp::AttributeValue& value) {
  return std::visit(
      [](const auto& v) -> nlohmann::json {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, otlp::AttributeValue::Empty>) {
          return nullptr;
        } else if constexpr (std::is_same_v<T, otlp::AttributeValue::Bytes>) {
          return {{"bytes", to_hex(v)}};
        } else if constexpr (std::is_same_v<T, otlp::AttributeValue::Array>) {
          nlohmann::json a = nlohmann::json::array();
          for (const auto& e : v) a.push_back(value_json(e));
          return a;
        } else if constexpr (std::is_same_v<T, otlp::AttributeValue::KvList>) {
          nlohmann::json a = nlohmann::json::array();
          for (const auto& kv : v) a.push_back({{"key", kv.key}, {"type", kv.value.type_name()}, {"value", value_json(kv.value)}});
          return a;
        } else {
          return v;
        }
      },
      value.value);
}

Expected<Inspection> inspect_process(pid_t pid, const process_context::ReadOptions& read) {
  auto snapshot = process_context::take_snapshot(pid, read);
  if (!snapshot) return snapshot.error();
  Inspection out;
  out.snapshot = std::move(*snapshot);
  if (out.snapshot.mappings.empty()) return out;
  // The same rules as the conformance suite's (checks.hpp); inspect lists what the writer gets wrong.
  for (auto& f : check_snapshot(out.snapshot))
    if (f.outcome == Finding::Outcome::Violated || f.outcome == Finding::Outcome::Tolerated) out.findings.push_back(std::move(f));
  return out;
}

nlohmann::json to_json(const Inspection& in) {
  const auto& s = in.snapshot;
  nlohmann::json j;
  j["pid"] = s.pid;
  j["boottime_now_ns"] = s.boottime_now_ns;
  j["process_start_boottime_ns"] = or_null(s.process_start_boottime_ns);
  j["mappings"] = nlohmann::json::array();
  for (const auto& m : s.mappings) j["mappings"].push_back(mapping_json(m, s));
  j["mappings_found"] = std::max(s.mappings_found, s.mappings.size());
  j["mappings_not_read"] = s.mappings_found > s.mappings.size() ? s.mappings_not_read() : 0;
  j["findings"] = nlohmann::json::array();
  for (const auto& f : in.findings)
    j["findings"].push_back({{"requirement", f.requirement}, {"level", level_of(f)}, {"message", finding_message(f)}});
  return j;
}

std::string render_text(const Inspection& in) {
  const auto& s = in.snapshot;
  if (s.mappings.empty()) return {};
  std::string out = "pid " + std::to_string(s.pid) + "\n";
  for (const auto& m : s.mappings) print_mapping(out, m, s);
  if (s.mappings_found > s.mappings.size())
    out += "  (" + std::to_string(s.mappings_not_read()) + " more process context mappings, not read: tracecorr reads " +
           std::to_string(process_context::kMaxMappingsRead) + " at most)\n";
  return out + findings_text(in.findings);
}

namespace {

class ProcessContextInspector final : public Inspector {
 public:
  std::string_view protocol() const override { return spec::kProtocol.id; }

  Expected<InspectReport> inspect(pid_t pid, const InspectRequest& request) const override {
    auto in = inspect_process(pid);
    if (!in) return in.error();
    InspectReport report;
    report.found = !in->snapshot.mappings.empty();
    if (!report.found)
      report.not_found = "no mapping named " + std::string(spec::kMappingNameAnonShmem) + ", " +
                         std::string(spec::kMappingNameAnon) + " or " + std::string(spec::kMappingNameMemfd);
    if (request.want_json) report.json = to_json(*in);
    if (request.want_text) report.text = render_text(*in);
    report.findings = in->findings;
    return report;
  }

  // Published: a mapping whose header carries the signature and a non-zero timestamp.
  bool published(pid_t pid) const override {
    auto mappings = process_context::discover(pid);
    if (!mappings) return false;
    LiveProcessMemory memory(pid);
    for (std::size_t i = 0; i < std::min(mappings->size(), process_context::kMaxMappingsRead); ++i) {
      const auto& m = (*mappings)[i];
      std::array<std::uint8_t, process_context::kHeaderSize> raw{};
      if (!memory.read(m.mapping.start, raw)) continue;
      auto header = process_context::parse_header(raw);
      if (header && header->signature_matches() && header->published_at_ns != 0) return true;
    }
    return false;
  }
};

}  // namespace

const Inspector& inspector() {
  static const ProcessContextInspector i;
  return i;
}

}  // namespace tracecorr::otel_process_context

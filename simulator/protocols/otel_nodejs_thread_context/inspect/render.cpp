// inspect's JSON and text for the Node.js thread context, and its Inspector.
#include <cstdio>

#include "otel_nodejs_thread_context/inspect/inspect.hpp"
#include "otel_nodejs_thread_context/registry.hpp"
#include "tracecorr/text.hpp"
#include "tracecorr/memory.hpp"
#include "tracecorr/process_context.hpp"

namespace tracecorr::otel_nodejs_thread_context {
namespace {

nlohmann::json hex_or_null(const std::optional<std::uint64_t>& v) {
  return v ? nlohmann::json(hex_address(*v)) : nlohmann::json(nullptr);
}
template <typename T>
nlohmann::json or_null(const std::optional<T>& v) {
  return v ? nlohmann::json(*v) : nlohmann::json(nullptr);
}
nlohmann::json text_or_null(const std::string& s) { return s.empty() ? nlohmann::json(nullptr) : nlohmann::json(s); }

nlohmann::json struct_json(const DiscoveryStruct& d) {
  return {{"cped_slot", hex_address(d.cped_slot)},
          {"als_handle", hex_address(d.als_handle)},
          {"als_identity_hash", d.als_identity_hash},
          {"record_slot_offset", d.record_slot_offset},
          {"reserved_zero", d.reserved_zero()},
          {"undefined_addr", hex_address(d.undefined_addr)},
          {"gate_open", d.gate_open()}};
}

nlohmann::json walk_json(const WalkTrace& w) {
  nlohmann::json hops = nlohmann::json::array();
  for (const auto& h : w.hops)
    hops.push_back({{"index", h.index}, {"address", hex_address(h.address)}, {"key", hex_address(h.key)},
                    {"value", hex_address(h.value)}, {"chain", hex_address(h.chain)}});
  return {{"end", to_string(w.end)},
          {"failed_step", w.failed_step ? nlohmann::json(to_string(*w.failed_step)) : nlohmann::json(nullptr)},
          {"error", text_or_null(w.error)},
          {"frame", hex_or_null(w.frame)},
          {"table", hex_or_null(w.table)},
          {"elements", or_null(w.elements)},
          {"deleted", or_null(w.deleted)},
          {"buckets", or_null(w.buckets)},
          {"key", hex_or_null(w.key)},
          {"bucket", or_null(w.bucket_index)},
          {"bucket_head", hex_or_null(w.bucket_head)},
          {"hops", hops},
          {"wrapper", hex_or_null(w.wrapper)},
          {"record_pointer", hex_or_null(w.record_pointer)}};
}

nlohmann::json reference_json(const Inspection& in) {
  nlohmann::json j = {{"address", hex_or_null(in.context_address)}, {"error", text_or_null(in.context_error)}};
  const auto* r = in.reference ? &*in.reference : nullptr;
  j["schema_version"] = r && r->schema_version ? nlohmann::json(*r->schema_version) : nlohmann::json(nullptr);
  j["known_schema"] = r && r->known_schema();
  j["key_map"] = r && r->key_map ? nlohmann::json(*r->key_map) : nlohmann::json(nullptr);
  nlohmann::json rev1 = nlohmann::json::object();
  if (r)
    for (const auto& [k, v] : r->revision_1_keys) rev1[k] = v;
  j["revision_1_keys"] = rev1;
  return j;
}

std::string safe(std::string_view text) { return tracecorr::printable_text(text); }

std::string walk_text(const WalkTrace& w) {
  std::string s;
  auto step = [&](const char* name, const std::string& what) { s += "\n            " + std::string(name) + " " + what; };
  const auto& d = w.discovery;
  step("struct", "cped_slot " + hex_address(d.cped_slot) + " als_handle " + hex_address(d.als_handle) + " hash " +
                     std::to_string(d.als_identity_hash) + " record_slot_offset " + std::to_string(d.record_slot_offset) +
                     " undefined " + hex_address(d.undefined_addr));
  if (w.frame) step("frame", hex_address(*w.frame));
  if (w.table) step("table", hex_address(*w.table));
  if (w.buckets)
    step("counts", std::to_string(*w.elements) + " elements, " + std::to_string(*w.deleted) + " deleted, " +
                       std::to_string(*w.buckets) + " buckets");
  if (w.key) step("key", hex_address(*w.key));
  if (w.bucket_index) step("bucket", std::to_string(*w.bucket_index) + " head " + (w.bucket_head ? hex_address(*w.bucket_head) : "?"));
  for (const auto& h : w.hops)
    step("hop", "entry " + std::to_string(h.index) + " key " + hex_address(h.key) + " value " + hex_address(h.value) +
                    " chain " + hex_address(h.chain));
  if (w.wrapper) step("wrapper", hex_address(*w.wrapper));
  if (w.record_pointer) step("record", hex_address(*w.record_pointer));
  step("end", std::string(to_string(w.end)) + (w.error.empty() ? "" : ": " + safe(w.error)));
  return s;
}

std::string record_text(const ThreadInspection& t) {
  const auto& r = *t.record;
  std::string s = "\n            valid " + std::to_string(r.valid);
  if (r.readable()) {
    char flags[8];
    std::snprintf(flags, sizeof flags, "%02x", r.trace_flags);
    s += " trace " + to_hex(r.trace_id) + " span " + to_hex(r.span_id) + " flags " + flags + " size " +
         std::to_string(r.declared_size());
  }
  if (t.attributes) {
    for (const auto& a : t.attributes->attributes) s += "\n            " + safe(a.key) + " = \"" + safe(value_text(a.value)) + "\"";
    for (auto i : t.attributes->unknown_indexes) s += "\n            (key " + std::to_string(i) + " outside the key map: ignored)";
  }
  return s;
}

std::string header_text(const Inspection& in) {
  std::string out = "pid " + std::to_string(in.pid) + "\nstruct           " + std::string(spec::kTlsSymbol) + "\n";
  if (!in.module) out += "  not defined in the .dynsym of any mapped module\n";
  else {
    const auto& m = *in.module;
    out += "  module         " + safe(m.path) + "\n";
    if (const auto& s = m.elf.tls)
      out += "  symbol         " + elf::describe_type(s->type) + " size " + std::to_string(s->size) + "\n";
    out += "  access         " + (in.access ? std::string(to_string(in.access->model)) + ": " + safe(in.access->explanation)
                                            : "unreadable: " + safe(in.access_error)) + "\n";
  }
  out += "process context  " + (in.context_address ? hex_address(*in.context_address) : std::string("none")) + "\n";
  if (in.reference) {
    const auto& r = *in.reference;
    out += "  schema         " + (r.schema_version ? "\"" + safe(*r.schema_version) + "\"" : std::string("absent")) + "\n";
    std::string keys;
    if (r.key_map)
      for (std::size_t i = 0; i < r.key_map->size(); ++i) keys += (i ? ", " : "") + std::to_string(i) + "=" + safe((*r.key_map)[i]);
    out += "  key map        " + (r.key_map ? keys : std::string("absent")) + "\n";
  }
  return out;
}

}  // namespace

nlohmann::json to_json(const Inspection& in) {
  nlohmann::json j;
  j["pid"] = in.pid;
  j["thread_pointer_source"] = in.thread_pointer_source;
  if (in.module) {
    const auto& m = *in.module;
    j["variable"] = {{"module", m.path},
                     {"size", m.elf.tls ? nlohmann::json(m.elf.tls->size) : nlohmann::json(nullptr)},
                     {"dialect", elf::to_string(m.elf.tls_access.dialect)},
                     {"relocations", m.elf.tls_access.relocations},
                     {"error", text_or_null(in.module_error)}};
  } else {
    j["variable"] = nullptr;
  }
  j["access"] = in.access ? nlohmann::json{{"model", to_string(in.access->model)}, {"error", nullptr}}
                          : nlohmann::json{{"model", nullptr}, {"error", text_or_null(in.access_error)}};
  j["process_context"] = reference_json(in);
  j["threads"] = nlohmann::json::array();
  for (const auto& t : in.threads)
    j["threads"].push_back({{"tid", t.tid},
                            {"thread_pointer", hex_or_null(t.thread_pointer)},
                            {"struct_address", hex_or_null(t.struct_address)},
                            {"struct", t.walk ? struct_json(t.walk->discovery) : nlohmann::json(nullptr)},
                            {"walk", t.walk ? walk_json(*t.walk) : nlohmann::json(nullptr)},
                            {"record", t.record ? record_json(*t.record, t.attributes ? &*t.attributes : nullptr) : nlohmann::json(nullptr)},
                            {"error", text_or_null(t.error)}});
  j["threads_error"] = text_or_null(in.threads_error);
  j["findings"] = nlohmann::json::array();
  for (const auto& f : in.findings)
    j["findings"].push_back({{"requirement", f.requirement}, {"level", level_of(f)}, {"message", finding_message(f)}});
  return j;
}

std::string render_text(const Inspection& in) {
  if (!in.found()) return {};
  std::string out = header_text(in);
  out += "threads (" + (in.thread_pointer_source.empty() ? std::string("not read") : in.thread_pointer_source) + ")\n";
  if (!in.threads_error.empty()) out += "  error: " + safe(in.threads_error) + "\n";
  for (const auto& t : in.threads) {
    char head[64];
    std::snprintf(head, sizeof head, "  %-8d", t.tid);
    out += head;
    if (t.struct_address) out += " struct " + hex_address(*t.struct_address);
    if (t.walk) out += walk_text(*t.walk);
    if (t.record) out += record_text(t);
    if (!t.error.empty()) out += " error: " + safe(t.error);
    out += "\n";
  }
  return out + findings_text(in.findings);
}

namespace {

class NodejsThreadContextInspector final : public Inspector {
 public:
  std::string_view protocol() const override { return spec::kProtocol.id; }

  Expected<InspectReport> inspect(pid_t pid, const InspectRequest& request) const override {
    InspectOptions o;
    o.thread_pointers = request.thread_pointers;
    o.read_threads = request.read_threads;
    auto in = inspect_process(pid, o);
    if (!in) return in.error();
    InspectReport report;
    report.found = in->found();
    if (!report.found)
      report.not_found = "no mapped module defines " + std::string(spec::kTlsSymbol) +
                         " in its .dynsym, and no process context declares nodejs_v1_dev or nodejs_v1";
    if (request.want_json) report.json = to_json(*in);
    if (request.want_text) report.text = render_text(*in);
    report.findings = in->findings;
    return report;
  }

  // What a profiler waits for: the struct's module mapped and the schema declared.
  bool published(pid_t pid) const override {
    LibraryCache cache;
    auto found = discover_process(pid, discovery_options(), cache);
    if (!found || !*found) return false;
    auto snapshot = process_context::take_contents_snapshot(pid);
    if (!snapshot) return false;
    auto data = reference_data_of(*snapshot);
    return data && data->known_schema();
  }
};

}  // namespace

const Inspector& inspector() {
  static const NodejsThreadContextInspector i;
  return i;
}

}  // namespace tracecorr::otel_nodejs_thread_context

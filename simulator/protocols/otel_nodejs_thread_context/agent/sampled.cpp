#include "otel_nodejs_thread_context/agent/sampled.hpp"

#include <chrono>

#include "otel_nodejs_thread_context/record.hpp"
#include "otel_nodejs_thread_context/walk.hpp"
#include "otel_nodejs_thread_context/registry.hpp"
#include "tracecorr/memory.hpp"
#include "tracecorr/process_context.hpp"
#include "tracecorr/text.hpp"
#include "tracecorr/tls.hpp"

namespace tracecorr::otel_nodejs_thread_context {
namespace {

// A key map is read again at most this often (a record naming an index the
// map lacks asks for it, NJSR-12).
constexpr std::chrono::milliseconds kKeyMapRefreshInterval{500};

// How this reader reads: conforming, or with the defects in force
// (`--reader-defect`, profiler mode's kill matrix), each breaking one rule.
struct ReadingPolicy {
  WalkDefects walk;
  bool ignore_valid = false;     // ignores-valid, NJSR-12: a record whose valid is not 1 read as if valid
  bool read_any_schema = false;  // walks-any-schema, NJSR-01: the walk under any schema, or none
};

std::vector<ReaderDefect> node_reader_defects() {
  return {
      {"ignores-valid", "NJSR-12", "a record at the walk's end whose valid byte is not 1 is exported as if valid"},
      {"walks-any-schema", "NJSR-01", "the walk is taken whatever threadlocal.schema_version says, or without one"},
      {"caches-struct", "NJSR-04",
       "ptrace reader only: each thread's discovery struct is read once and reused (a closed gate goes unseen)"},
      {"ignores-forwarding", "NJSR-06", "ptrace reader only: a table whose element count is a heap pointer (a "
                                        "rehash's forwarding pointer) is searched as if current"},
      {"bounds-by-elements", "NJSR-08",
       "ptrace reader only: entry indexes are bound by the element count alone, not elements plus deleted"},
      {"checks-map-words", "NJSR-14",
       "ptrace reader only: objects whose map word is not a heap pointer (a forwarding address) are refused"},
  };
}

ReadingPolicy reading_policy(const ReaderDefects& d) {
  ReadingPolicy p;
  p.walk = {d.has("caches-struct"), d.has("ignores-forwarding"), d.has("bounds-by-elements"), d.has("checks-map-words")};
  p.ignore_valid = d.has("ignores-valid");
  p.read_any_schema = d.has("walks-any-schema");
  return p;
}

// The package's layout, with the walk the policy makes.
RecordLayout layout_for(const ReadingPolicy& policy) {
  RecordLayout l = thread_context_record_layout();
  if (policy.walk.any()) l.indirection = WalkFromTlsSlot{context_map_walk(policy.walk)};
  return l;
}

// The record as an exported observation's context (valid 1: a link, its
// flags, its attributes by name; otherwise none).
RecordContext record_context(const ThreadContextRecord& record, const NamedAttributes& named,
                             const ReadingPolicy& policy) {
  if (!record.readable() && !policy.ignore_valid) return {};
  std::vector<NamedValue> values;
  for (const auto& a : named.attributes) values.push_back({a.key, a.value});
  return linked_context(record.trace_id, record.span_id, record.trace_flags, values, named.unknown_indexes.empty());
}

// One process's records: the struct's module and how its threads reach it,
// and the key map naming their attributes.
class NodeThreadRecords final : public SampledRecords {
 public:
  NodeThreadRecords(pid_t pid, AgentLibrary module, TlsVariableAccess access, ReferenceData reference,
                    const ReadingPolicy& policy)
      : pid_(pid),
        module_(std::move(module)),
        access_(std::move(access)),
        reference_(std::move(reference)),
        policy_(policy),
        layout_(layout_for(policy)) {
    if (reference_.key_map) key_map_ = *reference_.key_map;
  }

  const RecordLayout& layout() const override { return layout_; }
  PointerSite site() const override { return access_.site; }

  std::string where() const override {
    std::string text = std::string(spec::kTlsSymbol) + " in " + module_.path + ", " + to_string(access_.model);
    text += access_.dynamic() ? ", through each thread's DTV (" + std::string(to_string(access_.c_library)) + ")"
                              : ", thread pointer " + signed_offset(access_.site.value);
    return text + ", then V8's context map";
  }

  nlohmann::json description() const override {
    nlohmann::json j = {{"variable", std::string(spec::kTlsSymbol)},
                        {"module", module_.path},
                        {"executable", module_.elf.executable},
                        {"access_model", to_string(access_.model)},
                        {"dynamic_tls", access_.dynamic()},
                        {"c_library", to_string(access_.c_library)},
                        {"explanation", access_.explanation},
                        {"walk", layout_walk_name()},
                        {"schema_version", reference_.schema_version ? nlohmann::json(*reference_.schema_version)
                                                                     : nlohmann::json(nullptr)},
                        {"key_map", key_map_},
                        {"key_map_refreshed", key_map_refreshed_},
                        {"key_map_reads", refresher_.reads()}};
    if (access_.dynamic()) {
      j["module_id"] = access_.site.module->module_id;
      j["offset"] = hex_address(access_.site.value);
    } else {
      j["tp_offset"] = static_cast<std::int64_t>(access_.site.value);
    }
    return j;
  }

  nlohmann::json decode(std::span<const std::uint8_t> bytes) override {
    auto record = decode_record(bytes);
    if (!record) return {{"error", record.error().message()}};
    if (!record->readable()) return record_json(*record, nullptr);
    auto named = name_attributes(*record, key_map_, [this] { return refresh_key_map(); });
    return record_json(*record, &named);
  }

  RecordContext context(std::span<const std::uint8_t> bytes) override {
    auto record = decode_record(bytes);
    if (!record) return {};  // record_context applies the valid rule
    return record_context(*record, name_attributes(*record, key_map_, [this] { return refresh_key_map(); }), policy_);
  }

 private:
  static std::string signed_offset(std::uint64_t value) {
    const auto v = static_cast<std::int64_t>(value);
    return (v < 0 ? "- " : "+ ") + std::to_string(v < 0 ? -v : v);
  }
  std::string layout_walk_name() const {
    return std::get<WalkFromTlsSlot>(layout().indirection).walk->name();
  }
  // NJSR-12's refresh, at most once per kKeyMapRefreshInterval (the engine's refresher).
  std::optional<KeyMap> refresh_key_map() {
    auto fresh = refresher_.refresh();
    if (fresh) {
      key_map_ = *fresh;
      key_map_refreshed_ = true;
    }
    return fresh;
  }

  pid_t pid_;
  AgentLibrary module_;
  TlsVariableAccess access_;
  ReferenceData reference_;
  ReadingPolicy policy_;
  RecordLayout layout_;
  KeyMap key_map_;
  bool key_map_refreshed_ = false;
  process_context::KeyMapRefresher refresher_{pid_, kKeyMapRefreshInterval, current_key_map};
};

class NodeThreadContextProtocol final : public SampledProtocol {
 public:
  std::string_view id() const override { return spec::kProtocol.id; }

  Expected<std::unique_ptr<SampledRecords>> locate(pid_t pid, LibraryCache& cache,
                                                   const ReaderDefects& defects) const override {
    const auto policy = reading_policy(defects);
    auto found = discover_process(pid, discovery_options(), cache);
    if (!found) return found.error();
    if (!*found) return std::unique_ptr<SampledRecords>();  // no module defines the struct
    AgentLibrary module = std::move(**found);
    if (!module.analysis_error.empty()) return make_error(module.analysis_error, module.path);
    if (!module.elf.tls || !module.elf.tls->thread_local_storage())
      return make_error(std::string(spec::kTlsSymbol) + " is not a thread-local variable (NJS-02)", module.path);
    if (module.elf.tls->size != spec::kDiscoverySize)
      return make_error(ErrorKind::kMalformed,
                        std::string(spec::kTlsSymbol) + " is " + std::to_string(module.elf.tls->size) +
                            " bytes, not the " + std::to_string(spec::kDiscoverySize) + " of the struct (NJS-02)",
                        module.path);
    auto reference = announced_schema(pid, policy);
    if (!reference) return reference.error();
    auto c_library = detect_c_library(pid, module.elf.machine);
    LiveProcessMemory memory(pid);
    auto access = resolve_tls_access(memory, module, c_library ? *c_library : CLibrary::Unknown);
    if (!access) return access.error();
    return std::unique_ptr<SampledRecords>(
        std::make_unique<NodeThreadRecords>(pid, std::move(module), std::move(*access), std::move(*reference), policy));
  }
  std::vector<ReaderDefect> reader_defects() const override { return node_reader_defects(); }

 private:
  // NJSR-01: only a context announcing this schema selects the walk. Its
  // absence may be the writer's start-up (the context comes after the addon):
  // kNotReady, asked again at the next rescan.
  static Expected<ReferenceData> announced_schema(pid_t pid, const ReadingPolicy& policy) {
    auto snapshot = process_context::take_contents_snapshot(pid);
    std::optional<ReferenceData> reference;
    if (snapshot) reference = reference_data_of(*snapshot);
    if (policy.read_any_schema) return reference ? std::move(*reference) : ReferenceData{};
    if (!reference || !reference->schema_version)
      return make_error(ErrorKind::kNotReady, "no process context announces threadlocal.schema_version yet (NJSR-01)",
                        "pid " + std::to_string(pid));
    if (!reference->known_schema())
      return make_error(ErrorKind::kUnsupported,
                        "announced under another schema: " + printable_text(*reference->schema_version) + " (NJSR-01)",
                        "pid " + std::to_string(pid));
    return std::move(*reference);
  }
};

}  // namespace

const SampledProtocol& sampled_protocol() {
  static const NodeThreadContextProtocol protocol;
  return protocol;
}

}  // namespace tracecorr::otel_nodejs_thread_context

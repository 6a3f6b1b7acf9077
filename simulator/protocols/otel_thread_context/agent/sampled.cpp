#include "otel_thread_context/agent/sampled.hpp"

#include <cstdlib>
#include <functional>

#include "otel_thread_context/record.hpp"
#include "otel_thread_context/registry.hpp"
#include "tracecorr/memory.hpp"
#include "tracecorr/process_context.hpp"
#include "tracecorr/text.hpp"
#include "tracecorr/tls.hpp"

namespace tracecorr::otel_thread_context {
namespace {

// A key map is read again at most once per rescan of the agent's processes.
constexpr std::chrono::milliseconds kKeyMapRefreshInterval{500};

// One process's records: the variable's module and how its threads reach it,
// and the key map that names their attributes (refreshed when a record
// carries an index the map lacks, TCTXR-10, at most every
// kKeyMapRefreshInterval).
class ThreadRecords final : public SampledRecords {
 public:
  ThreadRecords(pid_t pid, AgentLibrary module, TlsVariableAccess access, std::optional<ReferenceData> reference,
                ReadingPolicy policy)
      : pid_(pid),
        module_(std::move(module)),
        access_(std::move(access)),
        reference_(std::move(reference)),
        policy_(policy),
        keys_at_discovery_(reference_ && (reference_->schema_version_value || reference_->key_map_value)) {
    if (reference_ && reference_->key_map) key_map_ = *reference_->key_map;
  }

  const RecordLayout& layout() const override { return thread_context_record_layout(); }
  PointerSite site() const override { return access_.site; }

  std::string where() const override {
    std::string text = std::string(spec::kTlsSymbol) + " in " + module_.path + ", " + to_string(access_.model);
    if (access_.dynamic())
      text += ", through each thread's DTV (" + std::string(to_string(access_.c_library)) + ")";
    else
      text += ", thread pointer " + std::string(static_cast<std::int64_t>(access_.site.value) < 0 ? "- " : "+ ") +
              std::to_string(std::abs(static_cast<std::int64_t>(access_.site.value)));
    return text;
  }

  nlohmann::json description() const override {
    nlohmann::json j = {{"variable", std::string(spec::kTlsSymbol)},
                        {"module", module_.path},
                        {"executable", module_.elf.executable},
                        {"access_model", to_string(access_.model)},
                        {"dynamic_tls", access_.dynamic()},
                        {"c_library", to_string(access_.c_library)},
                        {"explanation", access_.explanation}};
    if (access_.dynamic()) {
      j["module_id"] = access_.site.module->module_id;
      j["offset"] = hex_address(access_.site.value);
    } else {
      j["tp_offset"] = static_cast<std::int64_t>(access_.site.value);
    }
    j["schema_version"] = reference_ && reference_->schema_version ? nlohmann::json(*reference_->schema_version)
                                                                   : nlohmann::json(nullptr);
    j["key_map"] = key_map_refreshed_ || (reference_ && reference_->key_map) ? nlohmann::json(key_map_)
                                                                             : nlohmann::json(nullptr);
    j["key_map_refreshed"] = key_map_refreshed_;
    j["key_map_reads"] = refresher_.reads();
    return j;
  }

  nlohmann::json decode(std::span<const std::uint8_t> bytes) override {
    if (unreachable()) return {{"error", kUnreachable}};
    auto record = decode_record(bytes, policy_);
    if (!record) return {{"error", record.error().message()}};
    // Its entries are not read (TCTXR-07, 08) unless the reader is defective.
    if (!record->readable() && !policy_.ignore_valid) return record_json(*record, nullptr);
    auto named = name_attributes(*record, key_map_, refresher(), policy_);
    return record_json(*record, &named);
  }

  RecordContext context(std::span<const std::uint8_t> bytes) override {
    if (unreachable()) return {};
    auto record = decode_record(bytes, policy_);
    if (!record || (!record->readable() && !policy_.ignore_valid)) return {};
    return record_context(*record, name_attributes(*record, key_map_, refresher(), policy_), policy_);
  }

  RecordContext context_at(std::span<const std::uint8_t> bytes, std::uint64_t address) override {
    if (!policy_.unbounded_record || address == 0) return context(bytes);
    auto whole = read_past_bound(bytes, address);
    return context(whole.empty() ? bytes : std::span<const std::uint8_t>(whole));
  }

 private:
  static constexpr const char* kUnreachable =
      "not read: dynamic TLS, and the reader defect static-tls-only walks no DTV (TCTXR-05); or no threadlocal keys "
      "at discovery, and the reader defect never-looks-again never looked again (TCTXR-02)";
  // unbounded-record (TCTXR-16): a record cut at the read bound read again
  // whole, as long as it declares (at most 28 + 65535 bytes); empty when it
  // was not cut or cannot be read.
  std::vector<std::uint8_t> read_past_bound(std::span<const std::uint8_t> bytes, std::uint64_t address) const {
    auto record = decode_record(bytes, policy_);
    if (!record || record->declared_size() <= bytes.size()) return {};
    std::vector<std::uint8_t> whole(record->declared_size());
    if (!LiveProcessMemory(pid_).read(address, whole)) return {};
    return whole;
  }
  // static-tls-only (TCTXR-05): a reader that reaches records only from the
  // thread pointer gets none here; never-looks-again (TCTXR-02): one that
  // found no threadlocal keys at discovery gives up on the process for good.
  bool unreachable() const {
    return (policy_.static_tls_only && access_.dynamic()) || (policy_.never_look_again && !keys_at_discovery_);
  }
  // TCTXR-10's refresh, which never-refreshes-key-map leaves out.
  std::function<std::optional<KeyMap>()> refresher() {
    if (policy_.never_refresh_key_map) return {};
    return [this] { return refresh_key_map(); };
  }

  // TCTXR-10: a record names an index the map lacks (at most once per kKeyMapRefreshInterval).
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
  std::optional<ReferenceData> reference_;
  ReadingPolicy policy_;
  bool keys_at_discovery_;  // the process context carried threadlocal.* keys when the records were located
  KeyMap key_map_;
  bool key_map_refreshed_ = false;
  KeyMapRefresher refresher_{pid_, kKeyMapRefreshInterval, current_key_map};
};

// reads-any-schema (TCTXR-03): where the variable is not found, a lookalike
// discovery passed over (otel_thread_ctx_nodejs_v1, say) is read as if it were.
Expected<std::optional<AgentLibrary>> find_variable(pid_t pid, LibraryCache& cache, const ReadingPolicy& policy) {
  std::vector<PassedOver> passed_over;
  auto found = discover_process(pid, discovery_options(), cache, &passed_over);
  if (!found || *found || !policy.read_any_schema || passed_over.empty()) return found;
  DiscoveryOptions lookalike = discovery_options();
  lookalike.tls_symbol = passed_over.front().symbol;
  LibraryCache own;  // analysed for another symbol: not the shared cache's
  return discover_process(pid, lookalike, own);
}

class ThreadContextProtocol final : public SampledProtocol {
 public:
  std::string_view id() const override { return spec::kProtocol.id; }

  std::vector<ReaderDefect> reader_defects() const override { return thread_context_reader_defects(); }

  Expected<std::unique_ptr<SampledRecords>> locate(pid_t pid, LibraryCache& cache,
                                                   const ReaderDefects& defects) const override {
    const ReadingPolicy policy = reading_policy(defects);
    auto found = find_variable(pid, cache, policy);
    if (!found) return found.error();
    // Under another schema (TCTXR-03) the records live elsewhere: listed with
    // what was seen, never read (unless the reader is defective).
    std::optional<ReferenceData> reference;
    if (auto snapshot = process_context::take_contents_snapshot(pid)) reference = reference_data_of(*snapshot);
    if (reference && !policy.read_any_schema)
      if (auto other = other_schema(pid, *reference, cache))
        return make_error(ErrorKind::kUnsupported, "announced under another " + *other, "pid " + std::to_string(pid));
    if (!*found) return std::unique_ptr<SampledRecords>();  // no module defines the variable
    AgentLibrary module = std::move(**found);
    if (!module.analysis_error.empty()) return make_error(module.analysis_error, module.path);
    if (!module.elf.tls || !module.elf.tls->thread_local_storage())
      return make_error(std::string(spec::kTlsSymbol) + " is not a thread-local variable (TCTX-02)", module.path);
    auto c_library = detect_c_library(pid, module.elf.machine);
    LiveProcessMemory memory(pid);
    auto access = resolve_tls_access(memory, module, c_library ? *c_library : CLibrary::Unknown);
    if (!access) return access.error();
    return std::unique_ptr<SampledRecords>(
        std::make_unique<ThreadRecords>(pid, std::move(module), std::move(*access), std::move(reference), policy));
  }
};

}  // namespace

RecordContext record_context(const ThreadContextRecord& record, const NamedAttributes& named,
                             const ReadingPolicy& policy) {
  if (!record.readable() && !policy.ignore_valid) return {};
  std::vector<NamedValue> values;
  for (const auto& a : named.attributes) values.push_back({a.key, a.value});
  return linked_context(record.trace_id, record.span_id, record.trace_flags, values, named.unknown_indexes.empty());
}

// Each defect's name, and what it breaks, in the words of the rules (spec/otel-thread-context.md).
std::vector<ReaderDefect> thread_context_reader_defects() {
  return {
      {"ignores-valid", "TCTXR-08", "a thread record whose valid byte is not 1 is read and exported as if valid"},
      {"never-refreshes-key-map", "TCTXR-10",
       "the key map read at discovery is never refreshed: entries it lacks are dropped"},
      {"keeps-out-of-map", "TCTXR-11", "entries past the key map are exported, as tracecorr.index.N"},
      {"first-duplicate-wins", "TCTXR-12", "a key stored twice in a record takes its first value, not its last"},
      {"reads-any-schema", "TCTXR-03",
       "records are read under any threadlocal.schema_version, through a lookalike variable when the OTEP's is absent"},
      {"static-tls-only", "TCTXR-05", "no DTV walk: records in dynamically allocated TLS give no context"},
      {"never-looks-again", "TCTXR-02",
       "a process whose context had no threadlocal.* keys when it was found is never read, keys published later or not"},
      {"unbounded-record", "TCTXR-16",
       "a record declaring more than the 1024-byte bound is read whole: entries past the bound are exported"},
      // The sampler's (PtraceSamplerOptions::reads_running_thread): it reads every layout the same way.
      {"reads-running-thread", "TCTXR-06",
       "ptrace reader only: the record is read while its thread runs, its ids in two reads 1 ms apart "
       "(torn pairs against a writer updating in place)"},
  };
}

ReadingPolicy reading_policy(const ReaderDefects& defects) {
  ReadingPolicy p;
  p.ignore_valid = defects.has("ignores-valid");
  p.never_refresh_key_map = defects.has("never-refreshes-key-map");
  p.keep_out_of_map = defects.has("keeps-out-of-map");
  p.first_duplicate_wins = defects.has("first-duplicate-wins");
  p.read_any_schema = defects.has("reads-any-schema");
  p.static_tls_only = defects.has("static-tls-only");
  p.unbounded_record = defects.has("unbounded-record");
  p.never_look_again = defects.has("never-looks-again");
  return p;
}

const SampledProtocol& sampled_protocol() {
  static const ThreadContextProtocol protocol;
  return protocol;
}

}  // namespace tracecorr::otel_thread_context

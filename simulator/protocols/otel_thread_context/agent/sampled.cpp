#include "otel_thread_context/agent/sampled.hpp"

#include <cstdlib>

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
  ThreadRecords(pid_t pid, AgentLibrary module, TlsVariableAccess access, std::optional<ReferenceData> reference)
      : pid_(pid), module_(std::move(module)), access_(std::move(access)), reference_(std::move(reference)) {
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
    auto record = decode_record(bytes);
    if (!record) return {{"error", record.error().message()}};
    if (!record->readable()) return record_json(*record, nullptr);  // its entries are not read (TCTXR-07, 08)
    auto named = name_attributes(*record, key_map_, [&] { return refresh_key_map(); });
    return record_json(*record, &named);
  }

  RecordContext context(std::span<const std::uint8_t> bytes) override {
    auto record = decode_record(bytes);
    if (!record || !record->readable()) return {};
    return record_context(*record, name_attributes(*record, key_map_, [&] { return refresh_key_map(); }));
  }

 private:
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
  KeyMap key_map_;
  bool key_map_refreshed_ = false;
  KeyMapRefresher refresher_{pid_, kKeyMapRefreshInterval};
};

class ThreadContextProtocol final : public SampledProtocol {
 public:
  std::string_view id() const override { return spec::kProtocol.id; }

  Expected<std::unique_ptr<SampledRecords>> locate(pid_t pid, LibraryCache& cache) const override {
    auto found = discover_process(pid, discovery_options(), cache);
    if (!found) return found.error();
    // Under another schema (TCTXR-03) the records live elsewhere: listed with
    // what was seen, never read.
    std::optional<ReferenceData> reference;
    if (auto snapshot = process_context::take_contents_snapshot(pid)) reference = reference_data_of(*snapshot);
    if (reference)
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
        std::make_unique<ThreadRecords>(pid, std::move(module), std::move(*access), std::move(reference)));
  }
};

}  // namespace

RecordContext record_context(const ThreadContextRecord& record, const NamedAttributes& named) {
  RecordContext context;
  if (!record.readable()) return context;
  if (!is_zero(record.trace_id) || !is_zero(record.span_id)) {
    context.link = RecordContext::Link{record.trace_id, record.span_id};
    context.trace_flags = record.trace_flags;
  }
  otlp::Attributes attributes;
  for (const auto& a : named.attributes) {
    std::string text(a.value.begin(), a.value.end());
    if (valid_utf8(text))
      attributes.emplace(a.key, otlp::AttributeValue(std::move(text)));
    else
      attributes.emplace(a.key, otlp::AttributeValue(otlp::AttributeValue::Bytes(a.value)));
  }
  if (!attributes.empty()) context.attributes = std::make_shared<const otlp::Attributes>(std::move(attributes));
  context.settled = named.unknown_indexes.empty();
  return context;
}

const SampledProtocol& sampled_protocol() {
  static const ThreadContextProtocol protocol;
  return protocol;
}

}  // namespace tracecorr::otel_thread_context

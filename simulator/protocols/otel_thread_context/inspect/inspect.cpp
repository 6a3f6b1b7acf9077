#include "otel_thread_context/inspect/inspect.hpp"

#include <cstdio>
#include <map>

#include "otel_thread_context/registry.hpp"
#include "tracecorr/text.hpp"
#include "tracecorr/ids.hpp"
#include "tracecorr/memory.hpp"
#include "tracecorr/process_context.hpp"

namespace tracecorr::otel_thread_context {
namespace {

namespace pc = tracecorr::process_context;

bool worth_listing(const Finding& f) {
  return f.outcome == Finding::Outcome::Violated || f.outcome == Finding::Outcome::Tolerated;
}

void add_findings(std::vector<Finding> found, std::vector<Finding>& out) {
  for (auto& f : found)
    if (worth_listing(f)) out.push_back(std::move(f));
}

// How a thread's copy of the variable is reached, in the words inspect uses:
// the thread pointer plus a fixed offset, or the module's block in the DTV.
const char* reached_by(const TlsVariableAccess& a) { return a.dynamic() ? "dtv" : "static-offset"; }

// The process context and its reference data (TCTXR-01), read once.
void read_reference_data(pid_t pid, Inspection& out) {
  auto snapshot = pc::take_contents_snapshot(pid);
  if (!snapshot) {
    out.context_error = snapshot.error().message();
    return;
  }
  if (snapshot->mappings.empty()) {
    out.context_error = "no process context mapping";
    return;
  }
  out.context_address = snapshot->mappings.front().mapping.mapping.start;
  out.reference = reference_data_of(*snapshot);
  if (!out.reference) {
    const auto& read = snapshot->mappings.front();
    out.context_error = read.read.error ? read.read.error->message()
                        : read.decoded && !read.decoded->ok() ? read.decoded->error().message()
                                                              : "the process context could not be decoded";
  }
}

// What one thread's stop read (TCTXR-06): its variable, pointer and record.
// The three reads are separate so that only a record the pointer leads to
// unreadably (TCTX-12) is held against the writer, never the variable's own read.
struct StoppedThread {
  std::optional<std::uint64_t> thread_pointer, variable_address, record_pointer;
  std::optional<Error> variable_error, record_error;
  std::optional<RecordRead> record_read;
  std::optional<bool> window_readable;
};

// Runs while the thread is stopped: reads only, decodes nothing.
void read_while_stopped(StoppedThread& t, std::uint64_t tp, const ProcessMemory& memory, const TlsVariableAccess& access) {
  const RecordLayout& layout = thread_context_record_layout();
  t.thread_pointer = tp;
  if (tp == 0) return;
  auto slot = pointer_address(memory, layout, access.site, tp);
  if (!slot) {
    t.variable_error = slot.error();
    return;
  }
  t.variable_address = *slot;
  auto pointer = memory.read_u64(*slot);
  if (!pointer) {
    t.variable_error = pointer.error().within(std::string(spec::kTlsSymbol) + " at " + hex_address(*slot));
    return;
  }
  t.record_pointer = *pointer;
  if (*pointer == 0) return;  // NULL: no context on this thread
  auto read = read_record(memory, layout, *pointer);
  if (!read) {
    t.record_error = read.error();
    return;
  }
  t.record_read = std::move(*read);
  // A reader copying a fixed 640-byte window (TCTX-20's tolerated case):
  // one byte at its end tells whether that copy would succeed.
  if (t.record_read->bytes.size() < spec::kRecordRecommendedMaxSize) {
    std::uint8_t last = 0;
    t.window_readable = memory.read(*pointer + spec::kRecordRecommendedMaxSize - 1, {&last, 1}).ok();
  }
}

// One thread, once every thread runs again: what its stop read, decoded,
// named (the key map refreshed at most once per look: `refresher`) and judged.
ThreadInspection inspect_thread(pid_t tid, const Status& stopped, const StoppedThread& s, KeyMapRefresher& refresher,
                                Inspection& out) {
  ThreadInspection t;
  t.tid = tid;
  t.thread_pointer = s.thread_pointer;
  t.variable_address = s.variable_address;
  t.record_pointer = s.record_pointer;
  if (!stopped) {
    t.error = stopped.error().message();
    return t;
  }
  if (!t.thread_pointer || *t.thread_pointer == 0) {
    t.error = "the thread pointer is 0 (the thread has not set up TLS yet)";
    return t;
  }
  if (s.variable_error) {  // kNotAllocated: dynamic TLS the thread has not touched, nothing published
    t.error = s.variable_error->message();
    return t;
  }
  if (s.record_error) {
    t.error = s.record_error->message();
    const std::string id = requirement_of_record_read_error(*s.record_error);
    if (!id.empty()) out.findings.push_back(violated(id, "thread " + std::to_string(tid) + ": " + s.record_error->message()));
    return t;
  }
  if (!s.record_read) return t;
  auto record = decode_record(s.record_read->bytes);
  if (!record) {
    t.error = record.error().message();
    return t;
  }
  t.record = std::move(*record);
  if (t.record->readable()) {
    // A copy: the refresh below may replace the inspection's map.
    const KeyMap map = out.reference && out.reference->key_map ? *out.reference->key_map : KeyMap{};
    t.attributes = name_attributes(*t.record, map, [&]() -> std::optional<KeyMap> {
      auto fresh = refresher.refresh();
      if (fresh && out.reference) {
        out.reference->key_map = fresh;
        out.key_map_refreshed = true;
      }
      return fresh;
    });
  }
  RecordLook look{tid, *t.record_pointer, *t.record, s.window_readable};
  add_findings(check_record(look, out.reference && out.reference->key_map ? &*out.reference->key_map : nullptr),
               out.findings);
  return t;
}

// Every thread stopped together, each let go right after its read, with one
// deadline for them all (ThreadPointerSource::read_each_stopped); decoded and
// judged once they all run again.
void inspect_threads(const ProcessMemory& memory, ThreadPointerSource& source, Inspection& out) {
  auto tids = source.threads();
  if (!tids) {
    out.threads_error = tids.error().message();
    return;
  }
  if (!out.access) {
    for (pid_t tid : *tids) {
      ThreadInspection t;
      t.tid = tid;
      t.error = "the variable cannot be reached: " + out.access_error;
      out.threads.push_back(std::move(t));
    }
    return;
  }
  std::vector<StoppedThread> read(tids->size());
  std::map<pid_t, std::size_t> index_of;
  for (std::size_t i = 0; i < tids->size(); ++i) index_of[(*tids)[i]] = i;
  const TlsVariableAccess& access = *out.access;
  auto stopped = source.read_each_stopped(*tids, [&](pid_t tid, std::uint64_t tp) {
    read_while_stopped(read[index_of.at(tid)], tp, memory, access);
  }, kStopAllDeadline);
  KeyMapRefresher refresher(out.pid, KeyMapRefresher::kOncePerLook, current_key_map);
  for (std::size_t i = 0; i < tids->size(); ++i)
    out.threads.push_back(inspect_thread((*tids)[i], stopped[i], read[i], refresher, out));
  out.key_map_reads = refresher.reads();
}

nlohmann::json hex_or_null(const std::optional<std::uint64_t>& v) {
  return v ? nlohmann::json(hex_address(*v)) : nlohmann::json(nullptr);
}

nlohmann::json text_or_null(const std::string& s) { return s.empty() ? nlohmann::json(nullptr) : nlohmann::json(s); }

nlohmann::json symbol_json(const std::optional<elf::Symbol>& s) {
  if (!s) return nullptr;
  return {{"name", s->name},
          {"value", hex_address(s->value)},
          {"size", s->size},
          {"type", elf::describe_type(s->type)},
          {"binding", elf::describe_binding(s->binding)},
          {"visibility", elf::describe_visibility(s->visibility)},
          {"defined", s->defined()}};
}

nlohmann::json access_json(const Inspection& in) {
  if (!in.access) return {{"model", nullptr}, {"error", text_or_null(in.access_error)}};
  const auto& a = *in.access;
  nlohmann::json j = {{"model", to_string(a.model)},
                      {"reached_by", reached_by(a)},
                      {"c_library", to_string(in.c_library)},
                      {"explanation", a.explanation},
                      {"error", nullptr}};
  if (a.dynamic()) {
    j["module_id"] = a.site.module->module_id;
    j["offset"] = hex_address(a.site.value);
    j["generation"] = a.site.module->generation ? nlohmann::json(*a.site.module->generation) : nlohmann::json(nullptr);
  } else {
    j["tp_offset"] = static_cast<std::int64_t>(a.site.value);
  }
  return j;
}

nlohmann::json reference_json(const Inspection& in) {
  nlohmann::json j = {{"address", hex_or_null(in.context_address)}, {"error", text_or_null(in.context_error)}};
  if (!in.reference) {
    j["schema_version"] = nullptr;
    j["known_schema"] = false;
    j["key_map"] = nullptr;
    return j;
  }
  const auto& r = *in.reference;
  j["schema_version"] = r.schema_version ? nlohmann::json(*r.schema_version)
                        : r.schema_version_value ? nlohmann::json(r.schema_version_value->to_display())
                                                 : nlohmann::json(nullptr);
  j["known_schema"] = r.known_schema();
  j["key_map"] = r.key_map ? nlohmann::json(*r.key_map) : nlohmann::json(nullptr);
  j["key_map_value"] = r.key_map_value ? nlohmann::json(r.key_map_value->to_display()) : nlohmann::json(nullptr);
  j["key_map_refreshed"] = in.key_map_refreshed;
  j["keys_in_resource"] = r.keys_in_resource;
  j["key_map_reads"] = in.key_map_reads;
  return j;
}

}  // namespace

bool Inspection::found() const {
  return module.has_value() || (reference && reference->announces_thread_context());
}

Expected<Inspection> inspect_process(pid_t pid, const InspectOptions& o) {
  Inspection out;
  out.pid = pid;
  LibraryCache cache;
  auto found = discover_process(pid, discovery_options(), cache, &out.passed_over);
  if (!found) return found.error();
  read_reference_data(pid, out);
  bool records_carry_entries = false;
  // TCTXR-03: under another schema the records live elsewhere; none is read or judged.
  if (out.reference) out.other_schema = other_schema(pid, *out.reference, cache);
  if (out.other_schema) return out;

  if (*found) {
    out.module = std::move(**found);
    const auto& module = *out.module;
    if (!module.analysis_error.empty()) {
      out.module_error = module.analysis_error;
    } else {
      add_findings(check_variable(module), out.findings);
      LiveProcessMemory memory(pid);
      if (module.elf.tls && module.elf.tls->thread_local_storage()) {
        auto c_library = detect_c_library(pid, module.elf.machine);
        if (c_library) out.c_library = *c_library;
        auto access = resolve_tls_access(memory, module, out.c_library);
        if (access) out.access = *access;
        else out.access_error = access.error().message();
      } else {
        out.access_error = std::string(spec::kTlsSymbol) + " is not a thread-local variable";
      }
      if (o.read_threads) {
        std::unique_ptr<ThreadPointerSource> own;
        ThreadPointerSource* source = o.thread_pointers;
        if (!source) {
          own = make_ptrace_source(pid);
          source = own.get();
        }
        out.thread_pointer_source = source->describe();
        inspect_threads(memory, *source, out);
        if (auto st = source->resume(); !st && out.threads_error.empty()) out.threads_error = st.error().message();
      }
      for (const auto& t : out.threads)
        if (t.record && !t.record->entries.empty()) records_carry_entries = true;
    }
  } else if (out.found()) {
    // The process context announces thread records, yet no module exports the variable.
    out.findings.push_back(violated("TCTX-01", "the process context carries threadlocal.* keys, but " +
                                                   variable_not_found(out.passed_over)));
  }
  if (out.found()) add_findings(check_reference_data(out.reference, records_carry_entries), out.findings);
  return out;
}

nlohmann::json to_json(const Inspection& in) {
  nlohmann::json j;
  j["pid"] = in.pid;
  j["thread_pointer_source"] = in.thread_pointer_source;
  if (in.module) {
    const auto& m = *in.module;
    j["variable"] = {{"module", m.path},
                     {"deleted", m.deleted},
                     {"executable", m.elf.executable},
                     {"machine", elf::to_string(m.elf.machine)},
                     {"load_bias", hex_address(m.load_bias)},
                     {"symbol", symbol_json(m.elf.tls)},
                     {"dialect", elf::to_string(m.elf.tls_access.dialect)},
                     {"relocations", m.elf.tls_access.relocations},
                     {"error", text_or_null(in.module_error)}};
  } else {
    j["variable"] = nullptr;
  }
  j["passed_over"] = nlohmann::json::array();
  for (const auto& p : in.passed_over) j["passed_over"].push_back({{"symbol", p.symbol}, {"module", p.path}});
  j["not_applicable"] = in.other_schema ? nlohmann::json(*in.other_schema) : nlohmann::json(nullptr);
  j["access"] = access_json(in);
  j["process_context"] = reference_json(in);
  j["threads"] = nlohmann::json::array();
  for (const auto& t : in.threads) {
    nlohmann::json tj = {{"tid", t.tid},
                         {"thread_pointer", hex_or_null(t.thread_pointer)},
                         {"variable_address", hex_or_null(t.variable_address)},
                         {"record_pointer", hex_or_null(t.record_pointer)},
                         {"record", t.record ? record_json(*t.record, t.attributes ? &*t.attributes : nullptr) : nlohmann::json(nullptr)},
                         {"error", text_or_null(t.error)}};
    j["threads"].push_back(std::move(tj));
  }
  j["threads_error"] = text_or_null(in.threads_error);
  j["findings"] = nlohmann::json::array();
  for (const auto& f : in.findings)
    j["findings"].push_back({{"requirement", f.requirement}, {"level", level_of(f)}, {"message", finding_message(f)}});
  return j;
}

namespace {

std::string safe(std::string_view text) { return tracecorr::printable_text(text); }

std::string line(const char* label, const std::string& value) {
  char head[32];
  std::snprintf(head, sizeof head, "  %-15s", label);
  return head + value + "\n";
}

// The variable, its module, relocations and access model.
std::string variable_text(const Inspection& in) {
  std::string out;
  out += "variable         " + std::string(spec::kTlsSymbol) + "\n";
  if (!in.module) {
    out += "  not defined in the .dynsym of any mapped module" +
           (in.passed_over.empty() ? std::string() : "; passed over " + safe(describe(in.passed_over))) + "\n";
  } else {
    const auto& m = *in.module;
    out += line("module", safe(m.path) + (m.deleted ? " (deleted)" : "") + (m.elf.executable ? " (executable)" : " (shared library)"));
    if (!in.module_error.empty()) {
      out += line("error", safe(in.module_error));
    } else {
      if (const auto& s = m.elf.tls)
        out += line("symbol", elf::describe_type(s->type) + " " + elf::describe_binding(s->binding) + " " +
                                  elf::describe_visibility(s->visibility) + " size " + std::to_string(s->size) +
                                  " value " + hex_address(s->value));
      std::string relocations;
      for (const auto& r : m.elf.tls_access.relocations) relocations += " " + r;
      out += line("relocations", std::string(elf::to_string(m.elf.tls_access.dialect)) + relocations);
      if (in.access)
        out += line("access", std::string(to_string(in.access->model)) + " (" + reached_by(*in.access) + ", " +
                                  to_string(in.c_library) + "): " + safe(in.access->explanation));
      else
        out += line("access", "unreadable: " + safe(in.access_error));
    }
  }
  return out;
}

}  // namespace

std::string render_text(const Inspection& in) {
  if (!in.found()) return {};
  std::string out = "pid " + std::to_string(in.pid) + "\n";
  if (in.other_schema) out += "not applicable   " + safe(*in.other_schema) + "\n";
  if (!in.other_schema) out += variable_text(in);
  out += "process context  " + (in.context_address ? hex_address(*in.context_address) : std::string("none")) + "\n";
  if (in.reference) {
    const auto& r = *in.reference;
    out += line("schema", r.schema_version ? "\"" + safe(*r.schema_version) + "\"" + (r.known_schema() ? "" : " (unknown)")
                          : r.schema_version_value ? safe(r.schema_version_value->to_display()) + " (not a string)"
                                                   : std::string("absent"));
    std::string keys;
    if (r.key_map)
      for (std::size_t i = 0; i < r.key_map->size(); ++i) keys += (i ? ", " : "") + std::to_string(i) + "=" + safe((*r.key_map)[i]);
    out += line("key map", r.key_map ? keys : r.key_map_value ? safe(r.key_map_value->to_display()) + " (no array of strings)"
                                                              : std::string("absent"));
    if (!r.keys_in_resource.empty()) {
      std::string misplaced;
      for (const auto& k : r.keys_in_resource) misplaced += (misplaced.empty() ? "" : ", ") + safe(k);
      out += line("in resource", misplaced + " (readers look in attributes only)");
    }
  } else if (!in.context_error.empty()) {
    out += line("error", safe(in.context_error));
  }
  if (in.other_schema) return out + findings_text(in.findings);
  out += "threads (" + (in.thread_pointer_source.empty() ? std::string("not read") : in.thread_pointer_source) + ")\n";
  if (!in.threads_error.empty()) out += "  error: " + safe(in.threads_error) + "\n";
  for (const auto& t : in.threads) {
    char head[64];
    std::snprintf(head, sizeof head, "  %-8d", t.tid);
    out += head;
    if (t.record_pointer && *t.record_pointer == 0) out += " no context (NULL)";
    if (t.record) {
      const auto& r = *t.record;
      out += " record " + hex_address(*t.record_pointer) + " valid " + std::to_string(r.valid);
      if (r.readable()) {
        char flags[8];
        std::snprintf(flags, sizeof flags, "%02x", r.trace_flags);
        out += " trace " + to_hex(r.trace_id) + " span " + to_hex(r.span_id) + " flags " + flags + " size " +
               std::to_string(r.declared_size());
      }
      if (t.attributes) {
        for (const auto& a : t.attributes->attributes) out += "\n            " + safe(a.key) + " = \"" + safe(value_text(a.value)) + "\"";
        for (auto i : t.attributes->unknown_indexes) out += "\n            (key " + std::to_string(i) + " outside the key map: ignored)";
      }
    }
    if (!t.error.empty()) out += " error: " + safe(t.error);
    out += "\n";
  }
  return out + findings_text(in.findings);
}

namespace {

class ThreadContextInspector final : public Inspector {
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
      report.not_found = variable_not_found(in->passed_over) + ", and no process context carries threadlocal.* keys";
    if (request.want_json) report.json = to_json(*in);
    if (request.want_text) report.text = render_text(*in);
    report.findings = in->findings;
    return report;
  }

  // Published: some thread's variable holds a record pointer is too costly to
  // ask every 100 ms; the variable's module being mapped with the key map
  // published is what a profiler waits for (TCTXR-02).
  bool published(pid_t pid) const override {
    LibraryCache cache;
    auto found = discover_process(pid, discovery_options(), cache);
    if (!found || !*found) return false;
    auto snapshot = pc::take_contents_snapshot(pid);
    if (!snapshot) return false;
    auto data = reference_data_of(*snapshot);
    return data && data->schema_version_value.has_value();
  }
};

}  // namespace

const Inspector& inspector() {
  static const ThreadContextInspector i;
  return i;
}

}  // namespace tracecorr::otel_thread_context

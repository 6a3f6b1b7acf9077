#include "otel_nodejs_thread_context/inspect/inspect.hpp"

#include <cstdio>

#include "otel_nodejs_thread_context/registry.hpp"
#include "tracecorr/clock_offset.hpp"
#include "tracecorr/text.hpp"
#include "tracecorr/memory.hpp"
#include "tracecorr/process_context.hpp"

namespace tracecorr::otel_nodejs_thread_context {
namespace {

namespace pc = tracecorr::process_context;

void add_findings(std::vector<Finding> found, std::vector<Finding>& out) {
  for (auto& f : found)
    if (f.outcome == Finding::Outcome::Violated || f.outcome == Finding::Outcome::Tolerated) out.push_back(std::move(f));
}

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
  if (!out.reference) out.context_error = "the process context could not be read and decoded";
}

// Everything read while the thread is stopped: the struct, the walk, the
// bucket scan when the walk missed, the record's bytes.
struct StoppedRead {
  std::optional<Error> struct_error;
  std::optional<RecordRead> record_read;
  std::optional<Error> record_error;
};

void read_thread(const ProcessMemory& memory, const TlsVariableAccess& access, std::uint64_t tp, ThreadInspection& t,
                 StoppedRead& read) {
  auto address = pointer_address(memory, thread_context_record_layout(), access.site, tp);
  if (!address) {
    read.struct_error = address.error();
    return;
  }
  t.struct_address = *address;
  std::uint8_t bytes[spec::kDiscoverySize];
  if (auto st = memory.read(*address, bytes); !st) {
    read.struct_error = st.error().within(std::string(spec::kTlsSymbol) + " at " + hex_address(*address));
    return;
  }
  auto discovery = decode_discovery_struct(bytes);
  if (!discovery) {
    read.struct_error = discovery.error();
    return;
  }
  t.walk = walk(memory, *discovery);
  if (t.walk->end == WalkEnd::NotInFrame) t.misplaced = find_key_by_scan(memory, *t.walk);
  if (t.walk->end != WalkEnd::Record) return;
  auto record = read_record(memory, thread_context_record_layout(), *t.walk->record_pointer);
  if (record) read.record_read = std::move(*record);
  else read.record_error = record.error();
}

ThreadInspection inspect_thread(pid_t tid, const ProcessMemory& memory, ThreadPointerSource& source,
                                const TlsVariableAccess& access, Inspection& out) {
  ThreadInspection t;
  t.tid = tid;
  StoppedRead read;
  auto stopped = source.read_stopped(tid, [&](std::uint64_t tp) {
    t.stopped_at_ns = static_cast<std::uint64_t>(read_clock_ns(CLOCK_MONOTONIC));
    t.run_queue_wait_ns = thread_run_queue_wait_ns(tid);
    t.thread_pointer = tp;
    if (tp != 0) read_thread(memory, access, tp, t, read);
  });
  if (!stopped) {
    t.error = stopped.error().message();
    return t;
  }
  if (!t.thread_pointer || *t.thread_pointer == 0) {
    t.error = "the thread pointer is 0 (the thread has not set up TLS yet)";
    return t;
  }
  if (read.struct_error) {  // kNotAllocated: dynamic TLS this thread never touched: nothing published
    t.error = read.struct_error->message();
    return t;
  }
  if (read.record_read) {
    auto record = decode_record(read.record_read->bytes);
    if (record) t.record = std::move(*record);
    else read.record_error = record.error();
  }
  if (read.record_error) t.error = read.record_error->message();
  const KeyMap* map = out.reference && out.reference->key_map ? &*out.reference->key_map : nullptr;
  if (t.record && t.record->readable())
    t.attributes = name_attributes(*t.record, map ? *map : KeyMap{}, [&]() { return current_key_map(out.pid); });
  ThreadLook look{tid, *t.walk, t.misplaced, t.record,
                  read.record_error ? std::optional<std::string>(read.record_error->message()) : std::nullopt, map};
  add_findings(check_thread(look), t.findings);
  out.findings.insert(out.findings.end(), t.findings.begin(), t.findings.end());
  return t;
}

void inspect_threads(const ProcessMemory& memory, ThreadPointerSource& source, Inspection& out) {
  auto tids = source.threads();
  if (!tids) {
    out.threads_error = tids.error().message();
    return;
  }
  for (pid_t tid : *tids) {
    if (!out.access) {
      ThreadInspection t;
      t.tid = tid;
      t.error = "the struct cannot be reached: " + out.access_error;
      out.threads.push_back(std::move(t));
      continue;
    }
    out.threads.push_back(inspect_thread(tid, memory, source, *out.access, out));
  }
}

void inspect_module(pid_t pid, const InspectOptions& o, Inspection& out) {
  const auto& module = *out.module;
  if (!module.analysis_error.empty()) {
    out.module_error = module.analysis_error;
    return;
  }
  add_findings(check_variable(module), out.findings);
  LiveProcessMemory memory(pid);
  if (module.elf.tls && module.elf.tls->thread_local_storage()) {
    if (auto c_library = detect_c_library(pid, module.elf.machine)) out.c_library = *c_library;
    auto access = resolve_tls_access(memory, module, out.c_library);
    if (access) out.access = *access;
    else out.access_error = access.error().message();
  } else {
    out.access_error = std::string(spec::kTlsSymbol) + " is not a thread-local variable";
  }
  if (!o.read_threads) return;
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

}  // namespace

bool Inspection::found() const {
  return module.has_value() || (reference && reference->known_schema());
}

Expected<Inspection> inspect_process(pid_t pid, const InspectOptions& o) {
  Inspection out;
  out.pid = pid;
  LibraryCache own_cache;
  auto found = discover_process(pid, discovery_options(), o.cache ? *o.cache : own_cache);
  if (!found) return found.error();
  read_reference_data(pid, out);
  if (*found) {
    out.module = std::move(**found);
    inspect_module(pid, o, out);
  } else if (out.found()) {
    out.findings.push_back(violated("NJS-01", "the process context declares " + *out.reference->schema_version +
                                                  ", but no mapped module defines " + std::string(spec::kTlsSymbol) +
                                                  " in its .dynsym"));
  }
  // Without the threads read, an undeclared schema is judged as if a gate were open.
  bool publishes = !o.read_threads || !out.module;
  for (const auto& t : out.threads)
    if (t.walk && t.walk->discovery.gate_open()) publishes = true;
  if (out.found()) add_findings(check_reference_data(out.reference, publishes), out.findings);
  return out;
}

}  // namespace tracecorr::otel_nodejs_thread_context

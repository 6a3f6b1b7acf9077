// The Node.js thread context's inspector: where `otel_thread_ctx_nodejs_v1`
// is (module, symbol, TLS access model), the process context's reference data,
// and for each thread, read while it is stopped (NJSR-03): its struct, the
// walk step by step (frame, table, counts, bucket, hops, wrapper, record) and
// the record with its attributes named by the key map; the findings of the
// rules one look judges (checks.hpp).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "otel_nodejs_thread_context/checks.hpp"
#include "otel_nodejs_thread_context/record.hpp"
#include "otel_nodejs_thread_context/walk.hpp"
#include "tracecorr/discovery.hpp"
#include "tracecorr/error.hpp"
#include "tracecorr/finding.hpp"
#include "tracecorr/inspector.hpp"
#include "tracecorr/threadptr.hpp"
#include "tracecorr/tls.hpp"

namespace tracecorr::otel_nodejs_thread_context {

struct ThreadInspection {
  pid_t tid = 0;
  std::optional<std::uint64_t> thread_pointer;
  // Taken while the thread was held stopped for its read: CLOCK_MONOTONIC
  // (it had stopped by then, so what the read shows was so at this time; 0:
  // not read) and the time it had waited in run queues since it started
  // (schedstat, unchanging while it is stopped; nullopt: unreadable).
  std::uint64_t stopped_at_ns = 0;
  std::optional<std::uint64_t> run_queue_wait_ns;
  std::optional<std::uint64_t> struct_address;  // this thread's otel_thread_ctx_nodejs_v1
  std::optional<WalkTrace> walk;                // the struct and every step it took
  std::optional<MisplacedEntry> misplaced;
  std::optional<ThreadContextRecord> record;
  std::optional<NamedAttributes> attributes;
  std::string error;  // the struct (or the record) could not be read
  std::vector<Finding> findings;  // what this thread's look found (check_thread's violations)
};

struct Inspection {
  pid_t pid = 0;
  std::string thread_pointer_source;
  std::optional<AgentLibrary> module;
  std::string module_error;
  CLibrary c_library = CLibrary::Unknown;
  std::optional<TlsVariableAccess> access;
  std::string access_error;
  std::optional<std::uint64_t> context_address;
  std::optional<ReferenceData> reference;
  std::string context_error;
  std::vector<ThreadInspection> threads;
  std::string threads_error;
  std::vector<Finding> findings;  // Violated and Tolerated only
  // The struct's module is mapped, or the process context declares this schema.
  bool found() const;
};

struct InspectOptions {
  ThreadPointerSource* thread_pointers = nullptr;  // borrowed; nullptr: ptrace
  bool read_threads = true;
  // ELF analyses kept across looks (borrowed; nullptr: this look's own): a
  // session looking again and again parses node's 100 MB executable once.
  LibraryCache* cache = nullptr;
};

Expected<Inspection> inspect_process(pid_t pid, const InspectOptions& options = {});
nlohmann::json to_json(const Inspection& inspection);
std::string render_text(const Inspection& inspection);
const Inspector& inspector();

}  // namespace tracecorr::otel_nodejs_thread_context

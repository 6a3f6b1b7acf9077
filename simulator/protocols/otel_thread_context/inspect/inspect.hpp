// The thread context's inspector: where `otel_thread_ctx_v1` is (module,
// symbol, TLS access model and how a thread's copy is reached), the reference
// data the process context publishes, each thread's record read while the
// thread is stopped (TCTXR-06) and decoded through the key map, and the
// findings of the writer rules one look judges (checks.hpp).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "otel_thread_context/checks.hpp"
#include "otel_thread_context/record.hpp"
#include "tracecorr/discovery.hpp"
#include "tracecorr/error.hpp"
#include "tracecorr/finding.hpp"
#include "tracecorr/inspector.hpp"
#include "tracecorr/threadptr.hpp"
#include "tracecorr/tls.hpp"

namespace tracecorr::otel_thread_context {

struct ThreadInspection {
  pid_t tid = 0;
  std::optional<std::uint64_t> thread_pointer;
  std::optional<std::uint64_t> variable_address;  // this thread's otel_thread_ctx_v1
  std::optional<std::uint64_t> record_pointer;    // its value; 0: no context on this thread
  std::optional<ThreadContextRecord> record;
  std::optional<NamedAttributes> attributes;  // the record's entries through the key map (valid records)
  std::string error;  // why the record (or the pointer) could not be read
};

struct Inspection {
  pid_t pid = 0;
  std::string thread_pointer_source;  // "ptrace", "gdbstub HOST:PORT"
  std::optional<AgentLibrary> module;  // the executable or library defining the variable
  std::string module_error;            // it is mapped but its ELF could not be analysed
  CLibrary c_library = CLibrary::Unknown;  // whose TLS layout the process has (detect_c_library)
  std::optional<TlsVariableAccess> access;
  std::string access_error;
  // The process context's header address and its reference data (nullopt:
  // no context mapping read and decoded; context_error says why).
  std::optional<std::uint64_t> context_address;
  std::optional<ReferenceData> reference;
  std::string context_error;
  bool key_map_refreshed = false;  // a record's unknown key made the inspector read the context again (TCTXR-10)
  std::size_t key_map_reads = 0;   // how often it did: once per look at most (KeyMapRefresher)
  std::vector<ThreadInspection> threads;
  std::string threads_error;
  // Variables named like otel_thread_ctx_v1 that discovery passed over.
  std::vector<PassedOver> passed_over;
  // The context names a schema this reader does not read (TCTXR-03): what
  // was seen (other_schema()). Nothing is read and nothing judged: not
  // applicable, no finding.
  std::optional<std::string> other_schema;
  std::vector<Finding> findings;  // Violated and Tolerated only: what the writer gets wrong
  // Whether this process shows the protocol: the variable, or threadlocal.* in its context.
  bool found() const;
};

struct InspectOptions {
  // Borrowed; nullptr: a ptrace source for the pid is made (and used) inside.
  ThreadPointerSource* thread_pointers = nullptr;
  bool read_threads = true;
};

// Errors: the process cannot be examined at all (gone, no permission).
Expected<Inspection> inspect_process(pid_t pid, const InspectOptions& options = {});

nlohmann::json to_json(const Inspection& inspection);
// For people: the variable, its access model, the reference data, each
// thread's record with its attributes, the findings. Target text escaped.
std::string render_text(const Inspection& inspection);

// The package's inspector, registered with the engine (tracecorr/inspector.hpp).
const Inspector& inspector();

}  // namespace tracecorr::otel_thread_context

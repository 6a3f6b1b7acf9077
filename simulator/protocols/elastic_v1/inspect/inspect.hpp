// Elastic v1's inspector: everything one agent process exposes, read once,
// with findings that name the requirement each problem breaks.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "elastic_v1/library.hpp"
#include "tracecorr/discovery.hpp"
#include "tracecorr/finding.hpp"
#include "tracecorr/inspector.hpp"
#include "tracecorr/error.hpp"
#include "tracecorr/socket.hpp"
#include "tracecorr/threadptr.hpp"
#include "tracecorr/tls.hpp"
#include "elastic_v1/wire.hpp"

namespace tracecorr::elastic_v1 {

struct StorageInspection {
  std::uint64_t pointer_address = 0;     // &elastic_..._process_storage_v1 in the target
  std::optional<std::uint64_t> pointer;  // its value; 0 = not published yet
  std::optional<ProcessStorage> fields;
  std::string error;  // reading or decoding failed
};

struct SocketInspection {
  std::string path;  // socket_file_path as the target names it
  std::optional<SocketFacts> facts;
  std::string error;        // examine_socket failed
  bool reachable = false;   // a non-blocking datagram connect succeeded (nothing is sent)
  std::string reach_error;  // why not
};

struct ThreadInspection {
  pid_t tid = 0;
  std::optional<std::uint64_t> thread_pointer;
  std::optional<std::uint64_t> record_pointer;  // 0: no record published for this thread
  std::optional<TlsRecord> record;
  std::string error;
};

struct Inspection {
  pid_t pid = 0;
  std::string thread_pointer_source;  // "ptrace", "gdbstub HOST:PORT"
  std::optional<AgentLibrary> library;
  std::vector<PassedOver> passed_over;  // variables named like the TLS symbol, in modules discovery passed over
  std::string library_error;  // the library is mapped but its ELF could not be analysed
  std::optional<TlsDescriptor> tls;
  std::string tls_error;
  // How the threads' records are reached, in whichever model (a dynamic
  // descriptor still breaks TLS-07, yet its records are read through the DTV).
  std::optional<TlsVariableAccess> tls_access;
  std::string tls_access_error;
  std::optional<StorageInspection> storage;
  std::optional<SocketInspection> socket;
  std::vector<ThreadInspection> threads;
  std::string threads_error;
  std::vector<Finding> findings;
};

struct InspectOptions {
  DiscoveryOptions discovery = discovery_options();
  // Borrowed; nullptr: a ptrace source for the pid is made (and used) inside.
  ThreadPointerSource* thread_pointers = nullptr;
  bool read_threads = true;
  bool check_socket_reachable = true;
};

// Errors: the process cannot be examined at all (gone, no permission). An
// Inspection without a library means the process has no agent library.
Expected<Inspection> inspect_process(pid_t pid, const InspectOptions& options = {});

nlohmann::json to_json(const Inspection& inspection);
// For people: library, symbols, TLS, storage, socket, threads, findings.
std::string render_text(const Inspection& inspection);

// Elastic v1's inspector, registered with the engine (tracecorr/inspector.hpp).
const Inspector& inspector();

}  // namespace tracecorr::elastic_v1

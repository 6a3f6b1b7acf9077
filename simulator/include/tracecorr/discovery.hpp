// Finding agent processes: the library in /proc/PID/maps, its ELF analysis,
// the process storage and the TLS descriptor, located in that process.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tracecorr/elf.hpp"
#include "tracecorr/error.hpp"
#include "tracecorr/maps.hpp"

namespace tracecorr {

struct DiscoveryOptions {
  std::string name_regex;       // defaults to the registry's
  std::string storage_symbol;   // defaults to the registry's
  std::string tls_symbol;       // defaults to the registry's
  // Also analyse libraries whose name does not match but that define either
  // symbol, so a misnamed library is diagnosed (ELF-01) instead of missed.
  bool look_past_names = true;
  static DiscoveryOptions defaults();
};

struct AgentLibrary {
  pid_t pid = 0;
  std::string path;             // as mapped in the target
  bool name_matches = false;    // ELF-01
  std::string name_suffix;      // the regex group, e.g. "x64"
  std::uint64_t load_bias = 0;  // runtime address = link-time address + load_bias
  elf::LibraryAnalysis elf;
  // Runtime addresses, when the symbol/relocation exists.
  std::optional<std::uint64_t> storage_pointer_addr;  // &elastic_..._process_storage_v1
  std::optional<std::uint64_t> tls_descriptor_addr;   // &struct tlsdesc
};

// Caches ELF analyses by (device, inode, mtime) so a scan of every process on
// a host analyses each library file once.
class LibraryCache {
 public:
  Expected<elf::LibraryAnalysis> analyze(pid_t pid, const Mapping& m, const DiscoveryOptions& o);
  std::size_t size() const { return cache_.size(); }

 private:
  std::map<std::string, Expected<elf::LibraryAnalysis>> cache_;
};

// The agent library in one process, or nullopt when there is none. Errors are
// reserved for a process that cannot be examined (gone, no permission).
Expected<std::optional<AgentLibrary>> discover_process(pid_t pid, const DiscoveryOptions& o, LibraryCache& cache);

std::vector<pid_t> list_processes();

}  // namespace tracecorr

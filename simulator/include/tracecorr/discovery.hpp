// Finding agent processes: the library in /proc/PID/maps, its ELF analysis,
// the process pointer and the TLS descriptor, located in that process.
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
#include "tracecorr/fd.hpp"
#include "tracecorr/maps.hpp"
#include "tracecorr/memory.hpp"

namespace tracecorr {

// What a protocol's library looks like (its package supplies one, from its
// registry): a file name pattern and the two symbols
// a correlation library may export, either possibly empty.
struct DiscoveryOptions {
  std::string name_regex;
  // A data symbol holding a pointer to a process-wide structure.
  std::string process_symbol;
  // A TLS symbol holding a pointer to the thread's record.
  std::string tls_symbol;
  // Also analyse libraries whose name does not match but that define either
  // symbol, so a misnamed library is diagnosed instead of missed. Only files
  // whose name looks like a shared object (".so", ".so.N") are opened, and
  // each file is analysed once per LibraryCache.
  bool look_past_names = true;
  // Also analyse the programs the process runs: files mapped from their first
  // byte whose name is not a shared object's (the process's own executable,
  // and under qemu-user the guest's beside qemu's; data files such as locale
  // archives fail analysis once per LibraryCache), for protocols whose
  // variable may be defined in an executable.
  bool look_in_executables = false;
};

struct AgentLibrary {
  pid_t pid = 0;
  std::string path;             // as mapped in the target (without " (deleted)")
  bool deleted = false;         // the file was replaced or removed after mapping
  bool name_matches = false;    // the file name fits the pattern
  std::string name_suffix;      // the regex group, e.g. "x64"
  std::uint64_t load_bias = 0;  // runtime address = link-time address + load_bias
  std::uint64_t base_mapping_start = 0;  // the mapping with file offset 0
  elf::LibraryAnalysis elf;
  std::string analysis_error;  // the name matches but the file could not be analysed
  // Runtime addresses, when the symbol/relocation exists.
  std::optional<std::uint64_t> process_pointer_addr;  // &<process symbol>
  std::optional<std::uint64_t> tls_descriptor_addr;   // &struct tlsdesc
};

// Caches ELF analyses by (device, inode, mtime, size) so a scan of every
// process on a host analyses each library file once.
class LibraryCache {
 public:
  Expected<elf::LibraryAnalysis> analyze(pid_t pid, const Mapping& m, const DiscoveryOptions& o);
  std::size_t size() const { return cache_.size(); }
  std::size_t analyses() const { return analyses_; }  // files actually parsed

 private:
  std::map<std::string, Expected<elf::LibraryAnalysis>> cache_;
  std::size_t analyses_ = 0;
};

// Opens the file behind a mapping for reading: /proc/PID/map_files/<start>-<end>
// (works for deleted files and inside containers), else the path inside the
// target's root.
Expected<UniqueFd> open_mapped_file(pid_t pid, const Mapping& m);

// A symbol named like the TLS symbol looked for, in a module of the process
// (elf::LibraryAnalysis::tls_lookalikes): what discovery passed over.
struct PassedOver {
  std::string path;    // the module, as mapped
  std::string symbol;  // the lookalike's name
};
std::string describe(const std::vector<PassedOver>& passed_over);  // "X in /a.so, Y in /b" ("" for none)

// The agent library in one process, or nullopt when there is none. Errors are
// reserved for a process that cannot be examined (gone, no permission).
// `passed_over` (when given) receives the TLS symbol's lookalikes of every
// module analysed (at most elf::kMaxTlsLookalikes).
Expected<std::optional<AgentLibrary>> discover_process(pid_t pid, const DiscoveryOptions& o, LibraryCache& cache,
                                                       std::vector<PassedOver>* passed_over = nullptr);

// True once the loader is done with the page holding the process pointer, so
// that what a read finds there is the agent's. Mapped is not loaded: the
// loader first maps the whole file with the first segment's (read-only)
// protection, then places the writable data segment over it, and only then
// zeroes the .bss part of its last file page and applies relocations. Until
// then the pointer's address shows unrelated file bytes (seen under qemu-user
// as a "pointer" made of .comment text).
bool process_pointer_settled(const AgentLibrary& library, const ProcessMemory& memory);

// Does `path` match the library name regex? Fills the suffix group. Linear in
// the path's length: the regex must have the shape registries use (".*/" literal,
// at most one "([class]*)" or "+" group, literal; no '/' after the first), see
// library_name_pattern_supported; any other pattern matches nothing.
bool library_name_matches(const std::string& path, const std::string& regex, std::string* suffix = nullptr);
bool library_name_pattern_supported(const std::string& regex);

std::vector<pid_t> list_processes();

// The C library whose loader laid out a process's thread control blocks and
// DTVs, for code of `machine` (under qemu-user the guest's C library, not
// qemu's own). Known by the files it maps: glibc's loader ld-linux-*.so.* and
// libc.so.6, musl's ld-musl-*.so.1 and libc.so. Unknown when neither is
// mapped for that machine (a static executable carries its C library inside),
// or when both are.
enum class CLibrary { Unknown, Glibc, Musl };
const char* to_string(CLibrary c);
Expected<CLibrary> detect_c_library(pid_t pid, elf::Machine machine);
// The same from the name of a mapped file alone; nullopt: not a C library's.
std::optional<CLibrary> c_library_of_file(const std::string& path);

}  // namespace tracecorr

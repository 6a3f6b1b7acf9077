// Names code addresses of a live process from the ELF symbols of the files it
// maps (.symtab when the file has one, .dynsym otherwise), for the HTML
// report's flame graphs. Files are opened inside /proc/PID/root and must be
// the regular file the mapping names (same inode); each is read once.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "tracecorr/error.hpp"
#include "tracecorr/maps.hpp"

namespace tracecorr {

// The function symbols of one ELF file, by link-time address.
struct FunctionSymbols {
  struct Function {
    std::uint64_t start = 0, size = 0;
    std::string name;
  };
  struct Load {
    std::uint64_t offset = 0, vaddr = 0, filesz = 0;  // PT_LOAD p_offset, p_vaddr, p_filesz
  };
  std::vector<Function> functions;  // sorted by start
  std::vector<Load> loads;
  // The function containing a link-time address, or nullptr.
  const Function* find(std::uint64_t vaddr) const;
  // The link-time address of a file offset, when a PT_LOAD covers it.
  std::optional<std::uint64_t> vaddr_of_offset(std::uint64_t offset) const;
};
// Reads fd (an ELF file; hostile): every count bounded, C++ names demangled.
Expected<FunctionSymbols> read_function_symbols(int fd, const std::string& display_path);

class Symbolizer {
 public:
  // Reads the process's maps now; files are read on first use.
  explicit Symbolizer(pid_t pid);
  // "function (library)"; "[library]" when no symbol covers the address;
  // "[unknown]" outside any file mapping. `return_address`: a frame's return
  // address, looked up one byte earlier (inside the call).
  std::string name(std::uint64_t address, bool return_address = false);

 private:
  pid_t pid_;
  std::vector<Mapping> maps_;
  std::map<std::string, Expected<FunctionSymbols>> files_;
};

}  // namespace tracecorr

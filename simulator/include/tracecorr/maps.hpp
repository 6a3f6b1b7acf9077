// /proc/PID/maps.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tracecorr/error.hpp"

namespace tracecorr {

struct Mapping {
  std::uint64_t start = 0, end = 0, file_offset = 0;
  bool read = false, write = false, exec = false, shared = false;
  std::string device;  // "major:minor" in hex, as printed
  std::uint64_t inode = 0;
  std::string path;  // as the kernel prints it: may be "[heap]", "" or end in " (deleted)"
  bool contains(std::uint64_t a) const { return a >= start && a < end; }
  // A regular file (not [heap], [stack], anonymous memory or a pseudo file).
  bool file_backed() const { return inode != 0 && !path.empty() && path.front() == '/'; }
  bool deleted() const;
  // The path without the kernel's " (deleted)" suffix.
  std::string file_path() const;
};

// Errors name the pid and say whether the process is gone or not ours to read.
Expected<std::vector<Mapping>> read_maps(pid_t pid);
// Skips malformed lines. Paths keep inner and trailing spaces (the kernel does
// not escape them), except the column padding before the path.
std::vector<Mapping> parse_maps(std::string_view text);

// The mapping containing addr, or nullptr.
const Mapping* find_mapping(const std::vector<Mapping>& maps, std::uint64_t addr);

// Reads a whole /proc text file (bounded); errors say gone / permission.
Expected<std::string> read_proc_text(pid_t pid, const std::string& name, std::size_t max_bytes = 64u << 20);

}  // namespace tracecorr

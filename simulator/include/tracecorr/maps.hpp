// /proc/PID/maps.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
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

// The VmFlags line of one mapping in /proc/PID/smaps: two-letter codes such as
// "rd", "wr", "sh", "dc" (VM_DONTCOPY, set by MADV_DONTFORK).
struct VmFlags {
  std::vector<std::string> codes;  // in the kernel's order, at most kMaxCodes
  bool has(std::string_view code) const;
  static constexpr std::size_t kMaxCodes = 64;  // the kernel prints about 30 kinds
};

// The VmFlags of the mappings that start at `starts`, from smaps text; one
// entry per start found with a VmFlags line, in the order of `starts`
// (a start smaps does not list, or lists without VmFlags, has none). Lines are
// bounded (kMaxSmapsLine); longer ones are skipped.
inline constexpr std::size_t kMaxSmapsLine = 8192;
std::vector<std::pair<std::uint64_t, VmFlags>> parse_smaps_vm_flags(std::string_view text,
                                                                    std::span<const std::uint64_t> starts);
// The same from /proc/PID/smaps, read line by line and only until every start
// was seen (the kernel builds smaps as it is read; a process with many
// mappings makes it large). Errors: gone, permission.
Expected<std::vector<std::pair<std::uint64_t, VmFlags>>> read_vm_flags(pid_t pid, std::span<const std::uint64_t> starts);

// Reads a whole /proc text file (bounded); errors say gone / permission.
Expected<std::string> read_proc_text(pid_t pid, const std::string& name, std::size_t max_bytes = 64u << 20);

}  // namespace tracecorr

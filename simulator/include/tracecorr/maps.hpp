// /proc/PID/maps.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "tracecorr/error.hpp"

namespace tracecorr {

struct Mapping {
  std::uint64_t start = 0, end = 0, file_offset = 0;
  bool read = false, write = false, exec = false;
  std::uint64_t inode = 0;
  std::string path;  // as the kernel prints it: may be "[heap]", "" or end in " (deleted)"
  bool contains(std::uint64_t a) const { return a >= start && a < end; }
};

Expected<std::vector<Mapping>> read_maps(pid_t pid);
std::vector<Mapping> parse_maps(std::string_view text);  // skips malformed lines

// Load bias of an ELF object given its mappings: address of the mapping with
// file offset 0 minus the first PT_LOAD's vaddr rounded down to its page.
const Mapping* find_mapping(const std::vector<Mapping>& maps, std::uint64_t addr);

}  // namespace tracecorr

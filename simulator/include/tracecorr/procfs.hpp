// Listing /proc directories whose entries are numbers, and reading a
// process's /proc/PID/stat.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace tracecorr {

// The numeric entry names of `directory` (e.g. /proc for pids, /proc/PID/task
// for tids, /proc/PID/fd for descriptors), sorted; other names are skipped.
// Empty when the directory cannot be read (the process is gone).
std::vector<int> numbered_entries(const std::string& directory);

// The fields of /proc/PID/stat tracecorr uses.
struct ProcessStat {
  pid_t pid = 0;
  std::string comm;            // bounded by the kernel (16 bytes); may contain spaces and ')'
  char state = '?';            // 'R', 'S', 'Z', ...
  pid_t ppid = 0;
  pid_t pgrp = 0;
  pid_t session = 0;
  std::uint64_t start_time = 0;  // clock ticks after boot: tells a reused pid from the process we knew
};
// nullopt when the process is gone or the file does not parse.
std::optional<ProcessStat> read_process_stat(pid_t pid);

}  // namespace tracecorr

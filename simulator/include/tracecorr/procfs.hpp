// Listing /proc directories whose entries are numbers.
#pragma once

#include <string>
#include <vector>

namespace tracecorr {

// The numeric entry names of `directory` (e.g. /proc for pids, /proc/PID/task
// for tids, /proc/PID/fd for descriptors), sorted; other names are skipped.
// Empty when the directory cannot be read (the process is gone).
std::vector<int> numbered_entries(const std::string& directory);

}  // namespace tracecorr

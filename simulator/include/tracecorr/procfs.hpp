// Listing /proc directories whose entries are numbers, and reading a
// process's /proc/PID/stat.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace tracecorr {

// The numeric entry names of `directory` (e.g. /proc for pids, /proc/PID/task
// for tids, /proc/PID/fd for descriptors), sorted; other names are skipped.
// Empty when the directory cannot be read (the process is gone).
std::vector<int> numbered_entries(const std::string& directory);

// A thread of `pid` whose /proc entries show the process's shared state (maps,
// mem, fd, fdinfo, root, ns): pid itself, or, when the thread-group leader is
// a zombie (the main thread called pthread_exit while workers run on, so the
// leader's entries are empty or fail), the first live thread. pid when no
// thread is alive.
pid_t live_task(pid_t pid);
// "/proc/PID" or "/proc/PID/task/TID" of live_task(pid).
std::string process_dir(pid_t pid);
// Field 22 of /proc/PID/stat (start time in clock ticks): tells a restarted
// process from the one we knew under the same pid. 0 when unreadable.
std::uint64_t process_start_time(pid_t pid);
// Changes when the process execs another program: its auxiliary vector
// (AT_RANDOM, AT_ENTRY, AT_PHDR point into the new image and stack). Empty
// when unreadable (gone).
std::string exec_identity(pid_t pid);
// What /proc/PID/exe names ("" when unreadable): changes at each exec.
std::string executable_of(pid_t pid);
// The state letter of /proc/PID[/task/TID]/stat ('R', 'S', 'Z', ...), 0 when gone.
char task_state(pid_t pid, pid_t tid);
// The process (thread group) of a thread: its Tgid; `fallback` when /proc no
// longer says.
pid_t thread_group_of(pid_t tid, pid_t fallback);
// The NUL-separated strings of /proc/PID/<file> ("cmdline", "environ"), from
// its first `max_bytes` (a cut last string is kept cut). Target text. Empty
// when unreadable.
std::vector<std::string> process_strings(pid_t pid, const char* file, std::size_t max_bytes = 256 << 10);
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

// The processes a user named by pid (`--pid`): each number stands for the
// process found under it first. Once that process exits the number may name
// another (pids wrap at pid_max, 32768 by default, within minutes on a busy
// host), which nobody asked to sample or to send to.
class NamedProcesses {
 public:
  // True while pid names the process first found under it, or none was found
  // under it yet; false once another process holds the number.
  bool still_named(pid_t pid);

 private:
  std::map<pid_t, std::uint64_t> start_times_;  // pid -> start time of the process it named
};

// Whether the process is a qemu-user guest (its executable is qemu-*): its
// memory and system calls are then qemu's on the guest's behalf.
bool runs_under_qemu_user(pid_t pid);

}  // namespace tracecorr

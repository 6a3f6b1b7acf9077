// The thread pointer (x86-64 fs_base, aarch64 TPIDR_EL0) of a target's threads,
// read from user space: ptrace for native processes, the qemu gdbstub for
// guests under qemu-user. BPF reads the same value from the task (bpf/).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "tracecorr/error.hpp"

namespace tracecorr {

class ThreadPointerSource {
 public:
  virtual ~ThreadPointerSource() = default;
  virtual Expected<std::vector<pid_t>> threads() = 0;
  virtual Expected<std::uint64_t> thread_pointer(pid_t tid) = 0;
};

std::vector<pid_t> list_threads(pid_t pid);  // /proc/PID/task

// PTRACE_SEIZE + PTRACE_INTERRUPT, PTRACE_GETREGSET, PTRACE_DETACH. The thread
// is stopped for a few microseconds and resumed; nothing is written.
std::unique_ptr<ThreadPointerSource> make_ptrace_source(pid_t pid);

// A gdb remote-protocol client for `qemu-aarch64 -g PORT`: reads TPIDR_EL0 per
// guest thread (gdb thread ids are host tids under qemu-user).
Expected<std::unique_ptr<ThreadPointerSource>> make_gdbstub_source(const std::string& host, int port);

}  // namespace tracecorr

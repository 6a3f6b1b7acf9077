// The thread pointer (x86-64 fs_base, aarch64 TPIDR_EL0) of a target's threads,
// read from user space: ptrace for native processes, the qemu gdbstub for
// guests under qemu-user. BPF reads the same value from the task (bpf/).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tracecorr/error.hpp"

namespace tracecorr {

class ThreadPointerSource {
 public:
  virtual ~ThreadPointerSource() = default;
  virtual Expected<std::vector<pid_t>> threads() = 0;
  virtual Expected<std::uint64_t> thread_pointer(pid_t tid) = 0;
  // Lets the target run again after a batch of reads. The ptrace source
  // resumes each thread right after its read, so this is a no-op there; the
  // gdbstub source keeps the guest stopped across a batch.
  virtual Status resume() { return Ok{}; }
  virtual std::string describe() const = 0;  // "ptrace", "gdbstub 127.0.0.1:1234"
};

std::vector<pid_t> list_threads(pid_t pid);  // /proc/PID/task; empty when gone

// PTRACE_SEIZE + PTRACE_INTERRUPT, PTRACE_GETREGSET, PTRACE_DETACH. The thread
// is stopped for a few microseconds and resumed; nothing is written. A thread
// that exits mid-read yields an Error naming it.
std::unique_ptr<ThreadPointerSource> make_ptrace_source(pid_t pid);

// A gdb remote-protocol client for `qemu-aarch64 -g PORT`: reads TPIDR_EL0 per
// guest thread (gdb thread ids are host tids under qemu-user).
//
// qemu 7.2's user-mode stub serves one connection for the process's life and
// only reads the socket while the guest is stopped, so the ^C interrupt byte
// goes unnoticed while the guest runs. When `qemu_pid` is given the source
// stops the guest by sending that process SIGVTALRM instead: qemu intercepts
// it, reports the stop (T1a) and the source continues without the signal, so
// the guest never sees it. (SIGINT would not do: servers often block it and
// sigwait() for it, which hands it to the guest past the stub.) Without a pid
// the source sends ^C (for stubs that honour it). TPIDR_EL0 is found by name in the stub's target description
// (qemu 7.2: "TPIDR_EL0" in system-registers.xml; gdb's tls feature: "tpidr").
Expected<std::unique_ptr<ThreadPointerSource>> make_gdbstub_source(const std::string& host, int port, pid_t qemu_pid = 0);

// Parses "HOST:PORT" (IPv6 as "[::1]:PORT").
Expected<std::pair<std::string, int>> parse_host_port(const std::string& text);

}  // namespace tracecorr

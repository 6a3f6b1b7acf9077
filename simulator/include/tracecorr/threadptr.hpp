// The thread pointer (x86-64 fs_base, aarch64 TPIDR_EL0) of a target's threads,
// read from user space: ptrace for native processes, the qemu gdbstub for
// guests under qemu-user. BPF reads the same value from the task (bpf/).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
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
  // Reads thread `tid` while it is stopped: `read` runs with the thread's
  // pointer before the thread runs again, for readers that must not see a
  // thread's memory mid-store (a protocol whose writers order their stores
  // for a reader that interrupts them). The ptrace source holds the stop
  // until `read` returns; this default, for sources that keep the target
  // stopped across a batch until resume() (the gdbstub's), reads the pointer
  // and calls `read`.
  virtual Status read_stopped(pid_t tid, const std::function<void(std::uint64_t thread_pointer)>& read);
  // read_stopped for many threads with one deadline for them all (inspect):
  // `read(tid, thread_pointer)` runs for each thread while it is stopped;
  // the answer has one Status per tid, in order. The ptrace source interrupts
  // the threads together (at most kStopWindow outstanding), reads each as it
  // stops and lets it go at once, so a thread is held only for its own read
  // and one starved thread costs no more than the deadline, not every thread
  // its own wait. This default reads them one after another.
  using StoppedRead = std::function<void(pid_t tid, std::uint64_t thread_pointer)>;
  virtual std::vector<Status> read_each_stopped(const std::vector<pid_t>& tids, const StoppedRead& read,
                                                std::chrono::milliseconds deadline);
  virtual std::string describe() const = 0;  // "ptrace", "gdbstub 127.0.0.1:1234"
};

// read_each_stopped's deadline for one inspect of a process, and how many of
// its threads are interrupted and not yet read at any moment.
inline constexpr std::chrono::milliseconds kStopAllDeadline{2000};
inline constexpr std::size_t kStopWindow = 256;

std::vector<pid_t> list_threads(pid_t pid);  // /proc/PID/task; empty when gone
// The same, told whether the leader is a zombie (live_task: its /proc stat,
// read by the one above each time, costs more than the listing).
std::vector<pid_t> list_threads(pid_t pid, bool leader_zombie);

// Waiting for a seized thread to stop after PTRACE_INTERRUPT, with a deadline.
// A thread parked in vfork (its child never execs) or in uninterruptible
// sleep does not stop, and a blocking waitpid would wait for it forever.
inline constexpr std::chrono::milliseconds kPtraceStopBound{200};
struct PtraceStop {
  enum class Kind { kStopped, kExited, kNotStopping } kind = Kind::kNotStopping;
  int status = 0;  // the waitpid status, for kStopped
};
PtraceStop wait_for_ptrace_stop(pid_t tid, std::chrono::milliseconds bound = kPtraceStopBound);
// A thread that did not stop stays attached with our interrupt pending: the
// kernel offers no way to cancel it, and PTRACE_DETACH needs a stopped
// tracee. It is parked on the calling (tracer) thread's list; each later
// ptrace user on that thread calls reap_parked_attachments() first, which
// detaches those that have stopped since (re-delivering their signal), so the
// thread is held for no longer than one of our rounds. The kernel detaches any
// left when the tracer thread exits.
void park_unstopped(pid_t tid);
void reap_parked_attachments();
// PTRACE_DETACH, and when that fails (the thread was killed while stopped,
// e.g. by another thread's exec) reap it, waiting up to the bound, or park it.
// An unreaped traced zombie deadlocks the target's exec (de_thread waits for
// us to reap it while holding cred_guard_mutex) and our next PTRACE_SEIZE of
// any of its threads (which waits for that mutex, and restarts across
// signals, so not even SIGTERM would end it). So: detach or reap, always, and
// reap_parked_attachments() before every PTRACE_SEIZE.
void detach_or_reap(pid_t tid, int signal = 0);
// PTRACE_SEIZE of thread `tid` of process `pid` (ptrace's return, errno kept).
// While it blocks (an exec of `pid` holds the mutex it waits for), a watcher
// thread of ours reaps the exited threads of `pid` we trace, which that exec
// waits for: the deadlock above cannot hold, whatever we held (src/threadptr/seize.cpp).
long seize_thread(pid_t pid, pid_t tid);
bool is_parked(pid_t tid);
// Why a thread did not stop within `bound` of our interrupt, from its state:
// runnable ('R') means starved (waiting for a CPU: `run_queue_wait_ns` is
// how long it waited in a run queue during the bound, when known), 'D' is
// uninterruptible sleep or a vfork whose child has not exec'd yet.
std::string not_stopping_reason(pid_t tid, std::chrono::milliseconds bound = kPtraceStopBound,
                                std::optional<std::uint64_t> run_queue_wait_ns = std::nullopt);
// What /proc/TID/schedstat says of a thread since it started: the time it ran
// on a CPU and the time it waited in run queues; nullopt when unreadable.
struct ThreadSchedstat {
  std::uint64_t on_cpu_ns = 0;
  std::uint64_t run_queue_wait_ns = 0;
  std::uint64_t timeslices = 0;  // times it got a CPU (each adds the wait before it)
};
std::optional<ThreadSchedstat> thread_schedstat(pid_t tid);
std::optional<std::uint64_t> thread_run_queue_wait_ns(pid_t tid);

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

// Thread pointers through ptrace. PTRACE_SEIZE does not stop the thread and
// PTRACE_INTERRUPT stops it without a signal, so nothing the target can
// observe (no SIGSTOP, no EINTR for SA_RESTART handlers) is injected.
#include <elf.h>
#include <signal.h>
#include <sys/ptrace.h>
#include <sys/uio.h>
#include <sys/user.h>
#include <sys/wait.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <thread>

#include "tracecorr/procfs.hpp"
#include "tracecorr/threadptr.hpp"
#include "tracecorr/tracee_wait.hpp"

namespace tracecorr {
namespace {

std::string thread_name(pid_t tid) { return "thread " + std::to_string(tid); }

// Owns one ptrace attachment: the thread is detached (and so resumed) however
// the read ends, with any signal that stopped it re-delivered.
class Attachment {
 public:
  Attachment(pid_t pid, pid_t tid) : pid_(pid), tid_(tid) {}
  Attachment(const Attachment&) = delete;
  Attachment& operator=(const Attachment&) = delete;
  ~Attachment() {
    if (attached_) detach_or_reap(tid_, pending_signal_);
  }

  Status seize() {
    reap_parked_attachments();  // never seize while holding an unreaped tracee (see detach_or_reap)
    if (seize_thread(pid_, tid_) != 0) {
      int err = errno;
      if (err == ESRCH) return make_error("the thread is gone", thread_name(tid_));
      if (err == EPERM)
        return make_error("ptrace refused: permission denied (need root or CAP_SYS_PTRACE; or the thread is "
                          "already traced, e.g. by a debugger)",
                          thread_name(tid_));
      return make_error(std::string("PTRACE_SEIZE failed: ") + std::strerror(err), thread_name(tid_));
    }
    attached_ = true;
    return Ok{};
  }

  // Stops the thread; on return it is in a ptrace-stop or an Error says why not.
  Status stop() {
    if (::ptrace(PTRACE_INTERRUPT, tid_, nullptr, nullptr) != 0) {
      int err = errno;
      attached_ = err != ESRCH;
      return make_error(err == ESRCH ? "the thread exited while being read" : std::string("PTRACE_INTERRUPT failed: ") + std::strerror(err),
                        thread_name(tid_));
    }
    auto stop = wait_for_ptrace_stop(tid_);
    switch (stop.kind) {
      case PtraceStop::Kind::kExited:
        attached_ = false;  // the thread is gone, and so is the attachment
        return make_error("the thread exited while being read", thread_name(tid_));
      case PtraceStop::Kind::kNotStopping:
        attached_ = false;
        park_unstopped(tid_);
        return make_error(not_stopping_reason(tid_), thread_name(tid_));
      case PtraceStop::Kind::kStopped: break;
    }
    // A signal that arrived first leaves the thread in signal-delivery-stop,
    // which is just as good for reading; the signal is handed back on detach.
    // Our interrupt (or a group-stop) is PTRACE_EVENT_STOP; no other events
    // occur: we set no options.
    if ((stop.status >> 16) == 0) pending_signal_ = WSTOPSIG(stop.status);
    return Ok{};
  }

 private:
  pid_t pid_;
  pid_t tid_;
  bool attached_ = false;
  int pending_signal_ = 0;
};

class PtraceSource final : public ThreadPointerSource {
 public:
  explicit PtraceSource(pid_t pid) : pid_(pid) {}

  Expected<std::vector<pid_t>> threads() override {
    auto t = list_threads(pid_);
    if (t.empty()) return make_error("no threads: the process is gone", "pid " + std::to_string(pid_));
    return t;
  }

  Expected<std::uint64_t> thread_pointer(pid_t tid) override {
    reap_parked_attachments();
    if (is_parked(tid)) return make_error(not_stopping_reason(tid), thread_name(tid));
    Attachment a(pid_, tid);
    if (auto st = a.seize(); !st) return st.error();
    if (auto st = a.stop(); !st) return st.error();
    return stopped_thread_pointer(tid);
  }

  Status read_stopped(pid_t tid, const std::function<void(std::uint64_t)>& read) override {
    reap_parked_attachments();
    if (is_parked(tid)) return make_error(not_stopping_reason(tid), thread_name(tid));
    Attachment a(pid_, tid);  // detached (the thread resumed) when this returns
    if (auto st = a.seize(); !st) return st.error();
    if (auto st = a.stop(); !st) return st.error();
    auto tp = stopped_thread_pointer(tid);
    if (!tp) return tp.error();
    read(*tp);
    return Ok{};
  }

  std::vector<Status> read_each_stopped(const std::vector<pid_t>& tids, const StoppedRead& read,
                                        std::chrono::milliseconds deadline) override;

  std::string describe() const override { return "ptrace"; }

 private:
  // The thread pointer of a thread this tracer holds stopped.
  static Expected<std::uint64_t> stopped_thread_pointer(pid_t tid) {
#if defined(__x86_64__)
    user_regs_struct regs{};
    iovec iov{&regs, sizeof regs};
    if (::ptrace(PTRACE_GETREGSET, tid, reinterpret_cast<void*>(NT_PRSTATUS), &iov) != 0)
      return make_error(std::string("PTRACE_GETREGSET NT_PRSTATUS failed: ") + std::strerror(errno), thread_name(tid));
    return static_cast<std::uint64_t>(regs.fs_base);
#elif defined(__aarch64__)
    std::uint64_t tpidr = 0;
    iovec iov{&tpidr, sizeof tpidr};
    if (::ptrace(PTRACE_GETREGSET, tid, reinterpret_cast<void*>(NT_ARM_TLS), &iov) != 0)
      return make_error(std::string("PTRACE_GETREGSET NT_ARM_TLS failed: ") + std::strerror(errno), thread_name(tid));
    return tpidr;
#else
    return make_error("reading the thread pointer is not implemented for this host architecture", thread_name(tid));
#endif
  }

  pid_t pid_;
};

// Per tracer thread: ptrace attachments belong to the thread that made them.
thread_local std::vector<pid_t> parked;

using Clock = std::chrono::steady_clock;

// A thread that has not stopped this long after its interrupt is slow: its
// run-queue wait is read then, to say at the deadline whether it was starved.
// Most threads stop at once, and reading every thread's schedstat (2000
// threads: 2000 files) would cost more than stopping them.
constexpr auto kSlowToStop = std::chrono::milliseconds(20);

// One thread of a read_each_stopped round: interrupted, not yet stopped.
struct Interrupted {
  std::size_t index = 0;  // into the round's tids
  pid_t tid = 0;
  Clock::time_point at;   // interrupted
  bool slow = false;      // still not stopped kSlowToStop after `at`
  std::optional<std::uint64_t> run_queue_wait_when_slow;
};

void look_at_slow_threads(std::vector<Interrupted>& waiting, Clock::time_point now) {
  for (auto& w : waiting)
    if (!w.slow && now - w.at >= kSlowToStop) {
      w.slow = true;
      w.run_queue_wait_when_slow = thread_run_queue_wait_ns(w.tid);
    }
}

// Seizes and interrupts `tid`; an Error when it cannot be (gone, refused).
Status interrupt(pid_t pid, pid_t tid) {
  if (is_parked(tid)) return make_error(not_stopping_reason(tid), thread_name(tid));
  if (seize_thread(pid, tid) != 0) {
    int err = errno;
    if (err == ESRCH) return make_error("the thread is gone", thread_name(tid));
    return make_error(err == EPERM ? "ptrace refused: permission denied (need root or CAP_SYS_PTRACE; or the thread "
                                     "is already traced, e.g. by a debugger)"
                                   : std::string("PTRACE_SEIZE failed: ") + std::strerror(err),
                      thread_name(tid));
  }
  if (::ptrace(PTRACE_INTERRUPT, tid, nullptr, nullptr) != 0) {
    int err = errno;
    if (err != ESRCH) detach_or_reap(tid);
    return make_error(err == ESRCH ? "the thread exited while being read" : std::string("PTRACE_INTERRUPT failed: ") + std::strerror(err),
                      thread_name(tid));
  }
  return Ok{};
}

// A thread of the round changed state (waitpid said `status`): read it if it
// stopped, then let it go. Returns the thread's outcome.
Status read_and_release(pid_t tid, int status, const ThreadPointerSource::StoppedRead& read,
                        Expected<std::uint64_t> (*thread_pointer)(pid_t)) {
  if (!WIFSTOPPED(status)) return make_error("the thread exited while being read", thread_name(tid));
  // A signal that came first leaves a signal-delivery-stop, as good for reading; it is handed back.
  const int pending_signal = (status >> 16) == 0 ? WSTOPSIG(status) : 0;
  auto tp = thread_pointer(tid);
  if (tp) read(tid, *tp);
  detach_or_reap(tid, pending_signal);
  if (!tp) return tp.error();
  return Ok{};
}

}  // namespace

std::vector<Status> PtraceSource::read_each_stopped(const std::vector<pid_t>& tids, const StoppedRead& read,
                                                    std::chrono::milliseconds deadline) {
  reap_parked_attachments();
  std::vector<Status> out(tids.size(), Status(Ok{}));
  const auto end = Clock::now() + deadline;
  // No thread is interrupted too late to be looked at as slow before the deadline.
  const auto last_interrupt = end - std::min<Clock::duration>(kSlowToStop, deadline / 2);
  std::vector<Interrupted> waiting;
  std::size_t next = 0;
  auto pause = std::chrono::microseconds(5);
  while (next < tids.size() || !waiting.empty()) {
    for (; next < tids.size() && waiting.size() < kStopWindow && Clock::now() < last_interrupt; ++next) {
      if (auto st = interrupt(pid_, tids[next]); !st) out[next] = st.error();
      else waiting.push_back({next, tids[next], Clock::now()});
    }
    bool progressed = false;
    std::erase_if(waiting, [&](const Interrupted& w) {
      int status = 0;
      pid_t r = wait_tracee_nohang(w.tid, status);
      if (r == 0 || (r < 0 && errno == EINTR)) return false;
      progressed = true;
      out[w.index] = r < 0 ? Status(make_error("the thread exited while being read", thread_name(w.tid)))
                           : read_and_release(w.tid, status, read, &PtraceSource::stopped_thread_pointer);
      return true;
    });
    const auto now = Clock::now();
    look_at_slow_threads(waiting, now);
    const bool none_to_wait_for = waiting.empty() && now >= last_interrupt;  // the rest come too late
    if (now < end && !none_to_wait_for) {
      if (progressed) {
        pause = std::chrono::microseconds(5);
      } else if (!waiting.empty()) {
        std::this_thread::sleep_for(pause);
        pause = std::min(pause * 2, std::chrono::microseconds(2000));
      }
      continue;
    }
    // The deadline: what has not stopped is named by its state, and parked.
    for (const auto& w : waiting) {
      std::optional<std::uint64_t> waited;
      if (auto now = thread_run_queue_wait_ns(w.tid); now && w.run_queue_wait_when_slow)
        waited = *now - std::min(*now, *w.run_queue_wait_when_slow);
      out[w.index] = make_error(not_stopping_reason(w.tid, deadline, waited), thread_name(w.tid));
      park_unstopped(w.tid);
    }
    waiting.clear();
    for (; next < tids.size(); ++next)
      out[next] = make_error("not read: the " + std::to_string(deadline.count()) +
                                 " ms this look allows for stopping threads passed before its turn",
                             thread_name(tids[next]));
  }
  return out;
}

PtraceStop wait_for_ptrace_stop(pid_t tid, std::chrono::milliseconds bound) {
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + bound;
  // Short back-off: a running thread stops within microseconds.
  auto pause = std::chrono::microseconds(5);
  for (;;) {
    int status = 0;
    pid_t r = wait_tracee_nohang(tid, status);
    if (r == tid) {
      if (WIFEXITED(status) || WIFSIGNALED(status)) return {PtraceStop::Kind::kExited, status};
      if (WIFSTOPPED(status)) return {PtraceStop::Kind::kStopped, status};
      continue;
    }
    if (r < 0 && errno != EINTR) return {PtraceStop::Kind::kExited, 0};  // ECHILD: no longer our tracee
    auto now = Clock::now();
    if (now >= deadline) return {PtraceStop::Kind::kNotStopping, 0};
    std::this_thread::sleep_for(std::min<Clock::duration>(pause, deadline - now));
    pause = std::min(pause * 2, std::chrono::microseconds(2000));
  }
}

std::string not_stopping_reason(pid_t tid, std::chrono::milliseconds bound, std::optional<std::uint64_t> run_queue_wait_ns) {
  const std::string head = "the thread did not stop within " + std::to_string(bound.count()) + " ms of PTRACE_INTERRUPT";
  switch (task_state(tid, tid)) {
    case 'R': {
      std::string waited = run_queue_wait_ns ? std::to_string(*run_queue_wait_ns / 1'000'000) + " ms of them" : "";
      return head + ": starved, runnable and waiting for a CPU (schedstat: " +
             (waited.empty() ? std::string("state R") : "waited " + waited + " in a run queue") +
             "); a loaded machine, not the thread's doing; not read";
    }
    case 'D': return head + " (in uninterruptible sleep, or parked in a vfork whose child has not exec'd); not read";
    case 0: return head + " (it is gone); not read";
    default: return head + " (state " + std::string(1, task_state(tid, tid)) + "); not read";
  }
}

std::optional<ThreadSchedstat> thread_schedstat(pid_t tid) {
  // "<ns on cpu> <ns waiting on a run queue> <timeslices>"
  std::FILE* f = std::fopen(("/proc/" + std::to_string(tid) + "/schedstat").c_str(), "re");
  if (!f) return std::nullopt;
  unsigned long long on_cpu = 0, waiting = 0, timeslices = 0;
  const bool ok = std::fscanf(f, "%llu %llu %llu", &on_cpu, &waiting, &timeslices) == 3;
  std::fclose(f);
  if (!ok) return std::nullopt;
  return ThreadSchedstat{on_cpu, waiting, timeslices};
}

std::optional<std::uint64_t> thread_run_queue_wait_ns(pid_t tid) {
  if (auto stat = thread_schedstat(tid)) return stat->run_queue_wait_ns;
  return std::nullopt;
}

void detach_or_reap(pid_t tid, int signal) {
  if (::ptrace(PTRACE_DETACH, tid, nullptr, reinterpret_cast<void*>(static_cast<long>(signal))) == 0) return;
  auto stop = wait_for_ptrace_stop(tid);
  if (stop.kind == PtraceStop::Kind::kStopped) {
    // Stopped again (a signal-delivery-stop): hand that signal back too.
    int pending = (stop.status >> 16) == 0 ? WSTOPSIG(stop.status) : signal;
    if (::ptrace(PTRACE_DETACH, tid, nullptr, reinterpret_cast<void*>(static_cast<long>(pending))) != 0) park_unstopped(tid);
  } else if (stop.kind == PtraceStop::Kind::kNotStopping) {
    park_unstopped(tid);
  }  // kExited: reaped
}

void park_unstopped(pid_t tid) {
  if (!is_parked(tid)) parked.push_back(tid);
}

bool is_parked(pid_t tid) { return std::find(parked.begin(), parked.end(), tid) != parked.end(); }

void reap_parked_attachments() {
  std::erase_if(parked, [](pid_t tid) {
    int status = 0;
    pid_t r = wait_tracee_nohang(tid, status);
    if (r == 0) return false;  // still not stopped
    if (r < 0) return errno != EINTR;  // ECHILD: gone
    if (!WIFSTOPPED(status)) return true;  // exited
    int signal = (status >> 16) == 0 ? WSTOPSIG(status) : 0;
    ::ptrace(PTRACE_DETACH, tid, nullptr, reinterpret_cast<void*>(static_cast<long>(signal)));
    return true;
  });
}

std::vector<pid_t> list_threads(pid_t pid) {
  // A zombie thread-group leader (its thread called pthread_exit) has no
  // registers to read and cannot be seized; the live threads can.
  return list_threads(pid, live_task(pid) != pid);
}

std::vector<pid_t> list_threads(pid_t pid, bool leader_zombie) {
  std::vector<pid_t> tids;
  for (int tid : numbered_entries("/proc/" + std::to_string(pid) + "/task"))
    if (tid > 0 && !(leader_zombie && tid == pid)) tids.push_back(tid);
  return tids;
}

Status ThreadPointerSource::read_stopped(pid_t tid, const std::function<void(std::uint64_t)>& read) {
  auto tp = thread_pointer(tid);
  if (!tp) return tp.error();
  read(*tp);
  return Ok{};
}

std::vector<Status> ThreadPointerSource::read_each_stopped(const std::vector<pid_t>& tids, const StoppedRead& read,
                                                           std::chrono::milliseconds) {
  std::vector<Status> out;
  out.reserve(tids.size());
  for (pid_t tid : tids) out.push_back(read_stopped(tid, [&](std::uint64_t tp) { read(tid, tp); }));
  return out;
}

std::unique_ptr<ThreadPointerSource> make_ptrace_source(pid_t pid) { return std::make_unique<PtraceSource>(pid); }

}  // namespace tracecorr

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
#include <cstring>

#include "tracecorr/procfs.hpp"
#include "tracecorr/threadptr.hpp"

namespace tracecorr {
namespace {

std::string thread_name(pid_t tid) { return "thread " + std::to_string(tid); }

// Owns one ptrace attachment: the thread is detached (and so resumed) however
// the read ends, with any signal that stopped it re-delivered.
class Attachment {
 public:
  explicit Attachment(pid_t tid) : tid_(tid) {}
  Attachment(const Attachment&) = delete;
  Attachment& operator=(const Attachment&) = delete;
  ~Attachment() {
    if (attached_) ::ptrace(PTRACE_DETACH, tid_, nullptr, reinterpret_cast<void*>(static_cast<long>(pending_signal_)));
  }

  Status seize() {
    if (::ptrace(PTRACE_SEIZE, tid_, nullptr, nullptr) != 0) {
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
    for (;;) {
      int status = 0;
      pid_t r = ::waitpid(tid_, &status, __WALL);
      if (r < 0) {
        if (errno == EINTR) continue;
        attached_ = false;  // ECHILD: the thread is gone, and so is the attachment
        return make_error("the thread exited while being read", thread_name(tid_));
      }
      if (WIFEXITED(status) || WIFSIGNALED(status)) {
        attached_ = false;
        return make_error("the thread exited while being read", thread_name(tid_));
      }
      if (!WIFSTOPPED(status)) continue;
      int sig = WSTOPSIG(status);
      int event = status >> 16;
      if (event == PTRACE_EVENT_STOP) return Ok{};  // our interrupt (or a group-stop)
      if (event == 0) {
        // A signal arrived first: the thread is in signal-delivery-stop, which
        // is just as good for reading; the signal is handed back on detach.
        pending_signal_ = sig;
        return Ok{};
      }
      // Other events cannot occur: we set no options.
      return Ok{};
    }
  }

 private:
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
    Attachment a(tid);
    if (auto st = a.seize(); !st) return st.error();
    if (auto st = a.stop(); !st) return st.error();
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

  std::string describe() const override { return "ptrace"; }

 private:
  pid_t pid_;
};

}  // namespace

std::vector<pid_t> list_threads(pid_t pid) {
  std::vector<pid_t> tids;
  for (int tid : numbered_entries("/proc/" + std::to_string(pid) + "/task"))
    if (tid > 0) tids.push_back(tid);
  return tids;
}

std::unique_ptr<ThreadPointerSource> make_ptrace_source(pid_t pid) { return std::make_unique<PtraceSource>(pid); }

}  // namespace tracecorr

// Hardware watchpoints on one thread of a hostile target, by ptrace: the
// attachment, its stops and the x86-64 debug registers, released on every
// path. Shared by the update-order watch (TLS-04) and the TLS slot watch
// (TLS-01); internal to the conform layer.
//
// ptrace discipline, because the target is hostile and must never be left
// stopped or armed:
//  - PTRACE_SEIZE (no SIGSTOP) and PTRACE_INTERRUPT (no signal) to stop it.
//  - All ptrace requests come from the calling thread: ptrace attaches a
//    tracee to one tracer *thread*.
//  - WatchSession (RAII) clears DR7, then DR0..DR3, and detaches on every
//    path; if the thread is running at that moment it is interrupted first.
//  - Waiting is waitpid(WNOHANG) with a short back-off rather than a blocking
//    waitpid: the watch has a deadline, and a blocking waitpid could only be
//    woken by signals we would have to install in the caller's process.
#pragma once

#include <signal.h>
#include <sys/ptrace.h>
#include <sys/types.h>
#include <sys/user.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "tracecorr/error.hpp"
#include "tracecorr/memory.hpp"
#include "tracecorr/procfs.hpp"

namespace tracecorr::conform::hardware_watch {

using Clock = std::chrono::steady_clock;

inline std::string thread_where(pid_t pid, pid_t tid) { return "pid " + std::to_string(pid) + " thread " + std::to_string(tid); }

// x86-64 has four debug registers, each watching at most 8 aligned bytes.
inline constexpr std::size_t kRegisters = 4;

inline bool running_under_qemu(pid_t pid) { return runs_under_qemu_user(pid); }

// The process (thread group) of a thread the kernel attached to a watch at a
// clone: its Tgid; `fallback` when /proc no longer says.
inline pid_t thread_group_of(pid_t tid, pid_t fallback) {
  std::ifstream in("/proc/" + std::to_string(tid) + "/status");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("Tgid:", 0) == 0) return static_cast<pid_t>(std::atol(line.c_str() + 5));
  return fallback;
}

// Starts a watch's own thread, `state.run(seized)` (ptrace binds a tracee to
// one tracer thread, so everything the watch does happens there), and waits
// for its answer to whether it seized the process; on a refusal the thread has
// ended and is joined.
template <class State>
Status start_watch_thread(State& state) {
  std::promise<Status> seized;
  auto answer = seized.get_future();
  state.thread = std::thread([&state, &seized] { state.run(seized); });
  Status st = answer.get();
  if (!st) state.thread.join();
  return st;
}

// The body of that thread: seize the process, answer, then follow it until
// the watch ends (`Follower`: seize_root() and run(), each watch's own).
template <class Follower, class State>
void seize_then_follow(State& state, std::promise<Status>& seized) {
  Follower follower(state);
  if (auto st = follower.seize_root(); !st) {
    seized.set_value(st);
    return;
  }
  seized.set_value(Ok{});  // `seized` is gone once the caller has its answer
  follower.run();
}

// A thread that is a zombie (or gone) will never report a ptrace-stop; a
// zombie thread-group leader does not even report its exit until the other
// threads exit, so waitpid alone could wait forever.
inline bool thread_is_dead(pid_t pid, pid_t tid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/task/" + std::to_string(tid) + "/stat");
  std::string stat;
  if (!std::getline(in, stat)) return true;
  auto paren = stat.rfind(')');
  if (paren == std::string::npos || paren + 2 >= stat.size()) return true;
  char state = stat[paren + 2];
  return state == 'Z' || state == 'X';
}

// True when SIGTRAP is pending for the thread itself (SigPnd in its status):
// the kernel's word, where a timeout would only be a guess.
inline bool sigtrap_pending(pid_t pid, pid_t tid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/task/" + std::to_string(tid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("SigPnd:", 0) != 0) continue;
    std::uint64_t mask = 0;
    if (std::sscanf(line.c_str() + 7, "%" SCNx64, &mask) != 1) return false;
    return (mask >> (SIGTRAP - 1)) & 1;
  }
  return false;
}

// How long release() may take to bring a starved thread to a stop and let it
// take a pending watchpoint SIGTRAP. Leaving either undone kills the target
// (armed registers or a pending SIGTRAP outlive the detach), so this is long:
// on a busy machine a runnable thread can wait seconds for a CPU.
inline constexpr auto kReleasePatience = std::chrono::seconds(30);

#if defined(__x86_64__)

inline constexpr int kDebugStatusRegister = 6;   // DR6
inline constexpr int kDebugControlRegister = 7;  // DR7
inline constexpr std::uint64_t kDr6HitBits = 0xf;  // B0..B3

inline long debug_register_offset(int index) {
  return static_cast<long>(offsetof(struct user, u_debugreg) + static_cast<std::size_t>(index) * sizeof(user{}.u_debugreg[0]));
}

// DR7 for `count` watchpoints: local enable (L_i, bit 2i), R/W_i = 01 (data
// writes only), LEN_i = 10 (8 bytes, x86-64 only).
inline std::uint64_t dr7_for(std::size_t count) {
  std::uint64_t dr7 = 0;
  for (std::size_t i = 0; i < count; ++i) {
    dr7 |= std::uint64_t{1} << (2 * i);
    dr7 |= std::uint64_t{0b01} << (16 + 4 * i);
    dr7 |= std::uint64_t{0b10} << (18 + 4 * i);
  }
  return dr7;
}

// What one waitpid status means for the watch.
struct Stop {
  // kSyscall: a system-call entry or exit stop (PTRACE_O_TRACESYSGOOD and a
  // resume by PTRACE_SYSCALL only; see WatchSession::set_syscall_stops).
  enum class Kind { kExited, kGroupStop, kEventStop, kSignal, kSyscall } kind;
  int signal = 0;
  int event = 0;  // PTRACE_EVENT_* of an event stop (status >> 16)
};

inline Stop classify(int status) {
  if (WIFEXITED(status) || WIFSIGNALED(status)) return {Stop::Kind::kExited};
  int sig = WSTOPSIG(status);
  if ((status >> 16) == PTRACE_EVENT_STOP) {
    // Under PTRACE_SEIZE a group-stop reports the stopping signal; our
    // PTRACE_INTERRUPT (and the wake-up after PTRACE_LISTEN) reports SIGTRAP.
    bool group = sig == SIGSTOP || sig == SIGTSTP || sig == SIGTTIN || sig == SIGTTOU;
    return {group ? Stop::Kind::kGroupStop : Stop::Kind::kEventStop, sig, PTRACE_EVENT_STOP};
  }
  if ((status >> 16) != 0) return {Stop::Kind::kEventStop, sig, status >> 16};  // PTRACE_O_TRACE* events
  if (sig == (SIGTRAP | 0x80)) return {Stop::Kind::kSyscall, sig};
  return {Stop::Kind::kSignal, sig};
}

// Owns the attachment and the armed debug registers of one thread.
class WatchSession {
 public:
  WatchSession(pid_t pid, pid_t tid) : pid_(pid), tid_(tid) {}
  // A task the kernel attached to us itself (PTRACE_O_TRACECLONE/FORK): it
  // reports its first stop (PTRACE_EVENT_STOP) through next_stop().
  static std::unique_ptr<WatchSession> adopt(pid_t pid, pid_t tid) {
    auto s = std::make_unique<WatchSession>(pid, tid);
    s->attached_ = true;
    return s;
  }
  pid_t tid() const { return tid_; }
  WatchSession(const WatchSession&) = delete;
  WatchSession& operator=(const WatchSession&) = delete;
  ~WatchSession() { release(); }

  std::string where() const { return thread_where(pid_, tid_); }

  // `options`: PTRACE_O_* (e.g. follow the clones of the thread).
  Status seize(unsigned long options = 0) {
    if (::ptrace(PTRACE_SEIZE, tid_, nullptr, reinterpret_cast<void*>(options)) != 0) {
      int err = errno;
      if (err == ESRCH) return make_error("the thread does not exist (or is already gone)", where());
      if (err == EPERM)
        return make_error("ptrace refused: permission denied (need root or CAP_SYS_PTRACE, and the thread must not "
                          "already be traced, e.g. by a debugger or another tracecorr watch)",
                          where());
      return make_error(std::string("PTRACE_SEIZE failed: ") + std::strerror(err), where());
    }
    attached_ = true;
    return Ok{};
  }

  // Interrupts the running thread and waits (bounded) until it is held in a
  // ptrace-stop. Returns the stop; kExited when the thread went away.
  Expected<Stop> interrupt(Clock::duration bound) {
    if (::ptrace(PTRACE_INTERRUPT, tid_, nullptr, nullptr) != 0) {
      int err = errno;
      if (err == ESRCH) {
        attached_ = false;
        return Stop{Stop::Kind::kExited};
      }
      return make_error(std::string("PTRACE_INTERRUPT failed: ") + std::strerror(err), where());
    }
    auto st = next_stop(Clock::now() + bound);
    if (!st) return make_error("the thread did not stop within " +
                                   std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(bound).count()) +
                                   " ms of PTRACE_INTERRUPT (uninterruptible sleep?)",
                               where());
    return *st;
  }

  // Waits for the next event up to `deadline`; nullopt when none came.
  std::optional<Stop> next_stop(Clock::time_point deadline) {
    auto pause = std::chrono::microseconds(10);
    auto next_liveness_check = Clock::now() + std::chrono::milliseconds(20);
    for (;;) {
      int status = 0;
      if (leader_exited()) {  // a zombie leader is its parent's to reap (tracecorr's Target, for a launched one)
        attached_ = held_ = false;
        return Stop{Stop::Kind::kExited};
      }
      pid_t r = ::waitpid(tid_, &status, __WALL | WNOHANG);
      if (r == tid_) {
        Stop s = classify(status);
        last_stop_ = s;
        held_ = s.kind != Stop::Kind::kExited;
        if (s.kind == Stop::Kind::kExited) attached_ = false;
        resume_signal_ = 0;
        return s;
      }
      if (r < 0 && errno != EINTR) {  // ECHILD: no longer our tracee
        attached_ = held_ = false;
        return Stop{Stop::Kind::kExited};
      }
      auto now = Clock::now();
      if (now >= next_liveness_check) {
        if (thread_is_dead(pid_, tid_)) {
          attached_ = held_ = false;  // the kernel drops the attachment with the thread
          return Stop{Stop::Kind::kExited};
        }
        next_liveness_check = now + std::chrono::milliseconds(20);
      }
      if (now >= deadline) return std::nullopt;
      std::this_thread::sleep_for(std::min<Clock::duration>(pause, deadline - now));
      pause = std::min(pause * 2, std::chrono::microseconds(1000));
    }
  }

  // The signal handed to the thread when it next runs (0: none).
  void set_resume_signal(int sig) { resume_signal_ = sig; }

  // Resume with PTRACE_SYSCALL from now on: the thread also stops at each
  // system call's entry and exit (reported as Stop::Kind::kSyscall when the
  // tracee was seized with PTRACE_O_TRACESYSGOOD).
  void set_syscall_stops(bool on) { syscall_stops_ = on; }

  // The system call the thread is stopped at (a kSyscall stop): entry (number
  // and arguments) or exit (result).
  Expected<__ptrace_syscall_info> syscall_info() {
    __ptrace_syscall_info info{};
    if (::ptrace(PTRACE_GET_SYSCALL_INFO, tid_, reinterpret_cast<void*>(sizeof info), &info) <= 0)
      return make_error(std::string("PTRACE_GET_SYSCALL_INFO failed: ") + std::strerror(errno), where());
    return info;
  }

  // Resumes from the stop it is held in.
  Status resume() {
    // A group-stop must stay a stop: PTRACE_LISTEN leaves the thread stopped
    // for job control while letting us see the SIGCONT that ends it.
    bool listen = last_stop_.kind == Stop::Kind::kGroupStop;
    const auto cont = syscall_stops_ ? PTRACE_SYSCALL : PTRACE_CONT;
    long r = listen ? ::ptrace(PTRACE_LISTEN, tid_, nullptr, nullptr)
                    : ::ptrace(cont, tid_, nullptr, reinterpret_cast<void*>(static_cast<long>(resume_signal_)));
    if (r != 0) {
      int err = errno;
      if (err == ESRCH) {  // killed while held (SIGKILL needs no consent): next_stop() reports the exit
        held_ = false;
        return Ok{};
      }
      return make_error(std::string(listen ? "PTRACE_LISTEN" : syscall_stops_ ? "PTRACE_SYSCALL" : "PTRACE_CONT") +
                            " failed: " + std::strerror(err),
                        where());
    }
    held_ = false;
    return Ok{};
  }

  // Watches writes to the 8-byte aligned chunks at `addresses` (at most kRegisters).
  Status arm(const std::vector<std::uint64_t>& addresses) {
    if (addresses.size() > kRegisters) return make_error("more chunks than debug registers", where());
    armed_ = true;  // from the first write on, release() must clear
    for (std::size_t i = 0; i < addresses.size(); ++i)
      if (auto st = poke_debug_register(static_cast<int>(i), addresses[i]); !st) return st;
    return poke_debug_register(kDebugControlRegister, dr7_for(addresses.size()));
  }

  bool armed() const { return armed_; }
  bool held() const { return held_; }

  // The thread's pointer (fs_base) while it is held in a stop.
  Expected<std::uint64_t> thread_pointer() {
    user_regs_struct regs{};
    if (::ptrace(PTRACE_GETREGS, tid_, nullptr, &regs) != 0)
      return make_error(std::string("PTRACE_GETREGS failed: ") + std::strerror(errno), where());
    return static_cast<std::uint64_t>(regs.fs_base);
  }

  // The new task's number at a clone, fork or vfork event stop.
  Expected<pid_t> event_message() {
    unsigned long message = 0;
    if (::ptrace(PTRACE_GETEVENTMSG, tid_, nullptr, &message) != 0)
      return make_error(std::string("PTRACE_GETEVENTMSG failed: ") + std::strerror(errno), where());
    return static_cast<pid_t>(message);
  }

  // DR6 bits B0..B3 of the last debug exception, cleared for the next one.
  Expected<unsigned> take_hits() {
    errno = 0;
    long dr6 = ::ptrace(PTRACE_PEEKUSER, tid_, reinterpret_cast<void*>(debug_register_offset(kDebugStatusRegister)), nullptr);
    if (errno != 0) return make_error(std::string("reading DR6 failed: ") + std::strerror(errno), where());
    unsigned hits = static_cast<unsigned>(static_cast<std::uint64_t>(dr6) & kDr6HitBits);
    if (hits != 0)
      if (auto st = poke_debug_register(kDebugStatusRegister, 0); !st) return st.error();
    return hits;
  }

  Expected<std::uint64_t> instruction_pointer() {
    user_regs_struct regs{};
    if (::ptrace(PTRACE_GETREGS, tid_, nullptr, &regs) != 0)
      return make_error(std::string("PTRACE_GETREGS failed: ") + std::strerror(errno), where());
    return static_cast<std::uint64_t>(regs.rip);
  }

  // True for the SIGTRAP of one of our watchpoints; a SIGTRAP the target
  // raised itself (no DR6 hit bit, or a user si_code) is not ours.
  bool is_our_trap(const Stop& stop) {
    if (stop.kind != Stop::Kind::kSignal || stop.signal != SIGTRAP || !armed_) return false;
    auto hits = take_hits();
    return hits.ok() && *hits != 0 && siginfo_is_hardware_breakpoint();
  }

  bool siginfo_is_hardware_breakpoint() {
    siginfo_t info{};
    if (::ptrace(PTRACE_GETSIGINFO, tid_, nullptr, &info) != 0) return false;
    return info.si_signo == SIGTRAP && info.si_code == TRAP_HWBKPT;
  }

  // Clears the debug registers and detaches; the thread runs on (or stays in
  // its group-stop) with any signal it was due. Never fails loudly: it runs
  // on error paths and in the destructor.
  void release() noexcept {
    if (!attached_) return;
    if (!held_) {
      // Running, or listening in a group-stop: stop it so its registers can be written.
      auto stop = interrupt(kReleasePatience);
      if (!stop || !attached_) return;  // gone, or unstoppable: nothing more can be done
      if (stop->kind == Stop::Kind::kSignal) resume_signal_ = is_our_trap(*stop) ? 0 : stop->signal;
    }
    if (armed_) {
      // DR7 first: once it is 0 nothing is armed, whatever DR0..DR3 hold.
      (void)poke_debug_register(kDebugControlRegister, 0);
      for (int i = 0; i < static_cast<int>(kRegisters); ++i) (void)poke_debug_register(i, 0);
      // A hit whose SIGTRAP we have not seen (DR6 still set) means that signal
      // is pending: the kernel reports our interrupt before it dequeues
      // signals. Left there, it would reach the target after the detach, and
      // SIGTRAP's default action kills.
      auto unclaimed = take_hits();
      if ((unclaimed.ok() && *unclaimed != 0) || sigtrap_pending(pid_, tid_)) swallow_pending_trap();
      armed_ = false;
    }
    ::ptrace(PTRACE_DETACH, tid_, nullptr, reinterpret_cast<void*>(static_cast<long>(resume_signal_)));
    attached_ = held_ = false;
  }

 private:
  // A thread-group leader's exit is looked at without reaping it: waitpid on
  // it would also take the exit status from its real parent, which may be
  // this very process.
  bool leader_exited() {
    if (tid_ != pid_) return false;
    siginfo_t info{};
    if (::waitid(P_PID, static_cast<id_t>(tid_), &info, WEXITED | WSTOPPED | WNOHANG | WNOWAIT | __WALL) != 0) return false;
    return info.si_pid == tid_ && (info.si_code == CLD_EXITED || info.si_code == CLD_KILLED || info.si_code == CLD_DUMPED);
  }

  // Lets the thread run until it dequeues that pending SIGTRAP, and drops it.
  // The registers are already clear, so no new one can be raised meanwhile;
  // the thread's own signals met on the way are delivered as usual. Whether
  // the SIGTRAP is still pending is read from the kernel each round: a thread
  // that has not run yet (a busy machine) still holds it.
  void swallow_pending_trap() noexcept {
    const auto give_up = Clock::now() + kReleasePatience;
    while (attached_ && held_ && Clock::now() < give_up) {
      if (!sigtrap_pending(pid_, tid_)) return;
      // In a group-stop the signal waits for SIGCONT; resuming would break job control.
      if (last_stop_.kind == Stop::Kind::kGroupStop) return;
      if (!resume().ok() || !attached_) return;
      auto stop = next_stop(Clock::now() + std::chrono::milliseconds(500));
      if (!stop) {  // not scheduled yet: stop it again and look once more
        auto again = interrupt(kReleasePatience);
        if (!again.ok() || !attached_) return;
        stop = *again;
      }
      if (stop->kind == Stop::Kind::kExited) return;
      if (stop->kind != Stop::Kind::kSignal) continue;
      if (stop->signal == SIGTRAP && siginfo_is_hardware_breakpoint()) {
        resume_signal_ = 0;  // dequeued, and dropped at the detach
        return;
      }
      resume_signal_ = stop->signal;
    }
  }

  Status poke_debug_register(int index, std::uint64_t value) {
    if (::ptrace(PTRACE_POKEUSER, tid_, reinterpret_cast<void*>(debug_register_offset(index)),
                 reinterpret_cast<void*>(value)) != 0)
      return make_error("writing DR" + std::to_string(index) + " = " + hex_address(value) + " failed: " + std::strerror(errno),
                        where());
    return Ok{};
  }

  pid_t pid_, tid_;
  bool attached_ = false;
  bool held_ = false;       // in a ptrace-stop we have not resumed
  bool armed_ = false;
  bool syscall_stops_ = false;
  Stop last_stop_{Stop::Kind::kEventStop};
  int resume_signal_ = 0;
};

#endif  // __x86_64__

}  // namespace tracecorr::conform::hardware_watch

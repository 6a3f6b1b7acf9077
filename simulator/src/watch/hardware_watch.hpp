// Hardware watchpoints on one thread of a hostile target, by ptrace: the
// attachment, its stops and the watchpoint registers, released on every
// path. Shared by the update-order watch, the TLS slot watch, the mapping watch
// and the published-record watch; internal to the watch layer.
//
// One code path for every architecture above `DebugRegisters`, the one
// architecture-specific class (x86-64: DR0..DR3, DR6, DR7 by PTRACE_POKEUSER;
// arm64: DBGWVR/DBGWCR by NT_ARM_HW_WATCH). What differs beyond the registers
// is when the trap comes: x86-64 reports a data breakpoint after the store,
// arm64 before it (and the kernel does not step over it for a ptrace
// watchpoint), so WatchSession::take_signal() steps the thread over the
// trapping store on arm64. Either way a "store done" means the thread is held
// right after the store, and the watched bytes read there are its result.
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

#include <elf.h>
#include <signal.h>
#include <sys/ptrace.h>
#include <sys/types.h>
#include <sys/uio.h>
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
#include <string_view>
#include <thread>
#include <vector>

#include "tracecorr/error.hpp"
#include "tracecorr/memory.hpp"
#include "tracecorr/procfs.hpp"
#include "tracecorr/tracee_wait.hpp"

namespace tracecorr::watch::hardware_watch {

using Clock = std::chrono::steady_clock;

inline std::string thread_where(pid_t pid, pid_t tid) { return "pid " + std::to_string(pid) + " thread " + std::to_string(tid); }

// The most chunks a watch plans: four 8-byte aligned chunks (x86-64 has four
// debug registers; arm64 cores have 2 to 16 watchpoints, and arm() refuses
// more chunks than the thread's core has).
inline constexpr std::size_t kRegisters = 4;
// The bytes one watchpoint covers: an aligned 8-byte chunk.
inline constexpr std::uint64_t kChunk = 8;

// Where user space ends: the kernel refuses a watchpoint above it (x86-64:
// 47-bit addresses; arm64: Debian's kernels use 48-bit virtual addresses).
#if defined(__aarch64__)
inline constexpr std::uint64_t kUserSpaceEnd = std::uint64_t{1} << 48;
#else
inline constexpr std::uint64_t kUserSpaceEnd = std::uint64_t{1} << 47;
#endif

inline bool running_under_qemu(pid_t pid) { return runs_under_qemu_user(pid); }

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

#if defined(__x86_64__) || defined(__aarch64__)
#define TRACECORR_HARDWARE_WATCH 1
#endif

#if defined(__x86_64__)

// The debug registers of one stopped thread: DR0..DR3 (addresses), DR6
// (which fired), DR7 (control), in its `struct user` by PTRACE_POKEUSER.
class DebugRegisters {
 public:
  // x86-64 raises a data breakpoint after the store has completed.
  static constexpr bool kTrapsBeforeStore = false;

  DebugRegisters(pid_t pid, pid_t tid) : tid_(tid), where_(thread_where(pid, tid)) {}

  // Arms exactly `chunks` (8-byte aligned, at most kRegisters), data writes only.
  Status write(const std::vector<std::uint64_t>& chunks) {
    for (std::size_t i = 0; i < chunks.size(); ++i)
      if (auto st = poke(static_cast<int>(i), chunks[i]); !st) return st;
    return poke(kControl, dr7_for(chunks.size()));
  }

  // Nothing armed: DR7 first (once it is 0 nothing fires, whatever DR0..DR3 hold).
  Status clear() {
    auto st = poke(kControl, 0);
    for (int i = 0; i < static_cast<int>(kRegisters); ++i) (void)poke(i, 0);
    return st;
  }

  // Bit i: chunk i fired at the last debug exception (DR6 B0..B3), cleared
  // for the next one. `trap`: unused, DR6 says.
  Expected<unsigned> take_hits(const std::vector<std::uint64_t>& /*chunks*/, const siginfo_t* /*trap*/) {
    errno = 0;
    long dr6 = ::ptrace(PTRACE_PEEKUSER, tid_, reinterpret_cast<void*>(offset(kStatus)), nullptr);
    if (errno != 0) return make_error(std::string("reading DR6 failed: ") + std::strerror(errno), where_);
    unsigned hits = static_cast<unsigned>(static_cast<std::uint64_t>(dr6) & kHitBits);
    if (hits != 0)
      if (auto st = poke(kStatus, 0); !st) return st.error();
    return hits;
  }

  // A hit the thread has taken whose SIGTRAP we have not seen (DR6 still set).
  bool unclaimed_hit() {
    auto hits = take_hits({}, nullptr);
    return hits.ok() && *hits != 0;
  }

  Expected<std::uint64_t> thread_pointer() {
    auto regs = registers();
    if (!regs) return regs.error();
    return static_cast<std::uint64_t>(regs->fs_base);
  }

  Expected<std::uint64_t> instruction_pointer() {
    auto regs = registers();
    if (!regs) return regs.error();
    return static_cast<std::uint64_t>(regs->rip);
  }

 private:
  static constexpr int kStatus = 6;   // DR6
  static constexpr int kControl = 7;  // DR7
  static constexpr std::uint64_t kHitBits = 0xf;  // B0..B3

  static long offset(int index) {
    return static_cast<long>(offsetof(struct user, u_debugreg) + static_cast<std::size_t>(index) * sizeof(user{}.u_debugreg[0]));
  }

  // DR7 for `count` watchpoints: local enable (L_i, bit 2i), R/W_i = 01 (data
  // writes only), LEN_i = 10 (8 bytes, x86-64 only).
  static std::uint64_t dr7_for(std::size_t count) {
    std::uint64_t dr7 = 0;
    for (std::size_t i = 0; i < count; ++i) {
      dr7 |= std::uint64_t{1} << (2 * i);
      dr7 |= std::uint64_t{0b01} << (16 + 4 * i);
      dr7 |= std::uint64_t{0b10} << (18 + 4 * i);
    }
    return dr7;
  }

  Expected<user_regs_struct> registers() {
    user_regs_struct regs{};
    if (::ptrace(PTRACE_GETREGS, tid_, nullptr, &regs) != 0)
      return make_error(std::string("PTRACE_GETREGS failed: ") + std::strerror(errno), where_);
    return regs;
  }

  Status poke(int index, std::uint64_t value) {
    if (::ptrace(PTRACE_POKEUSER, tid_, reinterpret_cast<void*>(offset(index)), reinterpret_cast<void*>(value)) != 0)
      return make_error("writing DR" + std::to_string(index) + " = " + hex_address(value) + " failed: " + std::strerror(errno),
                        where_);
    return Ok{};
  }

  pid_t tid_;
  std::string where_;
};

#elif defined(__aarch64__)

// The watchpoint registers of one stopped thread (DBGWVR<n>_EL1 address,
// DBGWCR<n>_EL1 control), through the kernel's NT_ARM_HW_WATCH regset.
class DebugRegisters {
 public:
  // arm64 raises a watchpoint exception before the store, with the
  // instruction not executed; for a ptrace watchpoint the kernel leaves the
  // stepping over it to the tracer.
  static constexpr bool kTrapsBeforeStore = true;

  DebugRegisters(pid_t pid, pid_t tid) : tid_(tid), where_(thread_where(pid, tid)) {}

  // The core's watchpoints (dbg_info bits 0..7, as the kernel reports them).
  Expected<std::size_t> capacity() {
    if (slots_ == 0) {
      HwDebugState state{};
      iovec io{&state, sizeof state};
      if (::ptrace(PTRACE_GETREGSET, tid_, reinterpret_cast<void*>(NT_ARM_HW_WATCH), &io) != 0)
        return make_error(std::string("PTRACE_GETREGSET(NT_ARM_HW_WATCH) failed: ") + std::strerror(errno), where_);
      slots_ = std::min<std::size_t>(state.dbg_info & 0xff, kMaxSlots);
      if (slots_ == 0) return make_error("the core has no hardware watchpoints (NT_ARM_HW_WATCH dbg_info 0)", where_);
    }
    return slots_;
  }

  // Arms exactly `chunks` (8-byte aligned), stores only, at EL0; every other
  // slot disabled.
  Status write(const std::vector<std::uint64_t>& chunks) {
    auto slots = capacity();
    if (!slots) return slots.error();
    if (chunks.size() > *slots)
      return make_error("the core has " + std::to_string(*slots) + " hardware watchpoints, " + std::to_string(chunks.size()) +
                            " were asked",
                        where_);
    HwDebugState state{};
    for (std::size_t i = 0; i < chunks.size(); ++i) {
      state.dbg_regs[i].addr = chunks[i];
      state.dbg_regs[i].ctrl = kStoreWatch8;
    }
    return set(state, *slots);
  }

  Status clear() {
    auto slots = capacity();
    if (!slots) return slots.error();
    return set(HwDebugState{}, *slots);
  }

  // Bit i: chunk i fired. There is no status register to ask: the SIGTRAP's
  // si_addr is the data address the store accessed, which for a wide store
  // (stp, a vector register) may lie before the watched chunk; the hit is the
  // chunk nearest to it, as the kernel's own watchpoint handler decides.
  Expected<unsigned> take_hits(const std::vector<std::uint64_t>& chunks, const siginfo_t* trap) {
    if (!trap || trap->si_signo != SIGTRAP || trap->si_code != TRAP_HWBKPT || chunks.empty()) return 0u;
    const auto address = reinterpret_cast<std::uint64_t>(trap->si_addr);
    std::size_t nearest = 0;
    std::uint64_t best = UINT64_MAX;
    for (std::size_t i = 0; i < chunks.size(); ++i) {
      const std::uint64_t distance = address < chunks[i] ? chunks[i] - address
                                     : address >= chunks[i] + 8 ? address - (chunks[i] + 7) : 0;
      if (distance < best) best = distance, nearest = i;
    }
    return 1u << nearest;
  }

  // No status register keeps a hit: a pending SIGTRAP is the only trace of one.
  bool unclaimed_hit() { return false; }

  Expected<std::uint64_t> thread_pointer() {
    std::uint64_t tpidr = 0;
    iovec io{&tpidr, sizeof tpidr};
    if (::ptrace(PTRACE_GETREGSET, tid_, reinterpret_cast<void*>(NT_ARM_TLS), &io) != 0)
      return make_error(std::string("PTRACE_GETREGSET(NT_ARM_TLS) failed: ") + std::strerror(errno), where_);
    return tpidr;
  }

  Expected<std::uint64_t> instruction_pointer() {
    user_regs_struct regs{};
    iovec io{&regs, sizeof regs};
    if (::ptrace(PTRACE_GETREGSET, tid_, reinterpret_cast<void*>(NT_PRSTATUS), &io) != 0)
      return make_error(std::string("PTRACE_GETREGSET(NT_PRSTATUS) failed: ") + std::strerror(errno), where_);
    return static_cast<std::uint64_t>(regs.pc);
  }

 private:
  static constexpr std::size_t kMaxSlots = 16;
  // struct user_hwdebug_state of <asm/ptrace.h>, spelled here: that header
  // redefines the PTRACE_* requests <sys/ptrace.h> declares.
  struct HwDebugState {
    std::uint32_t dbg_info;
    std::uint32_t pad;
    struct {
      std::uint64_t addr;
      std::uint32_t ctrl;
      std::uint32_t pad;
    } dbg_regs[kMaxSlots];
  };
  // DBGWCR: E (bit 0) = 1, PAC (bits 1-2) = 0b10 (EL0), LSC (bits 3-4) = 0b10
  // (stores), BAS (bits 5-12) = 0xff (all 8 bytes of the aligned address).
  static constexpr std::uint32_t kStoreWatch8 = 1u | (0b10u << 1) | (0b10u << 3) | (0xffu << 5);

  Status set(const HwDebugState& state, std::size_t slots) {
    iovec io{const_cast<HwDebugState*>(&state), offsetof(HwDebugState, dbg_regs) + slots * sizeof state.dbg_regs[0]};
    if (::ptrace(PTRACE_SETREGSET, tid_, reinterpret_cast<void*>(NT_ARM_HW_WATCH), &io) != 0)
      return make_error(std::string("PTRACE_SETREGSET(NT_ARM_HW_WATCH) failed: ") + std::strerror(errno), where_);
    return Ok{};
  }

  pid_t tid_;
  std::string where_;
  std::size_t slots_ = 0;
};

#endif

#if defined(TRACECORR_HARDWARE_WATCH)

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

// Owns the attachment and the armed watchpoints of one thread.
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
      pid_t r = wait_tracee_nohang(tid_, status);  // a launched leader's exit stays its Target's
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
    armed_chunks_ = addresses;
    return registers_.write(addresses);
  }

  bool armed() const { return armed_; }
  bool held() const { return held_; }

  // The thread's pointer (x86-64 fs_base, arm64 TPIDR_EL0) while it is held in a stop.
  Expected<std::uint64_t> thread_pointer() { return registers_.thread_pointer(); }

  // The new task's number at a clone, fork or vfork event stop.
  Expected<pid_t> event_message() {
    unsigned long message = 0;
    if (::ptrace(PTRACE_GETEVENTMSG, tid_, nullptr, &message) != 0)
      return make_error(std::string("PTRACE_GETEVENTMSG failed: ") + std::strerror(errno), where());
    return static_cast<pid_t>(message);
  }

  // Bit i: the armed chunk i fired at the last watchpoint trap (cleared for the next one).
  Expected<unsigned> take_hits() {
    siginfo_t info{};
    const bool have_info = ::ptrace(PTRACE_GETSIGINFO, tid_, nullptr, &info) == 0;
    return registers_.take_hits(armed_chunks_, have_info ? &info : nullptr);
  }

  Expected<std::uint64_t> instruction_pointer() { return registers_.instruction_pointer(); }

  // True for the SIGTRAP of one of our watchpoints; a SIGTRAP the target
  // raised itself (no hit, or a user si_code) is not ours.
  // `hits`: the armed chunks that fired (take_hits()), when it is ours.
  bool is_our_trap(const Stop& stop, unsigned* hits_out = nullptr) {
    if (stop.kind != Stop::Kind::kSignal || stop.signal != SIGTRAP || !armed_) return false;
    auto hits = take_hits();
    const bool ours = hits.ok() && *hits != 0 && siginfo_is_hardware_breakpoint();
    if (ours && hits_out) *hits_out = *hits;
    return ours;
  }

  bool siginfo_is_hardware_breakpoint() { return siginfo_code_is(TRAP_HWBKPT); }

  // What a signal stop is to a watch, once take_signal() has dealt with it.
  struct SignalStop {
    enum class Kind {
      kTheTargets,  // the target's own signal: delivered when the thread resumes
      kStoreDone,   // our watchpoint: the store has completed, the thread is held right after it
      kCameFirst,   // our watchpoint, but `came_first` stopped the thread before the store could
                    // complete (a signal, a group-stop, its exit): handle that stop as any other;
                    // the store has not happened and traps again when the thread gets to it
      kTakenEarlier,  // our watchpoint's SIGTRAP whose hit a watch already took at an interrupt
                      // (take_hits() there; x86-64, where DR6 keeps it): swallowed, nothing new
    } kind;
    Stop came_first{Stop::Kind::kExited};
    unsigned hits = 0;  // our watchpoint: bit i, armed chunk i fired
  };

  // For a kSignal stop: tells our trap from the target's signal, and for our
  // trap makes sure the store has completed (arm64 traps before it: the
  // watchpoints are lifted, the thread single-stepped over the one
  // instruction, and armed again). The signal to resume with is set.
  // Limit on arm64: a store-exclusive (STXR) into watched bytes fails after
  // the trap (the exception cleared the exclusive monitor), so its retry loop
  // traps on every pass while the watch lasts; the writers watched here use
  // plain stores (STR, STLR).
  Expected<SignalStop> take_signal(const Stop& stop) {
    unsigned hits = 0;
    if (!is_our_trap(stop, &hits)) {
      if (is_our_spent_trap(stop)) {
        resume_signal_ = 0;
        return SignalStop{SignalStop::Kind::kTakenEarlier};
      }
      resume_signal_ = stop.signal;
      return SignalStop{SignalStop::Kind::kTheTargets};
    }
    resume_signal_ = 0;  // our SIGTRAP is swallowed
    if constexpr (!DebugRegisters::kTrapsBeforeStore) return SignalStop{SignalStop::Kind::kStoreDone, {}, hits};
    if (auto st = registers_.clear(); !st) return st.error();
    if (::ptrace(PTRACE_SINGLESTEP, tid_, nullptr, nullptr) != 0) {
      const int err = errno;
      (void)registers_.write(armed_chunks_);
      return make_error(std::string("PTRACE_SINGLESTEP over the trapping store failed: ") + std::strerror(err), where());
    }
    held_ = false;
    stepping_ = true;  // until its stop comes: release() then knows the step's SIGTRAP for ours
    auto next = next_stop(Clock::now() + kStepBound);
    if (next) stepping_ = false;
    if (!next) return make_error("the thread did not finish its one-instruction step over the trapping store within " +
                                     std::to_string(std::chrono::duration_cast<std::chrono::seconds>(kStepBound).count()) + " s",
                                 where());
    if (next->kind == Stop::Kind::kExited) return SignalStop{SignalStop::Kind::kCameFirst, *next, hits};
    if (auto st = registers_.write(armed_chunks_); !st) return st.error();
    if (next->kind == Stop::Kind::kSignal && next->signal == SIGTRAP && siginfo_code_is(TRAP_TRACE))
      return SignalStop{SignalStop::Kind::kStoreDone, {}, hits};
    // A signal dequeued (or a group-stop entered) before the instruction ran:
    // the thread takes it first, as it would untraced, and comes back to the store.
    return SignalStop{SignalStop::Kind::kCameFirst, *next, hits};
  }

  // A stop met while interrupting the thread on the way out (release(), a
  // watch collecting the tasks it has not seen): the target's own signal is
  // handed back at the detach; ours (a watchpoint's or a step's SIGTRAP) is not.
  void keep_targets_signal(const Stop& stop) {
    if (stop.kind == Stop::Kind::kSignal)
      resume_signal_ = is_our_trap(stop) || is_our_spent_trap(stop) || is_our_step(stop) ? 0 : stop.signal;
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
      keep_targets_signal(*stop);
    }
    if (armed_) {
      (void)registers_.clear();
      // A hit whose SIGTRAP we have not seen means that signal is pending: the
      // kernel reports our interrupt before it dequeues signals. Left there,
      // it would reach the target after the detach, and SIGTRAP's default
      // action kills.
      if (registers_.unclaimed_hit() || sigtrap_pending(pid_, tid_)) swallow_pending_trap();
      armed_ = false;
    }
    ::ptrace(PTRACE_DETACH, tid_, nullptr, reinterpret_cast<void*>(static_cast<long>(resume_signal_)));
    attached_ = held_ = false;
  }

 private:
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
      if (stop->signal == SIGTRAP && (siginfo_is_hardware_breakpoint() || is_our_step(*stop))) {
        resume_signal_ = 0;  // dequeued, and dropped at the detach
        return;
      }
      resume_signal_ = stop->signal;
    }
  }

  // Our watchpoint's SIGTRAP with no hit left to read: a watch took it at an
  // interrupt already (x86-64's DR6 keeps a hit until read). Delivered, it
  // would kill a target without a SIGTRAP handler.
  bool is_our_spent_trap(const Stop& stop) {
    return armed_ && stop.kind == Stop::Kind::kSignal && stop.signal == SIGTRAP && siginfo_is_hardware_breakpoint();
  }

  // The SIGTRAP of a step over a trapping store that did not come within its bound.
  bool is_our_step(const Stop& stop) {
    return stepping_ && stop.kind == Stop::Kind::kSignal && stop.signal == SIGTRAP && siginfo_code_is(TRAP_TRACE);
  }

  bool siginfo_code_is(int code) {
    siginfo_t info{};
    if (::ptrace(PTRACE_GETSIGINFO, tid_, nullptr, &info) != 0) return false;
    return info.si_signo == SIGTRAP && info.si_code == code;
  }

  // A store is one instruction: only a thread that gets no CPU takes long.
  static constexpr auto kStepBound = std::chrono::seconds(10);

  pid_t pid_, tid_;
  DebugRegisters registers_{pid_, tid_};
  std::vector<std::uint64_t> armed_chunks_;
  bool attached_ = false;
  bool held_ = false;       // in a ptrace-stop we have not resumed
  bool armed_ = false;
  bool syscall_stops_ = false;
  bool stepping_ = false;  // single-stepped over a trapping store, its stop not seen yet
  Stop last_stop_{Stop::Kind::kEventStop};
  int resume_signal_ = 0;
};

// The start every one-thread watch shares (update_order, published_record_watch):
// seize the thread and hold it in a first stop, so the watch arms and reads
// its first state before the thread runs on. A signal that arrived before the
// interrupt is the thread's own: delivered when it resumes, and counted in
// `signals_forwarded`. `what` names the watch in a refusal; `where` the place
// in "the thread exited before the watch began".
inline Status seize_first_stop(WatchSession& session, std::string_view what, const std::string& where,
                               std::size_t& signals_forwarded) {
  if (auto st = session.seize(); !st) return st.error().within(std::string(what));
  auto first = session.interrupt(std::chrono::seconds(5));
  if (!first) return first.error();
  if (first->kind == Stop::Kind::kExited) return make_error("the thread exited before the watch began", where);
  if (first->kind == Stop::Kind::kSignal) session.set_resume_signal(first->signal), ++signals_forwarded;
  return Ok{};
}

#endif  // TRACECORR_HARDWARE_WATCH

}  // namespace tracecorr::watch::hardware_watch

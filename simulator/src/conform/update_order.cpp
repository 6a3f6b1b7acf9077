// TLS-04 by hardware watchpoints; see update_order.hpp for the invariant.
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
#include "tracecorr/conform/update_order.hpp"

#include <signal.h>
#include <sys/ptrace.h>
#include <sys/user.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cinttypes>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <optional>
#include <sstream>
#include <thread>

#include "tracecorr/memory.hpp"

namespace tracecorr::conform {
namespace {

using Clock = std::chrono::steady_clock;

std::string hex_bytes(const std::uint8_t* p, std::size_t n) {
  static const char digits[] = "0123456789abcdef";
  std::string s;
  for (std::size_t i = 0; i < n; ++i) {
    s += digits[p[i] >> 4];
    s += digits[p[i] & 15];
  }
  return s;
}

std::string thread_where(pid_t pid, pid_t tid) { return "pid " + std::to_string(pid) + " thread " + std::to_string(tid); }

struct FieldSpan {
  const char* name;
  std::size_t offset;
  std::size_t size;
};
// The record's fields, for naming offsets in reports; offsets from the registry.
constexpr FieldSpan kRecordFields[] = {
    {"minor", spec::kTlsLayoutMinorVersionOffset, spec::kTlsLayoutMinorVersionSize},
    {"valid", spec::kTlsValidOffset, spec::kTlsValidSize},
    {"trace-present", spec::kTlsTracePresentOffset, spec::kTlsTracePresentSize},
    {"trace-flags", spec::kTlsTraceFlagsOffset, spec::kTlsTraceFlagsSize},
    {"trace-id", spec::kTlsTraceIdOffset, spec::kTlsTraceIdSize},
    {"span-id", spec::kTlsSpanIdOffset, spec::kTlsSpanIdSize},
    {"transaction-id", spec::kTlsTransactionIdOffset, spec::kTlsTransactionIdSize},
};

const FieldSpan& field_at(std::size_t offset) {
  for (const auto& f : kRecordFields)
    if (offset >= f.offset && offset < f.offset + f.size) return f;
  return kRecordFields[0];  // unreachable for offsets < kTlsRecordSize
}

// "record bytes 32..36 (transaction-id bytes 3..7)"; a run spanning fields names each part.
std::string describe_offset_runs(const std::vector<std::size_t>& offsets) {
  std::string out;
  std::size_t i = 0;
  while (i < offsets.size()) {
    std::size_t j = i;
    while (j + 1 < offsets.size() && offsets[j + 1] == offsets[j] + 1) ++j;
    std::string parts;
    for (std::size_t k = i; k <= j;) {
      const auto& f = field_at(offsets[k]);
      std::size_t last = k;
      while (last + 1 <= j && offsets[last + 1] < f.offset + f.size) ++last;
      std::size_t a = offsets[k] - f.offset, b = offsets[last] - f.offset;
      if (!parts.empty()) parts += ", ";
      parts += std::string(f.name) + (f.size == 1 ? "" : a == b ? " byte " + std::to_string(a)
                                                              : " bytes " + std::to_string(a) + ".." + std::to_string(b));
      k = last + 1;
    }
    if (!out.empty()) out += "; ";
    out += (i == j ? "record byte " + std::to_string(offsets[i])
                   : "record bytes " + std::to_string(offsets[i]) + ".." + std::to_string(offsets[j])) +
           " (" + parts + ")";
    i = j + 1;
  }
  return out;
}

bool running_under_qemu(pid_t pid) {
  char buf[4096];
  std::string link = "/proc/" + std::to_string(pid) + "/exe";
  ssize_t n = ::readlink(link.c_str(), buf, sizeof buf - 1);
  if (n <= 0) return false;
  std::string exe(buf, static_cast<std::size_t>(n));
  auto slash = exe.rfind('/');
  return exe.compare(slash == std::string::npos ? 0 : slash + 1, 5, "qemu-") == 0;
}

// A thread that is a zombie (or gone) will never report a ptrace-stop; a
// zombie thread-group leader does not even report its exit until the other
// threads exit, so waitpid alone could wait forever.
bool thread_is_dead(pid_t pid, pid_t tid) {
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
bool sigtrap_pending(pid_t pid, pid_t tid) {
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
constexpr auto kReleasePatience = std::chrono::seconds(30);

#if defined(__x86_64__)

constexpr int kDebugStatusRegister = 6;   // DR6
constexpr int kDebugControlRegister = 7;  // DR7
constexpr std::uint64_t kDr6HitBits = 0xf;  // B0..B3

long debug_register_offset(int index) {
  return static_cast<long>(offsetof(struct user, u_debugreg) + static_cast<std::size_t>(index) * sizeof(user{}.u_debugreg[0]));
}

// DR7 for `count` watchpoints: local enable (L_i, bit 2i), R/W_i = 01 (data
// writes only), LEN_i = 10 (8 bytes, x86-64 only).
std::uint64_t dr7_for(std::size_t count) {
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
  enum class Kind { kExited, kGroupStop, kEventStop, kSignal } kind;
  int signal = 0;
};

Stop classify(int status) {
  if (WIFEXITED(status) || WIFSIGNALED(status)) return {Stop::Kind::kExited};
  int sig = WSTOPSIG(status);
  if ((status >> 16) == PTRACE_EVENT_STOP) {
    // Under PTRACE_SEIZE a group-stop reports the stopping signal; our
    // PTRACE_INTERRUPT (and the wake-up after PTRACE_LISTEN) reports SIGTRAP.
    bool group = sig == SIGSTOP || sig == SIGTSTP || sig == SIGTTIN || sig == SIGTTOU;
    return {group ? Stop::Kind::kGroupStop : Stop::Kind::kEventStop, sig};
  }
  if ((status >> 16) != 0) return {Stop::Kind::kEventStop, sig};  // no options set: does not happen
  return {Stop::Kind::kSignal, sig};
}

// Owns the attachment and the armed debug registers of one thread.
class WatchSession {
 public:
  WatchSession(pid_t pid, pid_t tid) : pid_(pid), tid_(tid) {}
  WatchSession(const WatchSession&) = delete;
  WatchSession& operator=(const WatchSession&) = delete;
  ~WatchSession() { release(); }

  std::string where() const { return thread_where(pid_, tid_); }

  Status seize() {
    if (::ptrace(PTRACE_SEIZE, tid_, nullptr, nullptr) != 0) {
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

  // Resumes from the stop it is held in.
  Status resume() {
    // A group-stop must stay a stop: PTRACE_LISTEN leaves the thread stopped
    // for job control while letting us see the SIGCONT that ends it.
    bool listen = last_stop_.kind == Stop::Kind::kGroupStop;
    long r = listen ? ::ptrace(PTRACE_LISTEN, tid_, nullptr, nullptr)
                    : ::ptrace(PTRACE_CONT, tid_, nullptr, reinterpret_cast<void*>(static_cast<long>(resume_signal_)));
    if (r != 0) {
      int err = errno;
      if (err == ESRCH) {  // killed while held (SIGKILL needs no consent): next_stop() reports the exit
        held_ = false;
        return Ok{};
      }
      return make_error(std::string(listen ? "PTRACE_LISTEN" : "PTRACE_CONT") + " failed: " + std::strerror(err), where());
    }
    held_ = false;
    return Ok{};
  }

  Status arm(const WatchPlan& plan) {
    armed_ = true;  // from the first write on, release() must clear
    for (std::size_t i = 0; i < plan.chunks.size(); ++i)
      if (auto st = poke_debug_register(static_cast<int>(i), plan.chunks[i].address); !st) return st;
    return poke_debug_register(kDebugControlRegister, dr7_for(plan.chunks.size()));
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
      for (int i = 0; i < static_cast<int>(kWatchRegisters); ++i) (void)poke_debug_register(i, 0);
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
  Stop last_stop_{Stop::Kind::kEventStop};
  int resume_signal_ = 0;
};

#endif  // __x86_64__

// Applies the invariant to one newly observed state.
class OrderChecker {
 public:
  explicit OrderChecker(UpdateOrderReport& report) : report_(report) {}

  void observe(RecordState next) {
    const RecordState& before = report_.last;
    ++report_.stores_seen;
    if (next.valid() != 0 && next.bytes != before.bytes) ++report_.updates_seen;
    if (before.valid() != 0) {
      std::vector<std::size_t> changed;
      for (std::size_t i = 0; i < spec::kTlsRecordSize; ++i)
        if (i != spec::kTlsValidOffset && before.bytes[i] != next.bytes[i]) changed.push_back(i);
      if (!changed.empty()) {
        if (next.valid() != 0) {
          add({UpdateOrderViolation::Kind::kChangedWhileValid, before, next, changed});
        } else {
          // Watched bytes that changed together with valid := 0 were written
          // by that one trapping store (any other store to them would have
          // trapped first): atomic for a reader, so conforming. Unwatched ones
          // were written earlier, while valid was still set.
          std::vector<std::size_t> unwatched;
          for (auto i : changed)
            if (!report_.plan.watched[i]) unwatched.push_back(i);
          if (!unwatched.empty())
            add({UpdateOrderViolation::Kind::kUnwatchedChangedWhileValid, before, next, unwatched});
        }
      }
    }
    if (report_.states.size() < UpdateOrderReport::kMaxKeptStates) report_.states.push_back(next);
    report_.last = std::move(next);
  }

 private:
  void add(UpdateOrderViolation v) {
    ++report_.violations_seen;
    if (report_.violations.size() < UpdateOrderReport::kMaxKeptViolations) report_.violations.push_back(std::move(v));
  }
  UpdateOrderReport& report_;
};

Expected<RecordState> read_state(const LiveProcessMemory& memory, std::uint64_t address, std::uint64_t pc, unsigned hits) {
  RecordState s;
  if (auto st = memory.read(address, s.bytes); !st)
    return st.error().within("reading the " + std::to_string(spec::kTlsRecordSize) + "-byte record at " + hex_address(address));
  s.at = Clock::now();
  s.pc_after_store = pc;
  s.chunks_hit = hits;
  return s;
}

std::string limits_text(const UpdateOrderReport& r, bool under_qemu) {
  std::string t;
  std::string unwatched = r.plan.unwatched_description();
  if (!unwatched.empty())
    t += unwatched + " lie outside the " + std::to_string(r.plan.chunks.size()) + " watched " +
         std::to_string(kWatchChunkSize) +
         "-byte chunks: stores to them do not stop the thread and are seen only at its next watched store "
         "(a change made while valid != 0 is still flagged, with that later store's pc).\n";
  t += "pc_after_store is the instruction after the store (data watchpoints trap once the store retired).\n";
  if (under_qemu)
    t += "The thread runs qemu-user: pc_after_store is a host address in qemu's generated code, not a guest pc.\n";
  t += "Only user-mode stores by thread " + std::to_string(r.tid) +
       " are seen; other threads' stores and the kernel's (e.g. read() into the record) are not.\n";
  t += "A store that rewrites a byte with its current value is counted in stores_seen but changes no state.\n";
  t += "SIGTRAP does not queue: one the target is sent while a watchpoint's SIGTRAP is pending is merged into it by "
       "the kernel and never delivered (other signals are handed back unchanged).\n";
  return t;
}

}  // namespace

std::size_t WatchPlan::watched_bytes() const { return static_cast<std::size_t>(std::count(watched.begin(), watched.end(), true)); }

std::string WatchPlan::unwatched_description() const {
  std::vector<std::size_t> offsets;
  for (std::size_t i = 0; i < watched.size(); ++i)
    if (!watched[i]) offsets.push_back(i);
  return describe_offset_runs(offsets);
}

WatchPlan plan_record_watch(std::uint64_t record_address) {
  const std::uint64_t base = record_address & ~std::uint64_t{kWatchChunkSize - 1};
  const std::uint64_t end = record_address + spec::kTlsRecordSize;
  const std::size_t chunk_count = static_cast<std::size_t>((end - base + kWatchChunkSize - 1) / kWatchChunkSize);
  const std::size_t valid_chunk = static_cast<std::size_t>((record_address + spec::kTlsValidOffset - base) / kWatchChunkSize);

  auto chunk = [&](std::size_t k) {
    std::uint64_t a = base + k * kWatchChunkSize;
    WatchChunk c;
    c.address = a;
    c.first_record_offset = a <= record_address ? 0 : static_cast<std::size_t>(a - record_address);
    c.end_record_offset = static_cast<std::size_t>(std::min(a + kWatchChunkSize, end) - record_address);
    return c;
  };
  auto covered = [&](std::size_t k) { auto c = chunk(k); return c.end_record_offset - c.first_record_offset; };

  // At most 6 chunks: try every set of min(4, n) that includes the valid
  // byte's chunk. Ascending masks prefer lower chunks on ties.
  const std::size_t take = std::min(kWatchRegisters, chunk_count);
  unsigned best_mask = 0;
  std::size_t best_bytes = 0;
  for (unsigned mask = 1; mask < (1u << chunk_count); ++mask) {
    if (static_cast<std::size_t>(std::popcount(mask)) != take || !(mask & (1u << valid_chunk))) continue;
    std::size_t bytes = 0;
    for (std::size_t k = 0; k < chunk_count; ++k)
      if (mask & (1u << k)) bytes += covered(k);
    if (bytes > best_bytes) best_bytes = bytes, best_mask = mask;
  }
  WatchPlan plan;
  for (std::size_t k = 0; k < chunk_count; ++k) {
    if (!(best_mask & (1u << k))) continue;
    auto c = chunk(k);
    for (std::size_t i = c.first_record_offset; i < c.end_record_offset; ++i) plan.watched[i] = true;
    plan.chunks.push_back(c);
  }
  return plan;
}

Expected<UpdateOrderReport> watch_update_order(pid_t pid, pid_t tid, std::uint64_t record_address,
                                               std::chrono::milliseconds duration, std::size_t max_updates) {
  const std::string where = thread_where(pid, tid) + " record " + hex_address(record_address);
  if (pid <= 0 || tid <= 0) return make_error("pid and tid must be positive", where);
  // x86-64 user space ends below 2^47; the kernel refuses watchpoints above it.
  if (record_address == 0 || record_address > (std::uint64_t{1} << 47) - spec::kTlsRecordSize)
    return make_error("the record address is not a user-space address", where);
#if !defined(__x86_64__)
  (void)duration;
  (void)max_updates;
  return make_error("hardware watchpoints are implemented for x86-64 hosts only", where);
#else
  UpdateOrderReport report;
  report.pid = pid;
  report.tid = tid;
  report.record_address = record_address;
  report.plan = plan_record_watch(record_address);
  report.limits = limits_text(report, running_under_qemu(pid));

  LiveProcessMemory memory(pid);
  WatchSession session(pid, tid);
  if (auto st = session.seize(); !st) return st.error().within("watching the record");
  auto first = session.interrupt(std::chrono::seconds(5));
  if (!first) return first.error();
  if (first->kind == Stop::Kind::kExited) return make_error("the thread exited before the watch began", where);
  // A signal that arrived before our interrupt is the thread's own.
  if (first->kind == Stop::Kind::kSignal) session.set_resume_signal(first->signal), ++report.signals_forwarded;

  if (auto st = session.arm(report.plan); !st) return st.error().within(where);
  auto initial = read_state(memory, record_address, 0, 0);
  if (!initial) return initial.error().within(thread_where(pid, tid));
  report.initial = report.last = *initial;
  report.states.push_back(*initial);

  OrderChecker checker(report);
  const auto deadline = Clock::now() + duration;
  for (;;) {
    if (max_updates != 0 && report.updates_seen >= max_updates) {
      report.ended_because = "max updates reached";
      break;
    }
    if (auto st = session.resume(); !st) return st.error();
    auto stop = session.next_stop(deadline);
    if (!stop) {
      report.ended_because = "duration elapsed";
      break;
    }
    if (stop->kind == Stop::Kind::kExited) {
      report.thread_exited = true;
      report.ended_because = "thread exited";
      break;
    }
    if (stop->kind != Stop::Kind::kSignal) continue;  // group-stop: listen; interrupt/notify: continue
    unsigned hits = 0;
    if (stop->signal == SIGTRAP) {
      auto h = session.take_hits();
      if (!h) return h.error();
      hits = *h;
    }
    // Our SIGTRAP is swallowed; anything else (another signal, or a SIGTRAP
    // the target raised itself) is handed back unchanged.
    bool ours = hits != 0 && session.siginfo_is_hardware_breakpoint();
    session.set_resume_signal(ours ? 0 : stop->signal);
    if (!ours) ++report.signals_forwarded;
    if (hits == 0) continue;
    auto pc = session.instruction_pointer();
    if (!pc) return pc.error();
    auto state = read_state(memory, record_address, *pc, hits);
    if (!state) return state.error().within(thread_where(pid, tid) + " after store " + std::to_string(report.stores_seen + 1));
    checker.observe(std::move(*state));
  }
  session.release();
  return report;
#endif
}

std::string describe_record_bytes(const wire::TlsRecordBytes& bytes) {
  std::string s;
  for (const auto& f : kRecordFields) {
    if (!s.empty()) s += ' ';
    s += std::string(f.name) + "=" + hex_bytes(bytes.data() + f.offset, f.size);
  }
  return s;
}

std::string describe(const UpdateOrderViolation& v) {
  std::ostringstream o;
  o << (v.kind == UpdateOrderViolation::Kind::kChangedWhileValid
            ? "fields changed while valid != 0, without valid := 0 first"
            : "unwatched fields changed while valid != 0 (seen at the later store that cleared valid)")
    << " [TLS-04]: " << describe_offset_runs(v.changed_offsets) << "\n"
    << "  before: " << describe_record_bytes(v.before.bytes)
    << (v.before.pc_after_store ? "  (pc after store " + hex_address(v.before.pc_after_store) + ")" : "  (state when the watch began)")
    << "\n"
    << "  after:  " << describe_record_bytes(v.after.bytes) << "  (pc after store " << hex_address(v.after.pc_after_store) << ")";
  return o.str();
}

std::string describe(const UpdateOrderReport& r) {
  std::ostringstream o;
  o << "TLS-04 update order, " << thread_where(r.pid, r.tid) << ", record " << hex_address(r.record_address) << ": "
    << (r.conforms() ? "no violation" : std::to_string(r.violations_seen) + " violation(s)") << "\n"
    << "  watched: ";
  for (std::size_t i = 0; i < r.plan.chunks.size(); ++i)
    o << (i ? ", " : "") << hex_address(r.plan.chunks[i].address) << " (record bytes " << r.plan.chunks[i].first_record_offset
      << ".." << r.plan.chunks[i].end_record_offset - 1 << ")";
  o << "\n  stores seen " << r.stores_seen << ", updates seen " << r.updates_seen << ", signals forwarded "
    << r.signals_forwarded << "; ended: " << r.ended_because << "\n";
  for (const auto& v : r.violations) o << describe(v) << "\n";
  if (r.violations.size() < r.violations_seen)
    o << "  (" << r.violations_seen - r.violations.size() << " more not kept)\n";
  o << "  limits:\n";
  std::istringstream lines(r.limits);
  for (std::string line; std::getline(lines, line);) o << "    " << line << "\n";
  return o.str();
}

}  // namespace tracecorr::conform

// Stores into a mapping's head, system calls and forks; see mapping_watch.hpp.
// The ptrace discipline is hardware_watch.hpp's: every thread is released
// (registers cleared, detached) on every way out.
#include "tracecorr/watch/mapping_watch.hpp"

#include <linux/kcmp.h>
#include <sys/syscall.h>

#include <atomic>
#include <fstream>
#include <future>
#include <mutex>
#include <thread>

#include "followed_tree.hpp"
#include "hardware_watch.hpp"
#include "tracecorr/maps.hpp"
#include "tracecorr/memory.hpp"

namespace tracecorr::watch {

std::string MappingWatchReport::describe() const {
  std::string s = std::to_string(threads_followed) + " threads followed, " + std::to_string(threads_armed) + " armed on " +
                  std::to_string(watched_bytes) + " bytes, " + std::to_string(stores_seen) + " stores and " +
                  std::to_string(syscalls_seen) + " system calls seen";
  if (events_dropped) s += ", " + std::to_string(events_dropped) + " events beyond the first " + std::to_string(kMaxKeptEvents) + " not kept";
  if (signals_forwarded) s += ", " + std::to_string(signals_forwarded) + " of the target's signals forwarded";
  if (!ended_because.empty()) s += "; ended: " + ended_because;
  if (error) s += "; stopped early: " + error->message();
  return s;
}

struct MappingWatch::State {
  pid_t root = 0;
  Settings settings;
  std::atomic<bool> end_requested{false};
  mutable std::mutex mutex;  // guards report while the watch runs
  MappingWatchReport report;
  std::thread thread;
  void run(std::promise<Status>& seized);
};

MappingWatch::MappingWatch(std::unique_ptr<State> state) : state_(std::move(state)) {}

MappingWatch::~MappingWatch() { (void)finish(); }

MappingWatchReport MappingWatch::snapshot() const {
  std::lock_guard lock(state_->mutex);
  return state_->report;
}

MappingWatchReport MappingWatch::finish() {
  if (state_->thread.joinable()) {
    state_->end_requested = true;
    state_->thread.join();
  }
  return state_->report;
}

Expected<std::unique_ptr<MappingWatch>> MappingWatch::follow_launch(pid_t pid, Settings settings) {
#if !defined(TRACECORR_HARDWARE_WATCH)
  (void)pid, (void)settings;
  return make_error("the mapping watch needs hardware watchpoints, implemented for x86-64 and arm64 hosts only");
#else
  if (!settings.is_watched_mapping) return make_error("mapping watch: no mapping to watch was named");
  if (settings.watched_bytes == 0 || settings.watched_bytes > kMappingWatchMaxBytes)
    return make_error("mapping watch: " + std::to_string(settings.watched_bytes) + " bytes asked, 1.." +
                      std::to_string(kMappingWatchMaxBytes) + " can be watched");
  auto state = std::make_unique<State>();
  state->root = pid;
  state->settings = std::move(settings);
  state->report.watched_bytes = state->settings.watched_bytes;
  if (auto st = hardware_watch::start_watch_thread(*state); !st) return st.error();
  return std::unique_ptr<MappingWatch>(new MappingWatch(std::move(state)));
#endif
}

#if !defined(TRACECORR_HARDWARE_WATCH)
void MappingWatch::State::run(std::promise<Status>& seized) { seized.set_value(make_error("no hardware watchpoints on this host")); }
#else
namespace {

using namespace hardware_watch;

// The first mapping of `pid` the predicate accepts (the maps text is the
// kernel's, bounded by read_maps).
std::optional<Mapping> find_watched(pid_t pid, const std::function<bool(const std::string&)>& is_watched) {
  auto maps = read_maps(pid);
  if (!maps) return std::nullopt;
  for (const auto& m : *maps)
    if (is_watched(m.path)) return m;
  return std::nullopt;
}

// Whether `pid` maps something at `address`, and by what name.
std::optional<std::string> mapping_at(pid_t pid, std::uint64_t address) {
  auto maps = read_maps(pid);
  if (!maps) return std::nullopt;
  if (const Mapping* m = find_mapping(*maps, address)) return m->path;
  return std::nullopt;
}

struct MappedThread {
  std::unique_ptr<WatchSession> session;
  pid_t pid = 0;
  bool armed = false;
  bool release_at_first_stop = false;  // the writer's own child: looked at, then let go
  std::optional<__ptrace_syscall_info> entry;  // the system call it is in, from its entry stop
};

// Whether `child` runs in `parent`'s own address space (a vfork, posix_spawn's
// CLONE_VM|CLONE_VFORK, as glibc's system() and popen() start commands): it
// inherits nothing, it shares. kcmp(KCMP_VM) says; without it, a vfork event.
bool shares_memory(pid_t parent, pid_t child, const Stop& stop) {
  const long same = ::syscall(SYS_kcmp, parent, child, KCMP_VM, 0, 0);
  if (same >= 0) return same == 0;
  return stop.event == PTRACE_EVENT_VFORK;
}

class MappingFollower {
 public:
  explicit MappingFollower(MappingWatch::State& state) : s_(state), tree_(/*syscall_stops=*/true) {}

  Status seize_root() {
    if (auto st = tree_.seize_root(s_.root); !st) return st;
    count([](auto& r) { ++r.threads_followed; });
    return Ok{};
  }

  void run() {
    IdlePause pause(std::chrono::microseconds(500));
    for (;;) {
      if (s_.end_requested) {
        set_ended("ended by the session");
        break;
      }
      if (tree_.empty()) {
        set_ended("every followed thread exited");
        break;
      }
      auto any = tree_.pass([this](MappedThread& t, const Stop& stop) { return on_stop(t, stop); },
                            [](const MappedThread&) {});
      if (!any) {
        fail(any.error());
        break;
      }
      if (!to_arm_.empty()) arm_running_threads();
      pause.after(*any);
    }
    tree_.take_in_unseen_tasks();
    tree_.clear();  // each session disarms and detaches
  }

 private:
  AfterStop on_stop(MappedThread& t, const Stop& stop) {
    if (t.release_at_first_stop) return AfterStop::kRelease;
    handle(t, stop);
    return AfterStop::kResume;
  }

  void handle(MappedThread& t, const Stop& stop) {
    switch (stop.kind) {
      case Stop::Kind::kEventStop:
        if (starts_a_task(stop)) adopt(t, stop);
        else if (stop.event == PTRACE_EVENT_EXEC) exec_seen(t);
        break;
      case Stop::Kind::kSyscall:
        syscall_stop(t);
        break;
      case Stop::Kind::kSignal: {
        auto signal = t.session->take_signal(stop);
        if (!signal) return fail(signal.error());
        using Taken = WatchSession::SignalStop::Kind;
        if (signal->kind == Taken::kCameFirst) return handle(t, signal->came_first);
        if (signal->kind == Taken::kStoreDone) store_seen(t);
        else if (signal->kind == Taken::kTheTargets) count([](auto& r) { ++r.signals_forwarded; });
        break;
      }
      case Stop::Kind::kGroupStop:
      case Stop::Kind::kExited:
        break;
    }
    if (!t.armed && watched_.count(t.pid)) arm(t);
  }

  // A new thread is followed (armed at its first stop when its process's
  // mapping is watched), and so is a new process whose parent holds no watched
  // mapping: it may be the agent itself, started by a wrapper that forks and
  // does not exec (`unshare --fork`, a shell running its last command as a
  // child). A process forked by the publisher is the writer's own: whether it
  // inherited the mapping is read now (its address space is complete when the
  // parent reports the fork), and it is let go at its first stop (its stores
  // are not the parent's).
  void adopt(MappedThread& parent, const Stop& stop) {
    MappedThread* child = tree_.adopt_new_task(parent, stop);
    if (!child) return;
    const bool new_process = child->pid != parent.pid;
    if (new_process) fork_seen(parent, child->pid, stop);
    if (new_process && watched_.count(parent.pid)) {
      child->release_at_first_stop = true;
      return;
    }
    count([](auto& r) { ++r.threads_followed; });
  }

  void fork_seen(const MappedThread& parent, pid_t child, const Stop& stop) {
    MappingWatchEvent e = event(MappingWatchEvent::Kind::kFork, parent);
    e.child = child;
    e.child_shares_memory = shares_memory(parent.pid, child, stop);
    if (auto it = watched_.find(parent.pid); it != watched_.end()) {
      e.address = it->second;
      if (!e.child_shares_memory)
        if (auto name = mapping_at(child, it->second)) {
          e.child_has_mapping = true;
          e.child_mapping_name = *name;
        }
    }
    record(std::move(e));
  }

  void exec_seen(MappedThread& t) {
    // A new image: the kernel cleared the debug registers, and the mapping is gone.
    t.armed = false;
    watched_.erase(t.pid);
    record(event(MappingWatchEvent::Kind::kExec, t));
  }

  void syscall_stop(MappedThread& t) {
    auto info = t.session->syscall_info();
    if (!info) return;
    if (info->op == PTRACE_SYSCALL_INFO_ENTRY) {
      t.entry = *info;
      return;
    }
    if (info->op != PTRACE_SYSCALL_INFO_EXIT || !t.entry) return;
    const long nr = static_cast<long>(t.entry->entry.nr);
    if (s_.settings.syscalls.count(nr)) {
      MappingWatchEvent e = event(MappingWatchEvent::Kind::kSyscall, t);
      e.syscall = nr;
      for (std::size_t i = 0; i < e.args.size(); ++i) e.args[i] = t.entry->entry.args[i];
      e.result = info->exit.rval;
      record(std::move(e));
      count([](auto& r) { ++r.syscalls_seen; });
    }
    t.entry.reset();
    // A mapping appears (mmap of a named memfd) or gets its name (prctl).
    if (!watched_.count(t.pid) && (nr == SYS_mmap || nr == SYS_mremap || nr == SYS_prctl)) look_for_mapping(t);
  }

  void look_for_mapping(MappedThread& t) {
    auto found = find_watched(t.pid, s_.settings.is_watched_mapping);
    if (!found) return;
    watched_[t.pid] = found->start;
    MappingWatchEvent e = event(MappingWatchEvent::Kind::kMapped, t);
    e.address = found->start;
    e.mapping_name = found->path;
    e.bytes = read_watched(t.pid, found->start);
    record(std::move(e));
    for (auto& [tid, other] : tree_.tasks())
      if (other.pid == t.pid && tid != t.session->tid()) to_arm_.insert(tid);
  }

  void arm(MappedThread& t) {
    const std::uint64_t address = watched_.at(t.pid);
    std::vector<std::uint64_t> chunks;
    const std::uint64_t first = address & ~(kChunk - 1);
    for (std::uint64_t c = first; c < address + s_.settings.watched_bytes && chunks.size() < kRegisters; c += kChunk)
      chunks.push_back(c);
    if (auto st = t.session->arm(chunks); !st) return fail(st.error());
    t.armed = true;
    to_arm_.erase(t.session->tid());
    count([](auto& r) { ++r.threads_armed; });
  }

  // Threads of a process whose mapping just appeared, running elsewhere: each
  // is stopped once to be armed.
  void arm_running_threads() {
    for (pid_t tid : std::set<pid_t>(to_arm_)) {
      auto it = tree_.tasks().find(tid);
      if (it == tree_.tasks().end() || it->second.armed) {
        to_arm_.erase(tid);
        continue;
      }
      auto& t = it->second;
      if (t.session->held()) continue;  // armed in handle() at its pending stop
      auto stop = t.session->interrupt(kInterruptBound);
      if (!stop) return fail(stop.error());
      if (stop->kind == Stop::Kind::kExited) {
        to_arm_.erase(tid);
        continue;
      }
      handle(t, *stop);
      if (auto st = t.session->resume(); !st) return fail(st.error());
    }
  }

  void store_seen(MappedThread& t) {
    auto it = watched_.find(t.pid);
    if (it == watched_.end()) return;
    MappingWatchEvent e = event(MappingWatchEvent::Kind::kStore, t);
    e.address = it->second;
    e.bytes = read_watched(t.pid, it->second);  // before the thread runs on
    if (auto pc = t.session->instruction_pointer()) e.pc_after_store = *pc;
    record(std::move(e));
    count([](auto& r) { ++r.stores_seen; });
  }

  std::vector<std::uint8_t> read_watched(pid_t pid, std::uint64_t address) const {
    std::vector<std::uint8_t> bytes(s_.settings.watched_bytes);
    if (!LiveProcessMemory(pid).read(address, bytes)) bytes.clear();
    return bytes;
  }

  MappingWatchEvent event(MappingWatchEvent::Kind kind, const MappedThread& t) const {
    MappingWatchEvent e;
    e.kind = kind;
    e.at = Clock::now();
    e.pid = t.pid;
    e.tid = t.session->tid();
    return e;
  }

  void record(MappingWatchEvent e) {
    std::lock_guard lock(s_.mutex);
    if (s_.report.events.size() < MappingWatchReport::kMaxKeptEvents) s_.report.events.push_back(std::move(e));
    else ++s_.report.events_dropped;
  }

  template <class F>
  void count(F change) {
    std::lock_guard lock(s_.mutex);
    change(s_.report);
  }

  void set_ended(std::string why) {
    std::lock_guard lock(s_.mutex);
    s_.report.ended_because = std::move(why);
    s_.report.ended_at = Clock::now();
  }

  void fail(const Error& e) {
    {
      std::lock_guard lock(s_.mutex);
      if (!s_.report.error) s_.report.error = e;
    }
    s_.end_requested = true;
  }

  MappingWatch::State& s_;
  FollowedTree<MappedThread> tree_;
  std::map<pid_t, std::uint64_t> watched_;  // process -> the watched mapping's start
  std::set<pid_t> to_arm_;
};

}  // namespace

void MappingWatch::State::run(std::promise<Status>& seized) { seize_then_follow<MappingFollower>(*this, seized); }
#endif

}  // namespace tracecorr::watch

// The tasks a watch follows from a launch, shared by the TLS slot watch
// and the mapping watch (OTEP 4719's seqlock and naming rules); internal
// to the watch layer, above hardware_watch.hpp's one-thread sessions.
//
// A launch is followed from before its exec through every thread and process
// it starts, at any depth: launch scripts fork before they exec (`HERE=$(...)`),
// wrappers fork and never exec the agent themselves (`unshare --fork`, a shell
// running its last command as a child), and containers put the agent in pid
// namespaces of its own. ptrace reports a new task by the number the tracer
// sees (the host's, not the container's own numbering), so every pid here is
// one tracecorr's /proc knows.
//
// Everything runs on the watch's own thread (ptrace binds a tracee to one
// tracer thread). Each task is released (disarmed, detached) when the tree
// lets it go; tasks the kernel attached but no session knows yet are taken in
// before the watch ends, so none is killed with its thread (PTRACE_O_EXITKILL).
#pragma once

#include <chrono>
#include <algorithm>
#include <map>
#include <memory>
#include <thread>

#include "hardware_watch.hpp"

#if defined(TRACECORR_HARDWARE_WATCH)

namespace tracecorr::watch::hardware_watch {

// How long a running task may take to stop when interrupted (a thread that
// does not stop in that time is in uninterruptible sleep, or gets no CPU).
inline constexpr auto kInterruptBound = std::chrono::seconds(2);

// What a watch does with a task once it has handled the task's stop.
enum class AfterStop { kResume, kRelease };

// A clone, fork or vfork event stop: the task has started another.
inline bool starts_a_task(const Stop& stop) {
  return stop.kind == Stop::Kind::kEventStop &&
         (stop.event == PTRACE_EVENT_CLONE || stop.event == PTRACE_EVENT_FORK || stop.event == PTRACE_EVENT_VFORK);
}

// `Task`: an aggregate whose first two members are
// `std::unique_ptr<WatchSession> session` and `pid_t pid` (its process).
template <class Task>
class FollowedTree {
 public:
  // `syscall_stops`: every task is resumed with PTRACE_SYSCALL and reports
  // each system call's entry and exit (Stop::Kind::kSyscall).
  explicit FollowedTree(bool syscall_stops) : syscall_stops_(syscall_stops) {}

  // Seizes the launched process (forked by tracecorr, not exec'd yet), following
  // its clones, forks, vforks and execs. With system-call stops it is stopped
  // once, so that it runs on under PTRACE_SYSCALL (a seized task keeps running
  // as it was until its first stop).
  Status seize_root(pid_t pid) {
    auto root = std::make_unique<WatchSession>(pid, pid);
    const unsigned long options = PTRACE_O_TRACECLONE | PTRACE_O_TRACEFORK | PTRACE_O_TRACEVFORK | PTRACE_O_TRACEEXEC |
                                  PTRACE_O_EXITKILL | (syscall_stops_ ? PTRACE_O_TRACESYSGOOD : 0);
    if (auto st = root->seize(options); !st) return st;
    if (syscall_stops_) {
      root->set_syscall_stops(true);
      auto stop = root->interrupt(kInterruptBound);
      if (!stop) return stop.error();
      if (stop->kind == Stop::Kind::kExited) return make_error("the process exited before it could be watched", root->where());
      if (auto st = root->resume(); !st) return st;
    }
    tasks_.insert_or_assign(pid, Task{std::move(root), pid});
    return Ok{};
  }

  // At `parent`'s clone, fork or vfork event stop: the new task, which the
  // kernel attached to this thread already and which reports its own first
  // stop. It joins the tree after the current pass; the pointer is valid until
  // then. nullptr when the kernel no longer says which task it was.
  Task* adopt_new_task(const Task& parent, const Stop& stop) {
    auto tid = parent.session->event_message();
    if (!tid) return nullptr;
    // A clone may start a process as well as a thread: its Tgid says which.
    const pid_t pid = stop.event == PTRACE_EVENT_CLONE ? thread_group_of(*tid, parent.pid) : *tid;
    auto session = WatchSession::adopt(pid, *tid);
    session->set_syscall_stops(syscall_stops_);
    auto [it, inserted] = adopted_.insert_or_assign(*tid, Task{std::move(session), pid});
    return &it->second;
  }

  // One look at every task, waiting for none: `on_stop(task, stop)` handles
  // each stop and says whether the task runs on or is let go; a task that
  // exited leaves the tree (`on_exit(task)` first). Tasks adopted meanwhile
  // join after the pass. Returns whether any task stopped.
  template <class OnStop, class OnExit>
  Expected<bool> pass(OnStop&& on_stop, OnExit&& on_exit) {
    const auto now = Clock::now();
    bool any = false;
    for (auto it = tasks_.begin(); it != tasks_.end();) {
      auto stop = it->second.session->next_stop(now);
      if (!stop) {
        ++it;
        continue;
      }
      any = true;
      if (stop->kind == Stop::Kind::kExited) {
        on_exit(it->second);
        it = tasks_.erase(it);
        continue;
      }
      if (on_stop(it->second, *stop) == AfterStop::kRelease) {
        it->second.session->release();
        it = tasks_.erase(it);
        continue;
      }
      if (auto st = it->second.session->resume(); !st) return st.error();
      ++it;
    }
    join_adopted();
    return any;
  }

  // Before the watch lets go of the tree: a running task stopped at a clone,
  // fork or vfork event the watch has not collected has a new task attached to
  // this thread already, known to no session; left so, it would be killed when
  // this thread exits (PTRACE_O_EXITKILL), and its process with it. So every
  // running task is stopped once and the task it started taken in (it has not
  // run: it started nothing). Returns how many were taken in.
  std::size_t take_in_unseen_tasks() {
    std::size_t taken = 0;
    for (auto& [tid, t] : tasks_) {
      if (t.session->held()) continue;
      auto stop = t.session->interrupt(kInterruptBound);
      if (!stop) continue;
      t.session->keep_targets_signal(*stop);
      if (starts_a_task(*stop) && adopt_new_task(t, *stop)) ++taken;
    }
    join_adopted();
    return taken;
  }

  std::map<pid_t, Task>& tasks() { return tasks_; }
  bool empty() const { return tasks_.empty(); }
  // Every task disarmed and detached (each session's release()).
  void clear() {
    adopted_.clear();
    tasks_.clear();
  }

 private:
  void join_adopted() {
    for (auto& [tid, t] : adopted_) tasks_.insert_or_assign(tid, std::move(t));
    adopted_.clear();
  }

  bool syscall_stops_;
  std::map<pid_t, Task> tasks_;    // by thread id
  std::map<pid_t, Task> adopted_;  // met during a pass, joined after it
};

// The pause between two passes over a tree: short right after a stop (more
// tend to follow), doubling while nothing happens, up to `longest`.
class IdlePause {
 public:
  explicit IdlePause(std::chrono::microseconds longest) : longest_(longest) {}
  void after(bool anything_happened) {
    if (anything_happened) {
      pause_ = kShortest;
      return;
    }
    std::this_thread::sleep_for(pause_);
    pause_ = std::min(pause_ * 2, longest_);
  }

 private:
  static constexpr std::chrono::microseconds kShortest{20};
  std::chrono::microseconds longest_;
  std::chrono::microseconds pause_ = kShortest;
};

}  // namespace tracecorr::watch::hardware_watch

#endif  // TRACECORR_HARDWARE_WATCH

// PTRACE_SEIZE that an exec of the target cannot deadlock.
//
// PTRACE_SEIZE waits for the target's cred_guard_mutex. An execve() holds that
// mutex while de_thread() waits for the process's other threads to be
// released, and a traced thread is released only when its tracer reaps it.
// A tracer that holds one thread of a process (stopped, or parked because it
// did not stop in time) and seizes another while that process execs would
// wait for the mutex for ever: the wait restarts across signals, and nothing
// else reaps the held thread. reap_parked_attachments() before each seize
// narrows that window to microseconds, which a starved tracer can widen to
// seconds, and a round that interrupts many threads at once cannot close it.
//
// So a watcher thread of ours reaps, while a seize has been blocked for
// kBlockedFor, the exited threads of the process being seized: waitid(2) with
// WEXITED alone takes no stop, any thread of a tracer's thread group may reap
// its tracees, and a thread not traced by us gives ECHILD. The leader is left
// alone (a launched target's exit status is its parent's to take). Our later
// wait on a reaped thread gives ECHILD, which every caller reads as "gone".
#include <sys/ptrace.h>
#include <sys/wait.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <list>
#include <mutex>
#include <stop_token>
#include <thread>
#include <vector>

#include "tracecorr/procfs.hpp"
#include "tracecorr/threadptr.hpp"

namespace tracecorr {
namespace {

using Clock = std::chrono::steady_clock;

// How long a seize may block before the watcher reaps: an uncontended one
// takes microseconds, one beside an exec in progress waits for its end.
constexpr auto kBlockedFor = std::chrono::milliseconds(20);

// The seizes in progress, each with its process and start (conform's sessions
// seize from threads of their own, each in its own target).
struct Seize {
  pid_t pid;
  Clock::time_point since;
};
using Seizes = std::list<Seize>;

class SeizeWatcher {
 public:
  static SeizeWatcher& instance() {
    static SeizeWatcher watcher;
    return watcher;
  }

  Seizes::iterator begin(pid_t pid) {
    std::lock_guard lock(mu_);
    auto it = seizes_.insert(seizes_.end(), Seize{pid, Clock::now()});
    wake_.notify_one();
    return it;
  }

  void end(Seizes::iterator it) {
    std::lock_guard lock(mu_);
    seizes_.erase(it);
  }

 private:
  SeizeWatcher() : thread_([this](std::stop_token stop) { run(stop); }) {}

  void run(std::stop_token stop) {
    std::unique_lock lock(mu_);
    while (!stop.stop_requested()) {
      if (seizes_.empty()) {
        wake_.wait(lock, stop, [this] { return !seizes_.empty(); });
        continue;
      }
      const auto now = Clock::now();
      std::vector<pid_t> blocked;
      auto next = Clock::time_point::max();
      for (const Seize& s : seizes_) {
        if (s.since + kBlockedFor <= now) blocked.push_back(s.pid);
        else next = std::min(next, s.since + kBlockedFor);
      }
      if (blocked.empty()) {
        wake_.wait_until(lock, stop, next, [] { return false; });
        continue;
      }
      lock.unlock();
      for (pid_t pid : blocked) reap_exited_threads(pid);
      std::this_thread::sleep_for(kBlockedFor);
      lock.lock();
    }
  }

  static void reap_exited_threads(pid_t pid) {
    for (pid_t tid : list_threads(pid)) {
      if (tid == pid) continue;
      siginfo_t info{};
      ::waitid(P_PID, static_cast<id_t>(tid), &info, WEXITED | WNOHANG | __WALL);
    }
  }

  std::mutex mu_;
  std::condition_variable_any wake_;
  Seizes seizes_;
  std::jthread thread_;  // last: started once the members it reads exist, stopped and joined first
};

// Its /proc stat says zombie or dead, or it is no longer listed.
bool has_exited(pid_t pid, pid_t tid) {
  const char state = task_state(pid, tid);
  return state == 0 || state == 'Z' || state == 'X';
}

}  // namespace

long seize_thread(pid_t pid, pid_t tid) {
  SeizeWatcher& watcher = SeizeWatcher::instance();
  const auto seize = watcher.begin(pid);
  const long r = ::ptrace(PTRACE_SEIZE, tid, nullptr, nullptr);
  int err = errno;
  watcher.end(seize);
  // The kernel refuses to seize a thread that has already exited (a zombie
  // awaiting its reaper) with EPERM, not ESRCH: a target killed between our
  // listing its threads and seizing them is gone, not a permission we lack.
  if (r != 0 && err == EPERM && has_exited(pid, tid)) err = ESRCH;
  errno = err;
  return r;
}

}  // namespace tracecorr

// How long a session waits for what its target publishes (an agent library,
// a process context, a thread-context variable): judged by the target's own
// progress, not by the clock. A JVM on a loaded two-CPU machine can take
// twenty seconds of wall time to load its agent, most of it waiting for a
// CPU; a fixed wall-clock deadline calls that agent broken.
//
// The wait follows the launched tree (or the attached process) through
// /proc/PID/task/TID/schedstat: the CPU time its threads ran and the time
// they waited in a run queue. It ends when
//  - the tree is gone;
//  - the tree has run `cpu` of CPU time since the wait began without
//    publishing (far more than any agent needs to load);
//  - the tree has been idle for `idle` in all: intervals in which it hardly
//    ran and no thread was runnable or in an uninterruptible sleep (it sleeps
//    by its own choice); an exec or a new process in the tree is progress and
//    starts the count again;
//  - the wall-clock `ceiling` passes (far above a JVM's slow start on a
//    loaded machine). Ended there while the tree waited (for a CPU, or in an
//    uninterruptible sleep) longer than it ran, the wait proves nothing:
//    starved() says so, and the session is an error with the figures, never
//    a verdict that the target publishes nothing.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace tracecorr::conform {

struct DiscoveryLimits {
  std::chrono::milliseconds cpu{30000};
  std::chrono::milliseconds idle{10000};
  std::chrono::milliseconds ceiling{300000};
};

// What the followed tree did while the wait lasted.
struct TreeProgress {
  double wall_ms = 0;
  double cpu_ms = 0;        // CPU time its threads ran
  double run_queue_ms = 0;  // time its threads waited for a CPU (schedstat: counted when a thread gets one)
  // Wall time in which it hardly ran while a thread was runnable or in an
  // uninterruptible sleep (a thread that never gets a CPU shows no run-queue
  // wait until it does).
  double held_up_ms = 0;
  double idle_ms = 0;       // wall time it neither ran nor wanted to, since the last exec or new process
  std::size_t execs = 0;    // programs exec'd and processes started in it
  std::size_t processes = 0;  // at the last look
  // "in 12.0 s the launched tree (2 processes) ran 3.1 s of CPU, waited 8.2 s for a CPU, was idle 0.5 s; 2 execs or new processes"
  std::string describe() const;
};

class DiscoveryWait {
 public:
  using Clock = std::chrono::steady_clock;
  enum class Ended { kNot, kTreeGone, kCpu, kIdle, kCeiling };

  // `tree`: the pids to follow now (the launched tree, or the attached process).
  DiscoveryWait(std::function<std::vector<pid_t>()> tree, DiscoveryLimits limits);

  // Whether to stop waiting. Cheap enough for a polling loop: the tree is
  // measured at most every kMeasureInterval.
  bool over();
  Ended ended() const { return ended_; }
  const TreeProgress& progress() const { return progress_; }
  // Ended at the ceiling while the tree waited for a CPU longer than it ran.
  bool starved() const;
  // Why the wait ended, with the figures: for the report.
  std::string figures() const;
  const DiscoveryLimits& limits() const { return limits_; }
  Clock::time_point began() const { return began_; }
  Clock::time_point ceiling() const { return began_ + limits_.ceiling; }

  static constexpr std::chrono::milliseconds kMeasureInterval{100};
  // Below this share of one CPU (ran plus waited) an interval counts as idle.
  static constexpr double kActiveShare = 0.25;

 private:
  void measure(Clock::time_point now);

  struct ThreadTimes {
    std::uint64_t on_cpu_ns = 0, waiting_ns = 0;
  };
  std::function<std::vector<pid_t>()> tree_;
  DiscoveryLimits limits_;
  Clock::time_point began_, measured_at_;
  std::map<pid_t, ThreadTimes> threads_;  // tid -> last schedstat
  std::map<pid_t, std::string> images_;   // pid -> /proc/PID/exe at the last look
  TreeProgress progress_;
  Ended ended_ = Ended::kNot;
};

}  // namespace tracecorr::conform

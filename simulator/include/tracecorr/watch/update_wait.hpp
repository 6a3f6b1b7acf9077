// How long a session that judges a target's updates watches it: at least its
// window; past it, until the target has updated (and then long enough for
// what follows an update to be seen), or until a stated stretch of the
// target's own time has passed since its last publication without one; never
// past a wall-clock ceiling. A real SDK republishes as each worker's tracer
// starts, seconds into a loaded run: a fixed window ended first.
//
// "The target's own time" (TargetProgress) is wall time minus the longest any
// of its threads waited in a run queue (/proc/PID/task/TID/schedstat): the
// time it could have used. A target that sleeps has all of it; one starved of
// CPU on a busy machine has less, so the bound stretches instead of ending
// before the target could act. Protocol-neutral: a package says what a
// publication is (`published`) and names the bound in its report.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>

namespace tracecorr::watch {

// The target's progress since a mark, from its threads' schedstat.
class TargetProgress {
 public:
  struct Reading {
    std::chrono::milliseconds wall{0};
    std::chrono::milliseconds longest_wait{0};  // the thread that waited longest for a CPU
    std::chrono::milliseconds cpu{0};           // summed over the threads
    // The time the target could use: wall minus the longest wait.
    std::chrono::milliseconds available() const;
    // "2.1 s of the target's time in 5.3 s (one thread waited 3.2 s for a CPU; 0.8 s of CPU used)"
    std::string describe() const;
  };
  // The target's threads' times at one moment (a mark is one): one read of
  // their schedstat, which several readings may share (ActivityClock).
  struct Snapshot {
    std::chrono::steady_clock::time_point at;
    std::map<pid_t, std::pair<std::uint64_t, std::uint64_t>> threads;  // tid -> (ns on a CPU, ns waiting)
  };
  static Snapshot snapshot(pid_t pid);
  // The progress from `then` to `now`; nullopt when `now` read no thread (the target is gone).
  static std::optional<Reading> between(const Snapshot& then, const Snapshot& now);

  explicit TargetProgress(pid_t pid);  // marks now
  void mark();
  // nullopt when the target's threads cannot be read (it is gone).
  std::optional<Reading> since_mark() const;

 private:
  pid_t pid_;
  Snapshot mark_;
};

struct UpdateWaitBounds {
  std::chrono::milliseconds window{0};  // always watched
  std::chrono::milliseconds settle{0};  // of the target's time after an update
  std::chrono::milliseconds quiet{0};   // of the target's time after the last publication, without an update
  std::chrono::milliseconds ceiling{0};  // wall clock, from begin(); at least window
};

// Thread-safe: a package's reader calls published() while the scenario asks
// keep_going().
class UpdateWait {
 public:
  UpdateWait(pid_t pid, UpdateWaitBounds bounds);
  // The window and the ceiling run from here (construction, until called).
  void start();
  // Each publication the package saw, by its own key (a timestamp, a
  // serial): the first is the publication, later distinct ones are updates.
  void published(std::uint64_t key);
  std::size_t updates() const;
  // Whether the session goes on; records why it ends when it says no.
  bool keep_going();
  // Why the session ended (after keep_going() said no), with the figures.
  std::string why_ended() const;
  std::chrono::milliseconds watched() const;
  // The target's progress (since its last publication, or its first update)
  // that the ending keep_going() read: what a starved target had of its own
  // time when the ceiling ended the wait. nullopt until then, or when the
  // target's threads could not be read.
  std::optional<TargetProgress::Reading> progress_at_end() const;

 private:
  UpdateWaitBounds bounds_;
  std::chrono::steady_clock::time_point began_;
  mutable std::mutex mutex_;
  std::optional<std::uint64_t> first_, last_key_;
  std::size_t updates_ = 0;
  TargetProgress since_publication_;
  bool published_seen_ = false;
  std::string why_;
  std::chrono::milliseconds watched_{0};
  std::optional<TargetProgress::Reading> progress_at_end_;
};

}  // namespace tracecorr::watch

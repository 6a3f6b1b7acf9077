// "Quiet for N ms of the target's own time since the last change": how the
// watchers that end on a target's quiet (the slot watch, a package's
// update-order rounds, a package's published-record watches) tell that the
// target has had its chance to act and did not, under a wall-clock ceiling.
//
// The target's own time is TargetProgress's (update_wait.hpp): wall time
// minus the longest wait of any of its threads for a CPU. A target starved on
// a busy machine (an emulated guest beside other work) gets as much of its own
// time as an idle one before the watch calls it quiet; the ceiling, of wall
// time, ends a watch whatever the target does.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <optional>

#include "tracecorr/watch/update_wait.hpp"

namespace tracecorr::watch {

class ActivityClock {
 public:
  using Clock = std::chrono::steady_clock;
  // Starts now: the start is the first "last change". `ceiling` is of wall
  // time from the start.
  ActivityClock(pid_t pid, Clock::duration ceiling);

  // The target did something the watch counts (an update, a new thread, a
  // publication): its quiet starts again now.
  void changed();

  // The target's own time since the start, and since the last change (or the
  // start); nullopt when its threads cannot be read (it is gone).
  std::optional<TargetProgress::Reading> since_start() const;
  std::optional<TargetProgress::Reading> since_change() const;

  // Both from one read of the target's threads (a watch that looks often),
  // after marking a change at that read when `changed_since_last_look`.
  struct Look {
    TargetProgress::Reading since_start, since_change;
  };
  std::optional<Look> look(bool changed_since_last_look);

  // Whether the target has had `quiet` of its own time since the last change.
  // A target whose threads cannot be read (it is gone) does nothing more: it
  // is quiet.
  bool quiet_for(std::chrono::milliseconds quiet) const;

  // Whether the wall-clock ceiling has passed.
  bool past_ceiling(Clock::time_point now = Clock::now()) const { return now - start_.at >= ceiling_; }
  Clock::time_point started() const { return start_.at; }

 private:
  pid_t pid_;
  Clock::duration ceiling_;
  TargetProgress::Snapshot start_;
  TargetProgress::Snapshot change_;
};

}  // namespace tracecorr::watch

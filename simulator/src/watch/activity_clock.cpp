// See activity_clock.hpp.
#include "tracecorr/watch/activity_clock.hpp"

namespace tracecorr::watch {

ActivityClock::ActivityClock(pid_t pid, Clock::duration ceiling)
    : pid_(pid), ceiling_(ceiling), start_(TargetProgress::snapshot(pid)), change_(start_) {}

void ActivityClock::changed() { change_ = TargetProgress::snapshot(pid_); }

std::optional<TargetProgress::Reading> ActivityClock::since_start() const {
  return TargetProgress::between(start_, TargetProgress::snapshot(pid_));
}

std::optional<TargetProgress::Reading> ActivityClock::since_change() const {
  return TargetProgress::between(change_, TargetProgress::snapshot(pid_));
}

std::optional<ActivityClock::Look> ActivityClock::look(bool changed_since_last_look) {
  auto now = TargetProgress::snapshot(pid_);
  auto since_start = TargetProgress::between(start_, now);
  if (!since_start) return std::nullopt;
  if (changed_since_last_look) change_ = now;
  return Look{*since_start, *TargetProgress::between(change_, now)};
}

bool ActivityClock::quiet_for(std::chrono::milliseconds quiet) const {
  auto reading = since_change();
  return !reading || reading->available() >= quiet;
}

}  // namespace tracecorr::watch

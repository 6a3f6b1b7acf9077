// Where CLOCK_MONOTONIC stands on the wall clock: what turns a read's
// monotonic time into the Unix time of the spans and profiles a process
// exports, and what shows that the wall clock was stepped meanwhile.
#pragma once

#include <cstdint>
#include <ctime>
#include <functional>

namespace tracecorr {

struct ClockOffset {
  std::int64_t wall_minus_monotonic_ns = 0;  // CLOCK_REALTIME - CLOCK_MONOTONIC
  // Half the narrowest bracket of monotonic reads around a wall-clock read:
  // how far the offset can be from the truth.
  std::int64_t uncertainty_ns = 0;
};

// Reads one clock (ns); a test hands its own.
using ClockRead = std::function<std::int64_t(clockid_t)>;
std::int64_t read_clock_ns(clockid_t clock);

// The wall clock read between two monotonic reads, up to kClockOffsetTries
// times, keeping the narrowest bracket. A thread preempted between its reads
// (a starved CI runner, a guest under emulation) would otherwise be off by
// half the preemption, and a judge comparing two offsets would see a clock
// step where there was none.
inline constexpr int kClockOffsetTries = 16;
ClockOffset wall_minus_monotonic(const ClockRead& read = read_clock_ns);

}  // namespace tracecorr

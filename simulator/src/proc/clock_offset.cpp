#include "tracecorr/clock_offset.hpp"

namespace tracecorr {

namespace {
// A bracket this narrow is a read that nothing interrupted: stop trying.
constexpr std::int64_t kGoodBracketNs = 20'000;
}  // namespace

std::int64_t read_clock_ns(clockid_t clock) {
  timespec t{};
  clock_gettime(clock, &t);
  return static_cast<std::int64_t>(t.tv_sec) * 1'000'000'000 + t.tv_nsec;
}

ClockOffset wall_minus_monotonic(const ClockRead& read) {
  ClockOffset best;
  std::int64_t best_bracket = -1;
  for (int attempt = 0; attempt < kClockOffsetTries; ++attempt) {
    const std::int64_t before = read(CLOCK_MONOTONIC);
    const std::int64_t wall = read(CLOCK_REALTIME);
    const std::int64_t after = read(CLOCK_MONOTONIC);
    const std::int64_t bracket = after - before;
    if (best_bracket < 0 || bracket < best_bracket) {
      best_bracket = bracket;
      best = {wall - (before + bracket / 2), (bracket + 1) / 2};
    }
    if (bracket <= kGoodBracketNs) break;
  }
  return best;
}

}  // namespace tracecorr

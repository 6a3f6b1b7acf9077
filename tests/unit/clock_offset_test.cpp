#include "tracecorr/clock_offset.hpp"

#include <gtest/gtest.h>

#include <deque>

namespace tracecorr {
namespace {

// Hands out scripted clock values in the order they are read.
struct ScriptedClocks {
  std::deque<std::int64_t> values;
  std::int64_t operator()(clockid_t) {
    auto v = values.front();
    values.pop_front();
    return v;
  }
};

constexpr std::int64_t kTrueOffset = 1'000'000'000'000;

TEST(ClockOffset, APreemptedReadIsNotTheOneKept) {
  // First try: 170 ms pass between the wall-clock read and the second
  // monotonic read (the thread lost its CPU); the midpoint would be 85 ms off.
  // Second try: 1 µs brackets the wall read.
  ScriptedClocks clocks{{100, 100 + kTrueOffset, 170'000'100,  //
                         200'000'000, 200'000'500 + kTrueOffset, 200'001'000}};
  auto offset = wall_minus_monotonic(std::ref(clocks));
  EXPECT_EQ(offset.wall_minus_monotonic_ns, kTrueOffset);
  EXPECT_EQ(offset.uncertainty_ns, 500);
  EXPECT_TRUE(clocks.values.empty());
}

TEST(ClockOffset, EveryReadPreemptedKeepsTheNarrowestAndSaysHowUncertain) {
  ScriptedClocks clocks;
  for (int i = 0; i < kClockOffsetTries; ++i) {
    std::int64_t start = i * 1'000'000'000LL;
    std::int64_t width = (i == 7 ? 2'000'000 : 50'000'000);
    clocks.values.insert(clocks.values.end(), {start, start + width / 2 + kTrueOffset, start + width});
  }
  auto offset = wall_minus_monotonic(std::ref(clocks));
  EXPECT_EQ(offset.wall_minus_monotonic_ns, kTrueOffset);
  EXPECT_EQ(offset.uncertainty_ns, 1'000'000);
}

TEST(ClockOffset, TheRealClocksAgreeWithThemselves) {
  auto a = wall_minus_monotonic();
  auto b = wall_minus_monotonic();
  EXPECT_GE(a.uncertainty_ns, 0);
  EXPECT_LT(std::llabs(a.wall_minus_monotonic_ns - b.wall_minus_monotonic_ns),
            a.uncertainty_ns + b.uncertainty_ns + 1'000'000);
}

}  // namespace
}  // namespace tracecorr

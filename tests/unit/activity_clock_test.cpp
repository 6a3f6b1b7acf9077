// watch::ActivityClock on this test's own process (its threads' schedstat):
// the quiet since the last change is of the target's own time, a change starts
// it again, the ceiling is wall time, a gone target is quiet. No wall-clock
// upper bound: on a loaded machine the test may wait for a CPU between looks.
#include "tracecorr/watch/activity_clock.hpp"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <thread>

namespace tracecorr::watch {
namespace {

using namespace std::chrono_literals;

TEST(ActivityClock, QuietOnlyOnceTheTargetHadTheStretch) {
  ActivityClock clock(getpid(), 1h);
  EXPECT_FALSE(clock.quiet_for(1h));
  std::this_thread::sleep_for(60ms);
  auto quiet = clock.since_change();
  ASSERT_TRUE(quiet);
  EXPECT_GE(quiet->wall, 60ms);
  EXPECT_TRUE(clock.quiet_for(0ms));
  EXPECT_FALSE(clock.quiet_for(1h));
}

TEST(ActivityClock, AChangeStartsTheQuietAgainNotTheStart) {
  ActivityClock clock(getpid(), 1h);
  std::this_thread::sleep_for(60ms);
  clock.changed();
  auto since_change = clock.since_change();
  auto since_start = clock.since_start();
  ASSERT_TRUE(since_change && since_start);
  // Read in this order, the start's reading covers the change's and the 60 ms before it.
  EXPECT_GE(since_start->wall, since_change->wall + 60ms);
}

TEST(ActivityClock, ALookReadsBothFromOneReadAndMarksAChangeThere) {
  ActivityClock clock(getpid(), 1h);
  std::this_thread::sleep_for(60ms);
  auto first = clock.look(true);
  ASSERT_TRUE(first);
  EXPECT_GE(first->since_start.wall, 60ms);
  EXPECT_EQ(first->since_change.wall, 0ms);  // the change was marked at this very read
  std::this_thread::sleep_for(20ms);
  auto second = clock.look(false);
  ASSERT_TRUE(second);
  EXPECT_GE(second->since_change.wall, 20ms);
  EXPECT_GE(second->since_start.wall, second->since_change.wall + 60ms);
}

TEST(ActivityClock, TheCeilingIsWallTimeFromTheStart) {
  ActivityClock clock(getpid(), 30ms);
  EXPECT_FALSE(clock.past_ceiling(clock.started() + 29ms));
  EXPECT_TRUE(clock.past_ceiling(clock.started() + 30ms));
  clock.changed();  // activity does not move the ceiling
  EXPECT_TRUE(clock.past_ceiling(clock.started() + 30ms));
}

TEST(ActivityClock, AGoneTargetIsQuiet) {
  pid_t child = fork();
  if (child == 0) _exit(0);
  ASSERT_GT(child, 0);
  ActivityClock clock(child, 1h);
  int status = 0;
  waitpid(child, &status, 0);
  EXPECT_FALSE(clock.since_change());
  EXPECT_FALSE(clock.since_start());
  EXPECT_FALSE(clock.look(true));
  EXPECT_TRUE(clock.quiet_for(1h));
}

}  // namespace
}  // namespace tracecorr::watch

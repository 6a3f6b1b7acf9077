// watch::UpdateWait and TargetProgress on this test's own process (its
// threads' schedstat): how long a session that judges updates goes on.
#include "tracecorr/watch/update_wait.hpp"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <thread>

namespace tracecorr::watch {
namespace {

using namespace std::chrono_literals;

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// How a wait ended, on the product's own clock (UpdateWait::watched(), from
// its start) and on the test's, taken before the wait was made or published
// to: so the test's `took` is never shorter than any stretch the product
// measured. No wall-clock upper bound: on a loaded machine the test itself
// may wait seconds for a CPU between two looks. What the product promises is
// that it never says "go on" at or past its ceiling, checked at every look.
struct Ended {
  milliseconds took{0};       // test clock, from before the wait was made
  milliseconds last_yes{-1};  // product clock at the last "go on" (-1: none)
  milliseconds at_no{0};      // product clock at the "stop"
  bool stopped = false;       // false: it said "go on" past its ceiling
};

Ended run(UpdateWait& wait, Clock::time_point began, milliseconds ceiling) {
  Ended e;
  for (;;) {
    const bool go_on = wait.keep_going();
    const auto at = wait.watched();
    if (!go_on) {
      e.at_no = at;
      e.stopped = true;
      break;
    }
    if (at >= ceiling) break;  // past the ceiling and still going: the product's defect
    e.last_yes = at;
    std::this_thread::sleep_for(2ms);
  }
  e.took = std::chrono::duration_cast<milliseconds>(Clock::now() - began);
  return e;
}

TEST(TargetProgress, SleepingIsTheTargetsOwnTime) {
  TargetProgress progress(getpid());
  std::this_thread::sleep_for(60ms);
  auto r = progress.since_mark();
  ASSERT_TRUE(r);
  EXPECT_GE(r->wall, 60ms);
  EXPECT_LE(r->longest_wait, r->wall);
  EXPECT_EQ(r->available(), r->wall - r->longest_wait);
  EXPECT_NE(r->describe().find("of the target's time in"), std::string::npos) << r->describe();
}

TEST(TargetProgress, AGoneProcessHasNoReading) {
  pid_t child = fork();
  if (child == 0) _exit(0);
  ASSERT_GT(child, 0);
  TargetProgress progress(child);
  int status = 0;
  waitpid(child, &status, 0);
  EXPECT_FALSE(progress.since_mark());
}

// The quiet stretch is the target's own time: a starved target (its threads
// waiting for a CPU) may reach the wall-clock ceiling first, and then the
// product says so, with a reading short of the quiet stretch.
TEST(UpdateWait, NoUpdateEndsAfterTheQuietStretch) {
  const UpdateWaitBounds bounds{50ms, 10ms, 150ms, 5s};
  const auto began = Clock::now();
  UpdateWait wait(getpid(), bounds);
  wait.published(1);
  wait.published(1);  // the same publication read again
  const auto e = run(wait, began, bounds.ceiling);
  ASSERT_TRUE(e.stopped) << "still going at " << e.last_yes.count() << " ms, past the ceiling";
  EXPECT_GE(e.took, bounds.quiet);
  EXPECT_EQ(wait.updates(), 0u);
  const auto progress = wait.progress_at_end();
  ASSERT_TRUE(progress);
  if (e.at_no < bounds.ceiling) {
    EXPECT_GE(progress->available(), bounds.quiet) << wait.why_ended();
    EXPECT_NE(wait.why_ended().find("no update in 0.1 s of the target's time after its last publication"),
              std::string::npos)
        << wait.why_ended();
  } else {  // starved: the ceiling, before the target had the quiet stretch of its own time
    EXPECT_LT(e.last_yes, bounds.ceiling);
    EXPECT_LT(progress->available(), bounds.quiet) << wait.why_ended();
    EXPECT_NE(wait.why_ended().find("no update before the ceiling of 5.0 s"), std::string::npos) << wait.why_ended();
  }
}

TEST(UpdateWait, AnUpdateEndsItOnceSettled) {
  const UpdateWaitBounds bounds{50ms, 20ms, 10s, 20s};
  const auto began = Clock::now();
  UpdateWait wait(getpid(), bounds);
  wait.published(1);
  std::thread updater([&] {
    std::this_thread::sleep_for(100ms);
    wait.published(2);
  });
  const auto e = run(wait, began, bounds.ceiling);
  updater.join();
  ASSERT_TRUE(e.stopped) << "still going at " << e.last_yes.count() << " ms, past the ceiling";
  EXPECT_GE(e.took, 120ms);
  EXPECT_EQ(wait.updates(), 1u);
  EXPECT_NE(wait.why_ended().find("the writer updated (1 update(s) seen)"), std::string::npos) << wait.why_ended();
  // Settled on the target's own time, unless the ceiling came first.
  const auto progress = wait.progress_at_end();
  ASSERT_TRUE(progress);
  if (e.at_no < bounds.ceiling) EXPECT_GE(progress->available(), bounds.settle) << wait.why_ended();
}

TEST(UpdateWait, TheWindowIsAlwaysWatched) {
  const UpdateWaitBounds bounds{120ms, 0ms, 0ms, 20s};
  const auto began = Clock::now();
  UpdateWait wait(getpid(), bounds);
  wait.published(1);
  wait.published(2);
  const auto e = run(wait, began, bounds.ceiling);
  ASSERT_TRUE(e.stopped);
  EXPECT_GE(e.at_no, bounds.window);
  EXPECT_GE(e.took, bounds.window);
}

// The ceiling is wall clock from the wait's start: the first look at or past
// it ends the wait, however starved the target (or the test) was.
TEST(UpdateWait, TheCeilingEndsAWaitForAnUpdateThatNeverComes) {
  const UpdateWaitBounds bounds{20ms, 10ms, 60s, 200ms};
  const auto began = Clock::now();
  UpdateWait wait(getpid(), bounds);
  wait.published(1);
  const auto e = run(wait, began, bounds.ceiling);
  ASSERT_TRUE(e.stopped) << "still going at " << e.last_yes.count() << " ms, past the ceiling";
  EXPECT_LT(e.last_yes, bounds.ceiling);
  EXPECT_GE(e.at_no, bounds.ceiling);
  EXPECT_GE(e.took, bounds.ceiling);
  EXPECT_NE(wait.why_ended().find("no update before the ceiling of 0.2 s"), std::string::npos) << wait.why_ended();
  ASSERT_TRUE(wait.progress_at_end());
  EXPECT_LT(wait.progress_at_end()->available(), bounds.quiet);
}

// Nothing published: the first look past the window ends it.
TEST(UpdateWait, NothingPublishedIsTheWindowOnly) {
  const UpdateWaitBounds bounds{30ms, 10ms, 60s, 60s};
  const auto began = Clock::now();
  UpdateWait wait(getpid(), bounds);
  const auto e = run(wait, began, bounds.ceiling);
  ASSERT_TRUE(e.stopped);
  EXPECT_LT(e.last_yes, bounds.window);
  EXPECT_GE(e.at_no, bounds.window);
  EXPECT_NE(wait.why_ended().find("no publication was seen"), std::string::npos) << wait.why_ended();
}

}  // namespace
}  // namespace tracecorr::watch

// conform::UpdateWait and TargetProgress on this test's own process (its
// threads' schedstat): how long a session that judges updates goes on.
#include "tracecorr/conform/update_wait.hpp"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <thread>

namespace tracecorr::conform {
namespace {

using namespace std::chrono_literals;

// Asks until the wait ends; how long that took.
std::chrono::milliseconds run(UpdateWait& wait, std::chrono::milliseconds bound = 5s) {
  const auto began = std::chrono::steady_clock::now();
  while (wait.keep_going()) {
    if (std::chrono::steady_clock::now() - began > bound) break;
    std::this_thread::sleep_for(2ms);
  }
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - began);
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

TEST(UpdateWait, NoUpdateEndsAfterTheQuietStretch) {
  UpdateWait wait(getpid(), {50ms, 10ms, 150ms, 5s});
  wait.published(1);
  wait.published(1);  // the same publication read again
  const auto took = run(wait);
  EXPECT_GE(took, 150ms);
  EXPECT_LT(took, 3s);
  EXPECT_EQ(wait.updates(), 0u);
  EXPECT_NE(wait.why_ended().find("no update in 0.1 s of the target's time after its last publication"), std::string::npos)
      << wait.why_ended();
}

TEST(UpdateWait, AnUpdateEndsItOnceSettled) {
  UpdateWait wait(getpid(), {50ms, 20ms, 10s, 20s});
  wait.published(1);
  std::thread updater([&] {
    std::this_thread::sleep_for(100ms);
    wait.published(2);
  });
  const auto took = run(wait);
  updater.join();
  EXPECT_GE(took, 120ms);
  EXPECT_LT(took, 5s);
  EXPECT_EQ(wait.updates(), 1u);
  EXPECT_NE(wait.why_ended().find("the writer updated (1 update(s) seen)"), std::string::npos) << wait.why_ended();
}

TEST(UpdateWait, TheWindowIsAlwaysWatched) {
  UpdateWait wait(getpid(), {120ms, 0ms, 0ms, 20s});
  wait.published(1);
  wait.published(2);
  EXPECT_GE(run(wait), 120ms);
}

TEST(UpdateWait, TheCeilingEndsAWaitForAnUpdateThatNeverComes) {
  UpdateWait wait(getpid(), {20ms, 10ms, 60s, 200ms});
  wait.published(1);
  const auto took = run(wait);
  EXPECT_GE(took, 200ms);
  EXPECT_LT(took, 4s);
  EXPECT_NE(wait.why_ended().find("no update before the ceiling of 0.2 s"), std::string::npos) << wait.why_ended();
}

TEST(UpdateWait, NothingPublishedIsTheWindowOnly) {
  UpdateWait wait(getpid(), {30ms, 10ms, 60s, 60s});
  EXPECT_LT(run(wait), 2s);
  EXPECT_NE(wait.why_ended().find("no publication was seen"), std::string::npos) << wait.why_ended();
}

}  // namespace
}  // namespace tracecorr::conform

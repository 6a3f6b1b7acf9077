// The writer's own time between two instants (least_own_time): the
// wall time less the run-queue waits the marks around them allow, so a
// starved writer is never judged late on the wall clock; and no answer when
// nothing bounds the waits after the stretch.
#include <gtest/gtest.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <chrono>
#include <limits>
#include <thread>

#include "tracecorr/own_time.hpp"

namespace tracecorr {
namespace {

constexpr std::int64_t kMs = 1000000;

RunQueueMark stopped(std::uint64_t waited_ms, std::int64_t from_ms, std::int64_t until_ms) {
  return {waited_ms * kMs, from_ms * kMs, until_ms * kMs};
}

TEST(LeastOwnTime, TheWallTimeLessTheWaitsBetweenTheMarksAround) {
  // Stopped in [100, 101] having waited 10 ms; in [500, 501] having waited 40.
  const std::vector<RunQueueMark> marks{stopped(10, 101, 100), stopped(40, 501, 500)};
  EXPECT_EQ(least_own_time(marks, 200 * kMs, 400 * kMs), 200 * kMs - 30 * kMs);
}

TEST(LeastOwnTime, BeforeTheFirstMarkEveryWaitSinceTheThreadStartedMayFallInside) {
  const std::vector<RunQueueMark> marks{stopped(40, 501, 500)};
  EXPECT_EQ(least_own_time(marks, 200 * kMs, 400 * kMs), 200 * kMs - 40 * kMs);
}

TEST(LeastOwnTime, AMarkInsideTheStretchBoundsNeitherSide) {
  // The mark at [300, 301] is after `from` and before `to`: the marks at 100 and 500 bound the waits.
  const std::vector<RunQueueMark> marks{stopped(10, 101, 100), stopped(25, 301, 300), stopped(40, 501, 500)};
  EXPECT_EQ(least_own_time(marks, 200 * kMs, 400 * kMs), 200 * kMs - 30 * kMs);
}

TEST(LeastOwnTime, TheTightestMarkOnEachSideIsTaken) {
  const std::vector<RunQueueMark> marks{stopped(5, 51, 50), stopped(10, 101, 100), stopped(40, 501, 500),
                                        stopped(90, 901, 900)};
  EXPECT_EQ(least_own_time(marks, 200 * kMs, 400 * kMs), 200 * kMs - 30 * kMs);
}

TEST(LeastOwnTime, AStarvedThreadHadNoTimeOfItsOwn) {
  const std::vector<RunQueueMark> marks{stopped(0, 101, 100), stopped(390, 501, 500)};
  EXPECT_LT(*least_own_time(marks, 200 * kMs, 400 * kMs), 0);
}

TEST(LeastOwnTime, NoMarkAfterTheStretchNoAnswer) {
  const std::vector<RunQueueMark> marks{stopped(10, 101, 100)};
  EXPECT_FALSE(least_own_time(marks, 200 * kMs, 400 * kMs));
  EXPECT_FALSE(least_own_time({}, 200 * kMs, 400 * kMs));
}

TEST(LeastOwnTime, AMarkReadWhileTheThreadRanBoundsTheTimeBeforeItsNextStore) {
  // Read at 150 (ended 151) while it ran, 60 ms waited; its next store came after 450: until 450. It
  // waited 60 ms by 200 at least and by 400 at most: nothing in between.
  const std::vector<RunQueueMark> marks{stopped(10, 101, 100), {60 * kMs, 151 * kMs, 450 * kMs}};
  EXPECT_EQ(least_own_time(marks, 200 * kMs, 400 * kMs), 200 * kMs);
  EXPECT_EQ(least_own_time(marks, 120 * kMs, 400 * kMs), 280 * kMs - 50 * kMs) << "from 120, only the mark at 100 is before";
  EXPECT_FALSE(least_own_time(marks, 200 * kMs, 460 * kMs)) << "a store after 450 says nothing of the waits until 460";
}

TEST(RunQueueMarks, AReadingAfterTheThreadGotACpuAgainBoundsTheWaitsUpToTheLastReading) {
  const pid_t self = static_cast<pid_t>(::syscall(SYS_gettid));
  RunQueueMarks marks;
  marks.take(self);
  std::this_thread::sleep_for(std::chrono::milliseconds(2));  // off the CPU and back: a timeslice more
  marks.take(self);
  const auto& mine = marks.marks().at(self);
  ASSERT_EQ(mine.size(), 2u);
  EXPECT_EQ(mine[0].until_ns, std::numeric_limits<std::int64_t>::min()) << "the first reading bounds nothing after it";
  EXPECT_LT(mine[1].until_ns, mine[0].from_ns) << "until the first reading began";
  EXPECT_GT(mine[1].from_ns, mine[0].from_ns);
  EXPECT_GE(mine[1].waited_ns, mine[0].waited_ns);
}

TEST(RunQueueMarks, AStoreSeenAfterATimeBoundsTheWaitsUpToIt) {
  const pid_t self = static_cast<pid_t>(::syscall(SYS_gettid));
  RunQueueMarks marks;
  marks.take(self, 12345);
  EXPECT_EQ(marks.marks().at(self).front().until_ns, 12345) << "the first reading, bounded by the store alone";
}

TEST(RunQueueMarks, AGoneThreadLeavesNoMark) {
  RunQueueMarks marks;
  marks.take(std::numeric_limits<pid_t>::max());
  EXPECT_TRUE(marks.marks().empty());
}

}  // namespace
}  // namespace tracecorr

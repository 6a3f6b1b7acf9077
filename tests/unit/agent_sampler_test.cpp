// The ptrace sampler against a real child process whose threads publish
// records through a thread-local pointer, and the frame-pointer walk.
#include <gtest/gtest.h>
#include <pthread.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <map>
#include <memory>

#include "forked_child.hpp"
#include "test_record_layout.hpp"
#include "tracecorr/sampler.hpp"

namespace tracecorr {
namespace {

// The child's record pointer: local-exec TLS in the test executable, so its
// offset from the thread pointer is the same static value in every thread.
thread_local std::uint8_t* t_record = nullptr;

std::int64_t record_tls_offset() {
  return reinterpret_cast<std::intptr_t>(&t_record) - reinterpret_cast<std::intptr_t>(__builtin_thread_pointer());
}

using test_support::test_record;
using test_support::test_record_layout;

struct ThreadInfo {
  pid_t tid;
  std::uint64_t thread_pointer;
  int kind;  // 0: record A, 1: record B (valid 0), 2: no record
};

int g_ready_fd = -1;
test_support::TestRecordBytes g_records[2];

void* child_thread(void* arg) {
  int kind = static_cast<int>(reinterpret_cast<std::intptr_t>(arg));
  if (kind < 2) t_record = g_records[kind].data();
  ThreadInfo info{static_cast<pid_t>(syscall(SYS_gettid)),
                  static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(__builtin_thread_pointer())), kind};
  (void)!write(g_ready_fd, &info, sizeof(info));
  for (;;) pause();
  return nullptr;
}

class ChildWithRecords : public ::testing::Test {
 protected:
  void SetUp() override {
    g_records[0] = test_record(1, 1);
    g_records[1] = test_record(2, 0);
    child_ = std::make_unique<test::ForkedChild>([](test::ForkedChild::Pipes pipes) {
      g_ready_fd = pipes.report;
      pthread_t t;
      pthread_create(&t, nullptr, child_thread, reinterpret_cast<void*>(1));
      pthread_create(&t, nullptr, child_thread, reinterpret_cast<void*>(2));
      child_thread(reinterpret_cast<void*>(0));
    });
    pid_ = child_->pid();
    ASSERT_GT(pid_, 0);
    for (int i = 0; i < 3; ++i) {
      ThreadInfo info{};
      ASSERT_TRUE(child_->read(&info, sizeof(info)));
      threads_[info.tid] = info;
    }
  }
  std::unique_ptr<test::ForkedChild> child_;  // killed and reaped with the fixture
  pid_t pid_ = -1;
  std::map<pid_t, ThreadInfo> threads_;
};

TEST_F(ChildWithRecords, PtraceSamplerReadsEachThreadsRecordAndStack) {
  auto sampler = make_ptrace_sampler({.frequency_hz = 50});
  ASSERT_TRUE(sampler->track(pid_, test_record_layout(), PointerSite::tls_offset(record_tls_offset())));
  std::map<pid_t, Sample> seen;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (seen.size() < threads_.size() && std::chrono::steady_clock::now() < deadline) {
    auto n = sampler->poll([&](const Sample& s) { seen[s.tid] = s; }, std::chrono::milliseconds(200));
    ASSERT_TRUE(n) << n.error().message();
  }
  ASSERT_EQ(seen.size(), 3u);
  for (const auto& [tid, s] : seen) {
    SCOPED_TRACE("tid " + std::to_string(tid));
    ASSERT_TRUE(threads_.count(tid));
    const ThreadInfo& t = threads_[tid];
    EXPECT_EQ(s.pid, pid_);
    EXPECT_EQ(s.thread_pointer, t.thread_pointer);
    EXPECT_GT(s.time_ns, 0u);
    ASSERT_FALSE(s.frames.empty());
    EXPECT_NE(s.frames[0], 0u);
    EXPECT_LE(s.frames.size(), kMaxStackFrames);
    if (t.kind == 2) {
      EXPECT_EQ(s.error, SampleError::RecordPointerNull);
      EXPECT_FALSE(s.record.has_value());
    } else {
      EXPECT_EQ(s.error, SampleError::Ok);
      ASSERT_TRUE(s.record.has_value());
      EXPECT_EQ(*s.record, RecordBytes(g_records[t.kind]));  // valid 0 is reported as read: judging it is the agent's
      EXPECT_EQ(s.record_declared_length, std::uint64_t{TC_TEST_RECORD_SIZE});
    }
  }
  auto c = sampler->counters();
  EXPECT_GE(c.samples, 3u);
  EXPECT_GE(c.record_pointer_null, 1u);
  EXPECT_GE(c.valid_zero, 1u);
  EXPECT_EQ(c.lost, 0u);

  // Untracked: no more samples.
  ASSERT_TRUE(sampler->untrack(pid_));
  std::size_t after = 0;
  for (int i = 0; i < 3; ++i) {
    auto n = sampler->poll([&](const Sample&) { ++after; }, std::chrono::milliseconds(50));
    ASSERT_TRUE(n);
  }
  EXPECT_EQ(after, 0u);
}

TEST_F(ChildWithRecords, WrongOffsetIsAReadErrorNotACrash) {
  auto sampler = make_ptrace_sampler({.frequency_hz = 100});
  // Far outside any mapping: the record pointer read fails.
  ASSERT_TRUE(sampler->track(pid_, test_record_layout(), PointerSite::tls_offset(std::int64_t{1} << 46)));
  std::size_t failures = 0, total = 0;
  for (int i = 0; i < 20 && total < 3; ++i) {
    auto n = sampler->poll(
        [&](const Sample& s) {
          ++total;
          failures += s.error == SampleError::RecordPointerReadFailed;
        },
        std::chrono::milliseconds(100));
    ASSERT_TRUE(n);
  }
  EXPECT_GE(total, 3u);
  EXPECT_EQ(failures, total);
}

// A target killed between two rounds stays a zombie until its parent reaps
// it, and the kernel refuses to seize a zombie with EPERM. The sampler must
// read that as a process gone, not as a permission it lacks: the agent's run
// went on failing "PTRACE_SEIZE refused" whenever a named target died.
TEST_F(ChildWithRecords, AKilledUnreapedTargetIsGoneNotRefused) {
  auto sampler = make_ptrace_sampler({.frequency_hz = 200});
  ASSERT_TRUE(sampler->track(pid_, test_record_layout(), PointerSite::tls_offset(record_tls_offset())));
  ASSERT_EQ(::kill(pid_, SIGKILL), 0);
  siginfo_t info{};
  ASSERT_EQ(::waitid(P_PID, static_cast<id_t>(pid_), &info, WEXITED | WNOWAIT), 0);  // a zombie, left unreaped
  std::size_t samples = 0;
  for (int i = 0; i < 5; ++i) {
    auto n = sampler->poll([&](const Sample&) { ++samples; }, std::chrono::milliseconds(20));
    ASSERT_TRUE(n) << "round " << i << ": " << n.error().message();
  }
  EXPECT_EQ(samples, 0u);
}

TEST(FramePointerWalk, FollowsFrameRecordsUntilAnUnreadableOne) {
  std::map<std::uint64_t, std::uint64_t> mem{
      {0x1000, 0x1100}, {0x1008, 0xaaa},  // frame 1 -> frame 2, returns to 0xaaa
      {0x1100, 0x1200}, {0x1108, 0xbbb},  // frame 2 -> frame 3
      {0x1200, 0},      {0x1208, 0xccc},  // outermost: next fp 0
  };
  ReadWord read = [&](std::uint64_t a, std::uint64_t& out) {
    auto it = mem.find(a);
    if (it == mem.end()) return false;
    out = it->second;
    return true;
  };
  auto frames = walk_frame_pointers(0x999, 0x1000, read, 64);
  EXPECT_EQ(frames, (std::vector<std::uint64_t>{0x999, 0xaaa, 0xbbb, 0xccc}));
  EXPECT_EQ(walk_frame_pointers(0x999, 0x1000, read, 2), (std::vector<std::uint64_t>{0x999, 0xaaa}));
  EXPECT_EQ(walk_frame_pointers(0x999, 0, read, 64), (std::vector<std::uint64_t>{0x999}));
  EXPECT_EQ(walk_frame_pointers(0x999, 0x5000, read, 64), (std::vector<std::uint64_t>{0x999}));  // unreadable
  // A loop of frame pointers is bounded by max_frames.
  mem[0x1200] = 0x1000;
  EXPECT_LE(walk_frame_pointers(0x999, 0x1000, read, 64).size(), 64u);
  EXPECT_TRUE(walk_frame_pointers(0x999, 0x1000, read, 0).empty());
}

}  // namespace
}  // namespace tracecorr

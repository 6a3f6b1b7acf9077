// The update-order watch (hardware watchpoints): the chunk plan, then a real
// publisher of the tests' own record (tests/unit/data/update_order_target.c,
// tests/support/test_record.h) watched while it publishes correctly and in two
// wrong orders, natively and as an arm64 guest under qemu-user.
// After every watch the target must run on: untraced, not stopped, debug
// registers clear, record still changing.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstddef>
#include <cstdio>
#include <iostream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "forked_child.hpp"
#include "test_record_layout.hpp"
#include "tracecorr/watch/update_order.hpp"
#include "tracecorr/memory.hpp"
#include "watched_thread.hpp"

namespace tracecorr::watch {
namespace {

using namespace std::chrono_literals;
using tracecorr::test_support::test_record_layout;

const std::string kUpdateOrderTarget = std::string(TRACECORR_TEST_DATA_DIR) + "/update_order_target";
const std::string kUpdateOrderTargetArm64 = std::string(TRACECORR_TEST_DATA_DIR) + "/update_order_target.arm64";

struct PublisherThread {
  pid_t tid = 0;
  std::uint64_t record = 0;
};

// A launched update_order_target.
class OrderedPublisher {
 public:
  OrderedPublisher(std::vector<std::string> argv, std::size_t threads)
      : child_([argv](test::ForkedChild::Pipes pipes) {
          dup2(pipes.report, STDOUT_FILENO);
          test::ForkedChild::exec(argv);
        }),
        pid_(child_.pid()),
        out_(child_.report_fd()) {
    if (pid_ <= 0) {
      ADD_FAILURE() << "fork failed";
      return;
    }
    read_threads(threads);
  }
  OrderedPublisher(const OrderedPublisher&) = delete;
  OrderedPublisher& operator=(const OrderedPublisher&) = delete;

  pid_t pid() const { return pid_; }
  const std::vector<PublisherThread>& threads() const { return threads_; }
  bool alive() const { return pid_ > 0 && kill(pid_, 0) == 0 && waitpid(pid_, nullptr, WNOHANG) == 0; }

  const std::string& output() const { return output_; }

  // Reads stdout until `needle` has appeared `count` times (bounded, so a bug fails instead of hanging).
  bool wait_for_output(const std::string& needle, std::size_t count = 1,
                       std::chrono::steady_clock::duration bound = 5s) {
    for (auto give_up = std::chrono::steady_clock::now() + bound;;) {
      std::size_t seen = 0;
      for (auto at = output_.find(needle); at != std::string::npos; at = output_.find(needle, at + 1)) ++seen;
      if (seen >= count) return true;
      if (std::chrono::steady_clock::now() >= give_up) return false;
      pollfd p{out_, POLLIN, 0};
      if (poll(&p, 1, 50) <= 0) continue;
      char buf[512];
      ssize_t n = read(out_, buf, sizeof buf);
      if (n <= 0) return false;
      output_.append(buf, static_cast<std::size_t>(n));
    }
  }

 private:
  // "thread TID record 0xADDR" per worker; bounded so a broken build fails instead of hanging.
  void read_threads(std::size_t count) {
    std::string buffered;
    auto give_up = std::chrono::steady_clock::now() + 10s;
    while (threads_.size() < count && std::chrono::steady_clock::now() < give_up) {
      pollfd p{out_, POLLIN, 0};
      if (poll(&p, 1, 100) <= 0) continue;
      char buf[512];
      ssize_t n = read(out_, buf, sizeof buf);
      if (n <= 0) break;
      buffered.append(buf, static_cast<std::size_t>(n));
      for (auto nl = buffered.find('\n'); nl != std::string::npos; nl = buffered.find('\n')) {
        long tid = 0;
        unsigned long long record = 0;
        if (std::sscanf(buffered.substr(0, nl).c_str(), "thread %ld record %llx", &tid, &record) == 2)
          threads_.push_back({static_cast<pid_t>(tid), record});
        buffered.erase(0, nl + 1);
      }
    }
    output_ = buffered;
    ASSERT_EQ(threads_.size(), count) << "the publisher did not announce its threads: " << buffered;
  }

  test::ForkedChild child_;  // killed and reaped on destruction
  pid_t pid_ = -1;
  int out_ = -1;
  std::vector<PublisherThread> threads_;
  std::string output_;  // stdout after the thread announcements
};

// Waits (bounded, a liveness check, not a timing assertion) until the record changes.
bool record_keeps_changing(pid_t pid, std::uint64_t record) {
  return tracecorr::test_support::memory_keeps_changing<TC_TEST_RECORD_SIZE>(pid, record);
}

// The thread runs on after a watch: detached, not stopped, no watchpoint armed, publishing.
void expect_released(const OrderedPublisher& target, const PublisherThread& thread) {
  tracecorr::test_support::expect_released(target.pid(), thread.tid);
  EXPECT_TRUE(record_keeps_changing(target.pid(), thread.record)) << "the publisher stopped making progress";
  EXPECT_TRUE(target.alive());
}

std::vector<std::string> publisher_argv(const std::string& mode, int misalign) {
  return {kUpdateOrderTarget, "--mode", mode, "--misalign", std::to_string(misalign)};
}

TEST(UpdateOrderPlan, WatchesTheValidByteAndAsMuchElseAsFourRegistersAllow) {
  // The test record is 41 bytes, its valid byte at offset 3. Four 8-byte
  // chunks hold at most 32 of them; how many they do depends on where the
  // record starts in its first chunk.
  const std::size_t expected_watched[8] = {32, 31, 30, 29, 28, 32, 32, 32};
  for (std::uint64_t misalign = 0; misalign < 8; ++misalign) {
    auto plan = plan_record_watch(test_record_layout(), 0x7f0000001000 + misalign, TC_TEST_RECORD_SIZE);
    SCOPED_TRACE("misalign " + std::to_string(misalign));
    ASSERT_LE(plan.chunks.size(), kWatchRegisters);
    EXPECT_TRUE(plan.watched[TC_TEST_RECORD_VALID_OFFSET]);
    std::size_t covered = 0;
    for (const auto& c : plan.chunks) {
      EXPECT_EQ(c.address % kWatchChunkSize, 0u);
      covered += c.end_record_offset - c.first_record_offset;
    }
    EXPECT_EQ(plan.watched_bytes(), covered);
    // Misalignment 4 is the worst case: the valid byte sits in a first chunk
    // that holds only 4 record bytes (the last holds 5), which must still be taken.
    EXPECT_EQ(plan.watched_bytes(), expected_watched[misalign]);
  }
  EXPECT_EQ(plan_record_watch(test_record_layout(), 0x7f0000001000, TC_TEST_RECORD_SIZE).unwatched_description(),
            "record bytes 32..40 (stamp bytes 3..11)");
  // Valid byte in the second chunk: the 2-byte first chunk is dropped.
  EXPECT_EQ(plan_record_watch(test_record_layout(), 0x7f0000001006, TC_TEST_RECORD_SIZE).unwatched_description(),
            "record bytes 0..1 (version bytes 0..1); record bytes 34..40 (stamp bytes 5..11)");
}

TEST(UpdateOrderWatch, CorrectPublisherConformsAndRunsOnAfterTheWatch) {
  OrderedPublisher target(publisher_argv("correct", 6), 1);
  ASSERT_FALSE(target.threads().empty());
  const auto& thread = target.threads()[0];

  auto report = watch_update_order(target.pid(), thread.tid, test_record_layout(), thread.record, 300ms, 40);
  ASSERT_TRUE(report.ok()) << report.error().message();
  EXPECT_TRUE(report->conforms()) << describe(*report);
  EXPECT_GT(report->updates_seen, 0u) << describe(*report);
  // Byte-wise stores: each update is 38 field stores and two valid stores, some unwatched.
  EXPECT_GT(report->stores_seen, report->updates_seen);
  EXPECT_NE(report->limits.find("record bytes 0..1"), std::string::npos) << report->limits;
  expect_released(target, thread);

  // And it can be watched again: nothing of the first watch lingers.
  auto again = watch_update_order(target.pid(), thread.tid, test_record_layout(), thread.record, 300ms, 5);
  ASSERT_TRUE(again.ok()) << again.error().message();
  EXPECT_GT(again->updates_seen, 0u);
  EXPECT_TRUE(again->conforms()) << describe(*again);
  expect_released(target, thread);
}

void expect_flagged(const std::string& mode, int misalign) {
  auto argv = publisher_argv(mode, misalign);
  argv.insert(argv.end(), {"--threads", "2"});  // two writers: only the watched one traps
  OrderedPublisher target(argv, 2);
  ASSERT_EQ(target.threads().size(), 2u);
  const auto& thread = target.threads()[1];

  auto report = watch_update_order(target.pid(), thread.tid, test_record_layout(), thread.record, 300ms, 10);
  ASSERT_TRUE(report.ok()) << report.error().message();
  ASSERT_FALSE(report->conforms()) << describe(*report);
  ASSERT_FALSE(report->violations.empty());
  const auto& v = report->violations.front();
  if (getenv("SHOW")) std::cerr << describe(*report);
  EXPECT_EQ(v.kind, UpdateOrderViolation::Kind::kChangedWhileValid);
  EXPECT_TRUE(v.before.valid);
  EXPECT_TRUE(v.after.valid);
  EXPECT_NE(v.before.bytes, v.after.bytes);
  EXPECT_FALSE(v.changed_offsets.empty());
  EXPECT_NE(v.after.pc_after_store, 0u);
  EXPECT_NE(v.after.chunks_hit, 0u);
  auto text = describe(v, report->layout);
  EXPECT_NE(text.find(describe_record_bytes(report->layout, v.before.bytes)), std::string::npos) << text;
  EXPECT_NE(text.find(describe_record_bytes(report->layout, v.after.bytes)), std::string::npos) << text;
  EXPECT_NE(text.find("while the valid byte was set"), std::string::npos) << text;  // what was violated, in words
  expect_released(target, thread);
  EXPECT_TRUE(record_keeps_changing(target.pid(), target.threads()[0].record));
}

TEST(UpdateOrderWatch, FieldsWrittenWhileValidAreFlagged) { expect_flagged("fields-while-valid", 0); }
TEST(UpdateOrderWatch, ValidSetBeforeTheIdsIsFlagged) { expect_flagged("valid-early", 3); }

TEST(UpdateOrderWatch, ThreadExitEndsTheWatchWithWhatWasSeen) {
  auto argv = publisher_argv("correct", 0);
  argv.insert(argv.end(), {"--exit-after-traced", "30"});
  OrderedPublisher target(argv, 1);
  ASSERT_FALSE(target.threads().empty());
  const auto& thread = target.threads()[0];
  // The duration only bounds a broken run: the worker exits 30 publishes after it sees the tracer.
  auto report = watch_update_order(target.pid(), thread.tid, test_record_layout(), thread.record, 20s);
  ASSERT_TRUE(report.ok()) << report.error().message();
  EXPECT_TRUE(report->thread_exited);
  EXPECT_EQ(report->ended_because, "thread exited");
  EXPECT_GT(report->updates_seen, 0u);
  EXPECT_TRUE(report->conforms()) << describe(*report);
  EXPECT_TRUE(target.alive()) << "the process (its main thread) should be unaffected";
}

// The target's own signals reach it unchanged (a SIGTRAP it did not get from a
// watchpoint included), and a group-stop keeps the watched thread stopped.
TEST(UpdateOrderWatch, SignalsAreHandedBackAndGroupStopsHonoured) {
  OrderedPublisher target(publisher_argv("correct", 0), 1);
  ASSERT_FALSE(target.threads().empty());
  const auto thread = target.threads()[0];
  const pid_t pid = target.pid();

  std::string helper_failure;
  std::thread helper([&] {
    auto fail = [&](std::string why) { helper_failure = std::move(why); };
    for (auto give_up = std::chrono::steady_clock::now() + 5s; tracecorr::test_support::tracer_of(pid, thread.tid) <= 0;) {
      if (std::chrono::steady_clock::now() >= give_up) return fail("the watch never attached");
      std::this_thread::sleep_for(1ms);
    }
    tgkill(pid, thread.tid, SIGUSR1);
    if (!target.wait_for_output("signal USR1")) return fail("SIGUSR1 did not reach the handler");
    // SIGTRAP does not queue: sent while a watchpoint's SIGTRAP is pending
    // (between the store and its signal-delivery-stop), the kernel merges it
    // into ours and it is gone. Whatever is delivered separately must arrive,
    // so a few sends make that window irrelevant (one in ~10 is merged here).
    bool trapped = false;
    for (int attempt = 0; attempt < 5 && !trapped; ++attempt) {
      tgkill(pid, thread.tid, SIGTRAP);
      trapped = target.wait_for_output("signal TRAP", 1, 1s);
    }
    if (!trapped) return fail("the target's own SIGTRAP did not reach its handler (5 sends)");

    kill(pid, SIGSTOP);
    int status = 0;
    bool stopped = false;
    for (auto give_up = std::chrono::steady_clock::now() + 5s; std::chrono::steady_clock::now() < give_up;) {
      if (waitpid(pid, &status, WUNTRACED | WNOHANG) == pid && WIFSTOPPED(status)) {
        stopped = true;
        break;
      }
      std::this_thread::sleep_for(1ms);
    }
    if (!stopped) return fail("the group-stop never completed");
    LiveProcessMemory memory(pid);
    tracecorr::test_support::TestRecordBytes before{}, after{};
    (void)memory.read(thread.record, before);
    std::this_thread::sleep_for(30ms);  // a resumed writer would publish ~100 times meanwhile
    (void)memory.read(thread.record, after);
    if (before != after) fail("the watched thread ran during the group-stop");
    kill(pid, SIGCONT);
    // The worker publishes under the watch before it is told to exit: each
    // signal above may have come before it got back to its loop (the watch is
    // armed by the time USR1 is handed back, so these stores are watched).
    if (!record_keeps_changing(pid, thread.record)) fail("the worker never published after SIGCONT");
    tgkill(pid, thread.tid, SIGUSR2);  // the worker exits, which ends the watch
  });
  auto report = watch_update_order(pid, thread.tid, test_record_layout(), thread.record, 10s);
  helper.join();
  EXPECT_EQ(helper_failure, "");
  ASSERT_TRUE(report.ok()) << report.error().message();
  EXPECT_EQ(report->ended_because, "thread exited") << describe(*report);
  EXPECT_GE(report->signals_forwarded, 3u);  // USR1, TRAP, STOP, CONT, USR2 (STOP/CONT may coalesce)
  EXPECT_GT(report->updates_seen, 0u) << describe(*report);
  EXPECT_TRUE(report->conforms()) << describe(*report);
  EXPECT_TRUE(target.alive());
}

// Ending a watch interrupts a thread that may have just hit a watchpoint: the
// SIGTRAP of that hit is then still pending and must be swallowed, not left to
// the target (the publisher's SIGTRAP handler prints "signal TRAP" if one leaks;
// a target without a handler would be killed). Many short watches of a busy
// writer make that moment likely.
TEST(UpdateOrderWatch, EndingAWatchNeverLeaksAWatchpointTrapToTheTarget) {
  auto argv = publisher_argv("correct", 0);
  argv.insert(argv.end(), {"--pause-us", "0"});
  OrderedPublisher target(argv, 1);
  ASSERT_FALSE(target.threads().empty());
  const auto& thread = target.threads()[0];
  for (int i = 0; i < 40; ++i) {
    auto report = watch_update_order(target.pid(), thread.tid, test_record_layout(), thread.record, 2ms);
    ASSERT_TRUE(report.ok()) << report.error().message();
  }
  tgkill(target.pid(), thread.tid, SIGUSR1);  // a marker: everything sent before it has been handled
  ASSERT_TRUE(target.wait_for_output("signal USR1"));
  EXPECT_EQ(target.output().find("signal TRAP"), std::string::npos) << "a watchpoint's SIGTRAP reached the target";
  expect_released(target, thread);
}

TEST(UpdateOrderWatch, ErrorsNameWhatAndWhereAndLeaveTheTargetRunning) {
  OrderedPublisher target(publisher_argv("correct", 0), 1);
  ASSERT_FALSE(target.threads().empty());
  const auto& thread = target.threads()[0];

  const pid_t missing_tid = 0x3ffffff;  // above any pid_max
  auto no_thread = watch_update_order(target.pid(), missing_tid, test_record_layout(), thread.record, 100ms, 1);
  ASSERT_FALSE(no_thread.ok());
  EXPECT_NE(no_thread.error().message().find("thread " + std::to_string(missing_tid)), std::string::npos)
      << no_thread.error().message();

  // Unmapped record: fails after the watchpoints were armed, so this is the guard's error path.
  auto unmapped = watch_update_order(target.pid(), thread.tid, test_record_layout(), 0x1000, 100ms, 1);
  ASSERT_FALSE(unmapped.ok());
  EXPECT_NE(unmapped.error().message().find("0x1000"), std::string::npos) << unmapped.error().message();
  EXPECT_NE(unmapped.error().message().find("thread " + std::to_string(thread.tid)), std::string::npos)
      << unmapped.error().message();
  expect_released(target, thread);

  auto kernel_address = watch_update_order(target.pid(), thread.tid, test_record_layout(), 0xffff800000000000, 100ms, 1);
  ASSERT_FALSE(kernel_address.ok());
  EXPECT_NE(kernel_address.error().message().find("not a user-space address"), std::string::npos);
}

// qemu-user performs a guest's stores as host stores at the guest's addresses,
// so host watchpoints on the qemu thread see an arm64 guest's stores.
TEST(UpdateOrderWatch, Arm64GuestUnderQemuUserIsWatchedThroughTheHostThread) {
  if (access(kUpdateOrderTargetArm64.c_str(), X_OK) != 0) GTEST_SKIP() << "no arm64 build of the publisher (no cross compiler)";
  const std::string qemu = "/usr/bin/qemu-aarch64";
  if (access(qemu.c_str(), X_OK) != 0) GTEST_SKIP() << "qemu-aarch64 is not installed";

  for (const std::string mode : {"valid-early", "correct"}) {
    SCOPED_TRACE(mode);
    OrderedPublisher target({qemu, kUpdateOrderTargetArm64, "--mode", mode, "--misalign", "1"}, 1);
    ASSERT_FALSE(target.threads().empty());
    const auto& thread = target.threads()[0];
    auto report = watch_update_order(target.pid(), thread.tid, test_record_layout(), thread.record, 300ms, 10);
    ASSERT_TRUE(report.ok()) << report.error().message();
    EXPECT_GT(report->updates_seen, 0u) << describe(*report);
    EXPECT_EQ(report->conforms(), mode == "correct") << describe(*report);
    EXPECT_NE(report->limits.find("qemu"), std::string::npos) << report->limits;
    expect_released(target, thread);
  }
}

}  // namespace
}  // namespace tracecorr::watch

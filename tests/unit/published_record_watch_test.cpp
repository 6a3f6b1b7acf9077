// The published-record watch (hardware watchpoints on a thread's pointer slot
// and on the record it leads to) on a real pointer-swap publisher of the
// tests' record (tests/unit/data/published_record_target.c): every swap is
// seen, each with the complete record it published and the one it left;
// another thread's stores into the published record are told apart from the
// publisher's; a thread that does not exist is an error naming it. After a
// watch the publisher must run on: untraced, registers clear, still
// publishing, and not killed by a leaked SIGTRAP (it has no handler).
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "forked_child.hpp"
#include "test_record_layout.hpp"
#include "tracecorr/watch/published_record_watch.hpp"
#include "tracecorr/ids.hpp"
#include "watched_thread.hpp"

namespace tracecorr::watch {
namespace {

using namespace std::chrono_literals;
using Cause = PublishedRecordState::Cause;
using tracecorr::test_support::test_record_layout;
using tracecorr::test_support::TestRecordBytes;

const std::string kPublishedRecordTarget = std::string(TRACECORR_TEST_DATA_DIR) + "/published_record_target";

// A launched published_record_target, its publisher thread as it announced itself.
class Publisher {
 public:
  explicit Publisher(std::vector<std::string> argv)
      : child_([argv](test::ForkedChild::Pipes pipes) {
          dup2(pipes.report, STDOUT_FILENO);
          test::ForkedChild::exec(argv);
        }) {
    auto line = child_.read_line();
    long tid = 0;
    if (!line || std::sscanf(line->c_str(), "publisher %ld thread-pointer %" SCNx64 " slot %" SCNx64, &tid,
                             &thread_pointer_, &slot_) != 3) {
      ADD_FAILURE() << "the publisher did not announce itself: " << line.value_or("(no line)");
      return;
    }
    tid_ = static_cast<pid_t>(tid);
  }

  bool announced() const { return tid_ > 0; }
  pid_t pid() const { return child_.pid(); }
  pid_t tid() const { return tid_; }
  std::uint64_t slot() const { return slot_; }

  // Where the watch looks for the slot: the announced one, provided the watch
  // read the publisher's thread pointer.
  SlotOfThread slot_of() const {
    return [this](std::uint64_t thread_pointer) -> Expected<std::uint64_t> {
      if (thread_pointer != thread_pointer_)
        return make_error("thread pointer " + std::to_string(thread_pointer) + " is not the publisher's " +
                          std::to_string(thread_pointer_));
      return slot_;
    };
  }

  // "running", or how it ended (a leaked SIGTRAP kills it).
  std::string fate() {
    int status = 0;
    if (::waitpid(child_.pid(), &status, WNOHANG) == 0) return "running";
    if (WIFSIGNALED(status)) return std::string("killed by ") + strsignal(WTERMSIG(status));
    return "exited with " + std::to_string(WEXITSTATUS(status));
  }

 private:
  test::ForkedChild child_;  // killed and reaped on destruction
  pid_t tid_ = 0;
  std::uint64_t thread_pointer_ = 0, slot_ = 0;
};

std::uint64_t serial_of(const RecordBytes& record) {
  std::uint64_t serial = 0;
  std::memcpy(&serial, record.data() + TC_TEST_RECORD_OWNER_OFFSET, sizeof serial);
  return serial;
}

// The record a publisher completes for `serial`, in hex.
std::string complete_record(std::uint64_t serial) {
  TestRecordBytes bytes{};
  tc_test_record_fill(bytes.data(), serial);
  return to_hex(bytes);
}

std::string describe(const PublishedRecordState& s) {
  char pointer[24];
  std::snprintf(pointer, sizeof pointer, "%#" PRIx64, s.pointer);
  std::string text = std::string(to_string(s.cause)) + " pointer " + pointer;
  if (s.record) text += " serial " + std::to_string(serial_of(*s.record)) + " record " + to_hex(*s.record);
  if (s.read_error) text += " (" + s.read_error->message() + ")";
  return text;
}

// Whether `state`, coming after `previous` (nullptr: the first), is what a
// pointer-swap publisher of complete records leaves: the record its slot leads
// to complete, and each slot store a move to the next serial.
testing::AssertionResult published_whole(const PublishedRecordState& state, const PublishedRecordState* previous) {
  auto broken = [&](const std::string& why) { return testing::AssertionFailure() << describe(state) << ": " << why; };
  if (!state.record) return broken("no record read");
  const std::uint64_t serial = serial_of(*state.record);
  if (serial == 0 || to_hex(*state.record) != complete_record(serial))
    return broken("not a complete record (complete would be " + complete_record(serial) + ")");
  // The publisher stores only into its slot and its spare buffer, which no register watches.
  if (state.cause == Cause::kRecordStore) return broken("a store into the published record");
  if (state.cause != Cause::kSlotStore) return testing::AssertionSuccess();
  if (state.pc_after_store == 0) return broken("no pc after the store");
  if (previous == nullptr) return broken("a slot store first, before the watch began");
  // Each store moves the pointer to the next serial: no swap went unseen.
  if (state.pointer == previous->pointer) return broken("the pointer did not move");
  if (!previous->record || serial != serial_of(*previous->record) + 1)
    return broken("not the serial after the previous state's: " + describe(*previous));
  // The record left behind, as it was when it stopped being reachable.
  if (!state.left_record) return broken("no left record");
  if (to_hex(*state.left_record) != to_hex(*previous->record))
    return broken("left record " + to_hex(*state.left_record) + " is not the previous state's");
  return testing::AssertionSuccess();
}

// After the watch the publisher runs on: released, still swapping its
// pointer, alive.
void expect_runs_on(Publisher& target) {
  tracecorr::test_support::expect_released(target.pid(), target.tid());
  EXPECT_TRUE(tracecorr::test_support::memory_keeps_changing<sizeof(std::uint64_t)>(target.pid(), target.slot()))
      << "the publisher stopped publishing";
  EXPECT_EQ(target.fate(), "running");
}

// Watches the publisher in 300 ms windows until `enough` holds for a
// window's report, or 20 s pass: on a loaded machine one window may give the
// publisher (or its other writer) too little CPU to show anything. The last
// report is returned either way.
Expected<PublishedRecordWatchReport> watch_until(
    const Publisher& target, const std::function<bool(const PublishedRecordWatchReport&)>& enough) {
  for (const auto give_up = std::chrono::steady_clock::now() + 20s;;) {
    auto report =
        watch_published_record(target.pid(), target.tid(), test_record_layout(), target.slot_of(), 300ms, 5ms);
    if (!report || enough(*report) || std::chrono::steady_clock::now() >= give_up) return report;
  }
}

std::size_t count_of(const PublishedRecordWatchReport& report, Cause cause) {
  return static_cast<std::size_t>(
      std::count_if(report.states.begin(), report.states.end(), [&](const auto& s) { return s.cause == cause; }));
}

TEST(PublishedRecordWatch, SeesEveryPointerSwapWithTheCompleteRecordItPublished) {
  Publisher target({kPublishedRecordTarget, "--pause-us", "200"});
  ASSERT_TRUE(target.announced());
  auto report = watch_until(target, [](const auto& r) { return count_of(r, Cause::kSlotStore) >= 2; });
  ASSERT_TRUE(report.ok()) << report.error().message();
  EXPECT_EQ(report->slot_address, target.slot());
  EXPECT_GT(report->stores_seen, 0u);
  EXPECT_EQ(report->other_writer_changes, 0u);
  ASSERT_FALSE(report->states.empty());
  EXPECT_STREQ(to_string(report->states.front().cause), "watch-began");

  const std::size_t slot_stores = count_of(*report, Cause::kSlotStore);
  EXPECT_GE(slot_stores, 2u);
  EXPECT_EQ(slot_stores, report->stores_seen);

  // The first state that breaks a rule tells; the rest would repeat it.
  const PublishedRecordState* previous = nullptr;
  for (const auto& state : report->states) {
    auto whole = published_whole(state, previous);
    EXPECT_TRUE(whole);
    if (!whole) break;
    previous = &state;
  }
  expect_runs_on(target);
}

TEST(PublishedRecordWatch, AnotherThreadsStoresIntoThePublishedRecordAreAnotherWriters) {
  // The publisher pauses longer than the poll interval, so the watch reads
  // the record while it runs; the other writer stores every millisecond.
  Publisher target({kPublishedRecordTarget, "--pause-us", "20000", "--other-writer"});
  ASSERT_TRUE(target.announced());
  auto report = watch_until(
      target, [](const auto& r) { return r.other_writer_changes > 0 && count_of(r, Cause::kSlotStore) > 0; });
  ASSERT_TRUE(report.ok()) << report.error().message();
  EXPECT_GT(report->other_writer_changes, 0u);
  std::size_t other_writer_states = 0;
  for (std::size_t i = 1; i < report->states.size(); ++i) {
    const auto& state = report->states[i];
    if (state.cause != Cause::kOtherWriter) continue;
    ++other_writer_states;
    SCOPED_TRACE(describe(state));
    const auto& before = report->states[i - 1];
    EXPECT_EQ(state.pc_after_store, 0u);
    EXPECT_EQ(state.pointer, before.pointer) << "another writer's store does not move the pointer";
    ASSERT_TRUE(state.record.has_value());
    ASSERT_TRUE(before.record.has_value());
    EXPECT_NE((*state.record)[TC_TEST_RECORD_CONTEXT_OFFSET], (*before.record)[TC_TEST_RECORD_CONTEXT_OFFSET]);
  }
  EXPECT_EQ(other_writer_states, report->other_writer_changes);
  // The publisher's own swaps are still its own.
  EXPECT_GT(count_of(*report, Cause::kSlotStore), 0u);
  expect_runs_on(target);
}

// A caller watching more threads than it has watches ends one early: asked
// at each poll with the report so far, a "no" ends the watch, which releases
// the thread as on every other way out.
TEST(PublishedRecordWatch, TheCallerCanEndAWatchEarly) {
  Publisher target({kPublishedRecordTarget, "--pause-us", "200"});
  ASSERT_TRUE(target.announced());
  std::size_t asked = 0;
  const auto began = std::chrono::steady_clock::now();
  auto report = watch_published_record(target.pid(), target.tid(), test_record_layout(), target.slot_of(), 20s, 5ms,
                                       [&](const PublishedRecordWatchReport& so_far) {
                                         EXPECT_FALSE(so_far.states.empty());
                                         return ++asked < 3;
                                       });
  ASSERT_TRUE(report.ok()) << report.error().message();
  EXPECT_EQ(asked, 3u);
  EXPECT_EQ(report->ended_because, "the caller ended it");
  EXPECT_LT(std::chrono::steady_clock::now() - began, 10s);
  expect_runs_on(target);
}

TEST(PublishedRecordWatch, AThreadThatDoesNotExistIsAnErrorNamingIt) {
  Publisher target({kPublishedRecordTarget});
  ASSERT_TRUE(target.announced());
  const pid_t missing_tid = 0x3ffffff;  // above any pid_max
  bool slot_asked = false;
  auto report = watch_published_record(target.pid(), missing_tid, test_record_layout(),
                                       [&](std::uint64_t) -> Expected<std::uint64_t> {
                                         slot_asked = true;
                                         return target.slot();
                                       },
                                       100ms);
  ASSERT_FALSE(report.ok());
  EXPECT_NE(report.error().message().find("thread " + std::to_string(missing_tid)), std::string::npos)
      << report.error().message();
  EXPECT_FALSE(slot_asked);
  expect_runs_on(target);
}

}  // namespace
}  // namespace tracecorr::watch

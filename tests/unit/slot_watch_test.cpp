// The TLS slot watch (hardware watchpoints on TLS slots): a publisher of the
// tests' own record (tests/unit/data/slot_watch_target.c,
// tests/support/test_record.h) followed from before its exec, in the right
// order and with the record set up just after its pointer was set.
// After the watch the target must run on: every thread untraced, its own
// signals delivered.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "tracecorr/watch/slot_watch.hpp"
#include "tracecorr/conform/target.hpp"
#include "test_record_layout.hpp"
#include "tracecorr/procfs.hpp"

namespace tracecorr::watch {
namespace {

using namespace std::chrono_literals;

const std::string kSlotWatchTarget = std::string(TRACECORR_TEST_DATA_DIR) + "/slot_watch_target";
constexpr int kThreads = 3;

// The target writes its slot's offset to a file once it runs; until then the
// slot cannot be located, as before an agent library is loaded.
Expected<std::uint64_t> locate_from_file(const std::string& file, std::uint64_t thread_pointer) {
  std::ifstream in(file);
  long offset = 0;
  if (!(in >> offset)) return make_error("its process had not written the offset yet");
  return thread_pointer + static_cast<std::uint64_t>(offset);
}

std::size_t count_of(const std::string& text, const std::string& needle) {
  std::size_t n = 0;
  for (auto at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

// Every thread of `pid` is untraced (TracerPid 0).
bool untraced(pid_t pid) {
  for (int tid : numbered_entries("/proc/" + std::to_string(pid) + "/task")) {
    std::ifstream in("/proc/" + std::to_string(pid) + "/task/" + std::to_string(tid) + "/status");
    for (std::string line; std::getline(in, line);)
      if (line.rfind("TracerPid:", 0) == 0 && std::atoi(line.c_str() + 10) != 0) return false;
  }
  return true;
}

struct Watched {
  SlotWatchReport report;
  std::string output;
  bool alive_after = false;
  bool untraced_after = false;
};

// `script`: launched through `/bin/sh -c "<script> exec TARGET ..."` (a
// launch script's commands before its exec); empty: the target itself.
Watched watch(const std::string& order, const std::string& script = "") {
  auto offset_file = (std::filesystem::temp_directory_path() / ("tc-slot-" + std::to_string(::getpid()) + "-" + order)).string();
  std::filesystem::remove(offset_file);
  std::unique_ptr<SlotWatch> slot_watch;
  conform::LaunchSpec spec;
  spec.argv = {kSlotWatchTarget, offset_file, order, std::to_string(kThreads)};
  if (!script.empty())
    spec.argv = {"/bin/sh", "-c", script + " exec \"$0\" \"$@\"", kSlotWatchTarget, offset_file, order, std::to_string(kThreads)};
  spec.before_exec = [&](pid_t pid) {
    auto w = SlotWatch::follow_launch(pid, tracecorr::test_support::test_record_layout(),
                                      [&](pid_t, std::uint64_t tp) { return locate_from_file(offset_file, tp); });
    if (w) slot_watch = std::move(*w);
    else ADD_FAILURE() << w.error().message();
  };
  auto target = conform::Target::launch(spec);
  Watched out;
  if (!target || !slot_watch) {
    ADD_FAILURE() << "launch failed";
    return out;
  }
  out.report = slot_watch->finish(std::chrono::steady_clock::now() + 10s);
  for (auto give_up = std::chrono::steady_clock::now() + 10s;
       count_of((*target)->output(), "published") < kThreads && std::chrono::steady_clock::now() < give_up;)
    std::this_thread::sleep_for(10ms);
  out.output = (*target)->output();
  out.alive_after = (*target)->alive();
  out.untraced_after = untraced((*target)->pid());
  std::filesystem::remove(offset_file);
  return out;
}

TEST(SlotWatch, SeesEachPublicationWithTheRecordAsItWasAtTheStore) {
  auto w = watch("ordered");
  EXPECT_EQ(w.report.publications_seen, static_cast<std::size_t>(kThreads)) << w.report.describe();
  for (const auto& p : w.report.publications) {
    ASSERT_TRUE(p.bytes) << p.read_error->message();
    ASSERT_EQ(p.bytes->size(), std::size_t{TC_TEST_RECORD_SIZE});
    EXPECT_EQ((*p.bytes)[TC_TEST_RECORD_VERSION_OFFSET], TC_TEST_RECORD_VERSION)
        << "thread " << p.tid << ": the record was set up before its pointer was set";
    EXPECT_NE(p.record_pointer, 0u);
  }
  // Every worker was armed before it ran, and so was the main thread (late,
  // once its slot could be located).
  EXPECT_GE(w.report.threads_armed, static_cast<std::size_t>(kThreads + 1)) << w.report.describe();
  EXPECT_FALSE(w.report.error) << w.report.describe();
  // The target runs on untraced, and got its own signals.
  EXPECT_TRUE(w.alive_after);
  EXPECT_TRUE(w.untraced_after);
  EXPECT_EQ(count_of(w.output, "usr1 1"), static_cast<std::size_t>(kThreads)) << w.output;
  EXPECT_GE(w.report.signals_forwarded, static_cast<std::size_t>(kThreads));
}

TEST(SlotWatch, CatchesARecordFilledInJustAfterItsPointerWasSet) {
  auto w = watch("filled-after");
  ASSERT_EQ(w.report.publications_seen, static_cast<std::size_t>(kThreads)) << w.report.describe();
  for (const auto& p : w.report.publications) {
    ASSERT_TRUE(p.bytes);
    EXPECT_EQ((*p.bytes)[TC_TEST_RECORD_VERSION_OFFSET], 0)
        << "thread " << p.tid << ": the store was seen before the record was set up";
  }
  EXPECT_TRUE(w.alive_after);
  EXPECT_TRUE(w.untraced_after);
  EXPECT_EQ(count_of(w.output, "usr1 1"), static_cast<std::size_t>(kThreads)) << w.output;
}

// A launch script runs children before it execs the agent (`/bin/true`, the
// fork of `HERE=$(cd "$(dirname "$0")" && pwd)`, a subshell): each is
// followed, and its exit taken, so that the shell waiting for it goes on.
TEST(SlotWatch, FollowsALaunchScriptWhoseChildrenExitBeforeItsExec) {
  auto w = watch("ordered", "/bin/true; HERE=$(cd \"$(dirname \"$0\")\" && pwd); ( /bin/true ); cd \"$HERE\" &&");
  EXPECT_EQ(w.report.publications_seen, static_cast<std::size_t>(kThreads)) << w.report.describe();
  EXPECT_GE(w.report.threads_started, static_cast<std::size_t>(kThreads + 4)) << w.report.describe();
  EXPECT_FALSE(w.report.error) << w.report.describe();
  EXPECT_TRUE(w.alive_after);
  EXPECT_TRUE(w.untraced_after);
  EXPECT_EQ(count_of(w.output, "usr1 1"), static_cast<std::size_t>(kThreads)) << w.output;
}

// A watch ended while its target is still starting threads (a session that
// follows the launch only until discovery, for its execs): every task the
// watch's thread had attached, those started at clones it had not collected
// yet included, is let go; none is killed with the watch's thread
// (PTRACE_O_EXITKILL).
TEST(SlotWatch, EndedWhileThreadsStartLeavesTheTargetRunning) {
  constexpr int kManyThreads = 200;
  for (int attempt = 0; attempt < 5; ++attempt) {
    auto offset_file = (std::filesystem::temp_directory_path() /
                        ("tc-slot-early-" + std::to_string(::getpid()) + "-" + std::to_string(attempt)))
                           .string();
    std::unique_ptr<SlotWatch> slot_watch;
    conform::LaunchSpec spec;
    spec.argv = {kSlotWatchTarget, offset_file, "ordered", std::to_string(kManyThreads)};
    spec.before_exec = [&](pid_t pid) {
      auto w = SlotWatch::follow_launch(pid, tracecorr::test_support::test_record_layout(), [](pid_t, std::uint64_t) {
        return Expected<std::uint64_t>(make_error("following execs only"));
      });
      if (w) slot_watch = std::move(*w);
    };
    auto target = conform::Target::launch(spec);
    ASSERT_TRUE(target && slot_watch);
    // End the watch as soon as the threads begin.
    for (auto give_up = std::chrono::steady_clock::now() + 10s;
         !std::filesystem::exists(offset_file) && std::chrono::steady_clock::now() < give_up;)
      std::this_thread::sleep_for(100us);
    auto report = slot_watch->finish(std::chrono::steady_clock::now());
    slot_watch.reset();
    for (auto until = std::chrono::steady_clock::now() + 3s;
         (*target)->alive() && std::chrono::steady_clock::now() < until;)
      std::this_thread::sleep_for(20ms);
    EXPECT_TRUE((*target)->alive()) << "attempt " << attempt << ": the target died after the watch ended ("
                                    << report.describe() << "): " << (*target)->exit_description().value_or("");
    EXPECT_TRUE(untraced((*target)->pid())) << "attempt " << attempt;
    std::filesystem::remove(offset_file);
  }
}

}  // namespace
}  // namespace tracecorr::watch

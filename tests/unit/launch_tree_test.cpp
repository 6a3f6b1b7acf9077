// A launched tree is held whatever its processes do (tree_hold.hpp): a double
// fork into a new session, a process group of its own, a chain of forks deeper
// than a walk of parent links follows. Target::processes() lists them all,
// stop() ends them all and says what it had to kill, and nothing is left
// running or in a cgroup afterwards. The same with the fallback hold
// (TRACECORR_TREE_HOLD=subreaper), where no cgroup can be made.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <thread>

#include "tracecorr/conform/discovery_wait.hpp"
#include "tracecorr/conform/target.hpp"
#include "tracecorr/maps.hpp"
#include "tracecorr/procfs.hpp"

namespace tracecorr::conform {
namespace {

using namespace std::chrono_literals;

// Live processes whose command line holds `tag` (the escapes are `sleep`s
// renamed by `exec -a`, so they can be counted from outside).
std::set<pid_t> tagged(const std::string& tag) {
  std::set<pid_t> out;
  for (int pid : numbered_entries("/proc")) {
    // A process may end between the listing and the read (ESRCH): then it is not live.
    auto cmdline = read_proc_text(pid, "cmdline");
    auto st = read_process_stat(pid);
    if (cmdline && cmdline->find(tag) != std::string::npos && st && st->state != 'Z') out.insert(pid);
  }
  return out;
}

std::string unique_tag(const std::string& what) {
  return "tc-escape-" + what + "-" + std::to_string(::getpid()) + "-" +
         std::to_string(std::chrono::steady_clock::now().time_since_epoch().count());
}

// `script` runs under bash with $TAG set; each escape runs `exec -a "$TAG" sleep 300`.
std::unique_ptr<Target> launch(const std::string& script, const std::string& tag) {
  LaunchSpec spec;
  spec.argv = {"/bin/bash", "-c", script};
  spec.env = {{"TAG", tag}};
  auto t = Target::launch(spec);
  EXPECT_TRUE(t.ok()) << (t.ok() ? "" : t.error().message());
  return t.ok() ? std::move(*t) : nullptr;
}

// Waits until `n` tagged processes run (the script forks them in the background).
bool wait_for_tagged(const std::string& tag, std::size_t n) {
  for (auto until = std::chrono::steady_clock::now() + 20s; std::chrono::steady_clock::now() < until;) {
    if (tagged(tag).size() >= n) return true;
    std::this_thread::sleep_for(20ms);
  }
  return false;
}

bool gone(const std::string& tag) {
  for (auto until = std::chrono::steady_clock::now() + 5s; std::chrono::steady_clock::now() < until;) {
    if (tagged(tag).empty()) return true;  // init reaps orphans asynchronously
    std::this_thread::sleep_for(20ms);
  }
  return false;
}

const char* kSetsidEscape = R"(( setsid bash -c 'exec -a "$TAG" sleep 300' & ) ; exec sleep 300)";
// A new process group without a new session (Python's os.setpgid, as a daemon helper does).
const char* kGroupEscape =
    R"(( /usr/bin/python3 -c 'import os, sys; os.setpgid(0, 0); os.execvp("bash", ["bash", "-c", "exec -a \"$TAG\" sleep 300"])' & ) ; exec sleep 300)";
// 70 levels of forks, each parent waiting; the deepest escapes into a new session.
const char* kDeepChain = R"(
chain() { if [ "$1" -gt 0 ]; then chain $(( $1 - 1 )) & wait; else setsid bash -c 'exec -a "$TAG" sleep 300'; fi; }
chain 70 & exec sleep 300)";

class LaunchTree : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    const char* hold = GetParam();
    if (*hold) ::setenv("TRACECORR_TREE_HOLD", hold, 1);
    else ::unsetenv("TRACECORR_TREE_HOLD");
  }
  void TearDown() override { ::unsetenv("TRACECORR_TREE_HOLD"); }
};

void expect_held_and_ended(const char* script, const std::string& what, bool deep) {
  const std::string tag = unique_tag(what);
  auto target = launch(script, tag);
  ASSERT_TRUE(target);
  ASSERT_TRUE(wait_for_tagged(tag, 1)) << what << ": the escape never started";
  const auto escaped = tagged(tag);
  std::set<pid_t> members;
  for (const auto& p : target->processes()) members.insert(p.pid);
  for (pid_t pid : escaped) EXPECT_TRUE(members.count(pid)) << what << ": pid " << pid << " not in the launched tree";
  if (deep) EXPECT_GE(members.size(), 70u) << what;
  target->stop(500ms);
  EXPECT_TRUE(gone(tag)) << what << ": still running after stop(): " << tagged(tag).size();
  ASSERT_TRUE(target->stopped_tree());
  const auto& stopped = *target->stopped_tree();
  EXPECT_GE(stopped.processes, escaped.size() + 1) << stopped.describe();
  EXPECT_FALSE(stopped.left_group.empty()) << stopped.describe();
  EXPECT_NE(stopped.describe().find("had left the launched process group"), std::string::npos) << stopped.describe();
}

TEST_P(LaunchTree, HoldsADoubleForkIntoANewSession) { expect_held_and_ended(kSetsidEscape, "setsid", false); }
TEST_P(LaunchTree, HoldsAProcessGroupOfItsOwn) { expect_held_and_ended(kGroupEscape, "setpgid", false); }
TEST_P(LaunchTree, HoldsAChainSeventyDeep) { expect_held_and_ended(kDeepChain, "chain", true); }

TEST_P(LaunchTree, NamesWhatHadToBeKilled) {
  const std::string tag = unique_tag("term");
  // Ignores SIGTERM: only SIGKILL ends it.
  auto target = launch(R"(( setsid bash -c 'trap "" TERM; exec -a "$TAG" sleep 300' & ) ; exec sleep 300)", tag);
  ASSERT_TRUE(target);
  ASSERT_TRUE(wait_for_tagged(tag, 1));
  const pid_t stubborn = *tagged(tag).begin();
  auto how = target->stop(300ms);
  EXPECT_TRUE(gone(tag));
  ASSERT_TRUE(target->stopped_tree());
  const auto& killed = target->stopped_tree()->killed;
  ASSERT_EQ(killed.size(), 1u) << target->stopped_tree()->describe();
  EXPECT_EQ(killed.front().pid, stubborn);
  EXPECT_NE(target->stopped_tree()->describe().find("killed: pid " + std::to_string(stubborn)), std::string::npos)
      << target->stopped_tree()->describe();
  EXPECT_EQ(target->stopped_tree()->survivors, 0u);
}

TEST_P(LaunchTree, FollowsAProcessThatLeavesTheLaunchedOneBehind) {
  // `exec setsid AGENT`: setsid forks (the launched process leads its group),
  // the child makes a new session and the launched process exits at once.
  const std::string tag = unique_tag("exec-setsid");
  auto target = launch(R"(exec setsid bash -c 'exec -a "$TAG" sleep 300')", tag);
  ASSERT_TRUE(target);
  ASSERT_TRUE(wait_for_tagged(tag, 1));
  const pid_t agent = *tagged(tag).begin();
  if (std::string(GetParam()).empty()) {  // the cgroup holds it whatever the order; the fallback needs to have seen it
    std::this_thread::sleep_for(200ms);
    bool listed = false;
    for (const auto& p : target->processes()) listed = listed || p.pid == agent;
    EXPECT_TRUE(listed) << "the process setsid started is not in the tree";
  }
  target->stop(500ms);
  EXPECT_TRUE(gone(tag));
}

TEST(LaunchTreeHold, CgroupIsMadeBelowOurOwnAndRemovedAfterTheStop) {
  ::unsetenv("TRACECORR_TREE_HOLD");
  const std::string tag = unique_tag("cgroup");
  auto target = launch(kSetsidEscape, tag);
  ASSERT_TRUE(target);
  const std::string hold = target->hold_description();
  if (hold.rfind("cgroup ", 0) != 0) GTEST_SKIP() << "no cgroup v2 here: " << hold;
  const std::string dir = hold.substr(7);
  EXPECT_TRUE(std::filesystem::is_directory(dir)) << dir;
  ASSERT_TRUE(wait_for_tagged(tag, 1));
  target->stop(500ms);
  EXPECT_TRUE(gone(tag));
  EXPECT_FALSE(std::filesystem::exists(dir)) << dir << " was left behind";
}

INSTANTIATE_TEST_SUITE_P(Holds, LaunchTree, ::testing::Values("", "subreaper"),
                         [](const auto& info) { return std::string(*info.param ? "Subreaper" : "Cgroup"); });

// ---- discovery's wait, by the target's progress -----------------------------

DiscoveryWait wait_on(pid_t pid, DiscoveryLimits limits) {
  return DiscoveryWait([pid] { return kill(pid, 0) == 0 ? std::vector<pid_t>{pid} : std::vector<pid_t>{}; }, limits);
}

DiscoveryWait::Ended wait_out(DiscoveryWait& w) {
  while (!w.over()) std::this_thread::sleep_for(10ms);
  return w.ended();
}

struct Child {
  std::unique_ptr<Target> target;
  explicit Child(std::vector<std::string> argv) {
    LaunchSpec spec;
    spec.argv = std::move(argv);
    auto t = Target::launch(spec);
    if (t) target = std::move(*t);
  }
  pid_t pid() const { return target->launched_pid(); }
};

TEST(DiscoveryWait, EndsOnATargetThatSleeps) {
  Child sleeper({"sleep", "30"});
  ASSERT_TRUE(sleeper.target);
  DiscoveryLimits limits{std::chrono::milliseconds(60000), std::chrono::milliseconds(500), std::chrono::milliseconds(60000)};
  auto w = wait_on(sleeper.pid(), limits);
  EXPECT_EQ(wait_out(w), DiscoveryWait::Ended::kIdle) << w.figures();
  EXPECT_LT(w.progress().wall_ms, 20000) << w.figures();
  EXPECT_FALSE(w.starved());
}

TEST(DiscoveryWait, EndsOnTheCpuTimeATargetRan) {
  Child burner({"/bin/sh", "-c", "while :; do :; done"});
  ASSERT_TRUE(burner.target);
  DiscoveryLimits limits{std::chrono::milliseconds(400), std::chrono::milliseconds(60000), std::chrono::milliseconds(60000)};
  auto w = wait_on(burner.pid(), limits);
  EXPECT_EQ(wait_out(w), DiscoveryWait::Ended::kCpu) << w.figures();
  EXPECT_GE(w.progress().cpu_ms, 400) << w.figures();
}

TEST(DiscoveryWait, EndsWhenTheTreeIsGone) {
  Child quick({"/bin/true"});
  ASSERT_TRUE(quick.target);
  DiscoveryLimits limits;
  auto w = wait_on(quick.pid(), limits);
  quick.target->stop(100ms);
  EXPECT_EQ(wait_out(w), DiscoveryWait::Ended::kTreeGone) << w.figures();
}

// A target that wants a CPU and seldom gets one is not idle: the wait goes on
// to its ceiling, and there the figures say it was starved (nothing proven).
TEST(DiscoveryWait, ACeilingReachedWhileStarvedProvesNothing) {
  const unsigned cpu = 0;
  const std::string pin = std::to_string(cpu);
  Child rival1({"taskset", "-c", pin, "/bin/sh", "-c", "while :; do :; done"});
  Child rival2({"taskset", "-c", pin, "/bin/sh", "-c", "while :; do :; done"});
  Child rival3({"taskset", "-c", pin, "/bin/sh", "-c", "while :; do :; done"});
  Child starved({"taskset", "-c", pin, "nice", "-n", "19", "/bin/sh", "-c", "while :; do :; done"});
  ASSERT_TRUE(rival1.target && rival2.target && rival3.target && starved.target);
  std::this_thread::sleep_for(200ms);  // taskset and nice have exec'd the loop
  DiscoveryLimits limits{std::chrono::milliseconds(60000), std::chrono::milliseconds(60000), std::chrono::milliseconds(1500)};
  auto w = wait_on(starved.pid(), limits);
  EXPECT_EQ(wait_out(w), DiscoveryWait::Ended::kCeiling) << w.figures();
  EXPECT_TRUE(w.starved()) << w.figures();
  EXPECT_NE(w.figures().find("starved"), std::string::npos) << w.figures();
  EXPECT_GT(w.progress().run_queue_ms + w.progress().held_up_ms, w.progress().cpu_ms) << w.figures();
  // Waiting for a CPU is no idleness (a thread shows its run-queue wait only once it gets one).
  EXPECT_LT(w.progress().idle_ms, 500) << w.figures();
}

// An exec (a launch script reaching its agent) is progress: the idle count starts again.
TEST(DiscoveryWait, AnExecStartsTheIdleCountAgain) {
  Child script({"/bin/sh", "-c", "sleep 0.4; exec sleep 30"});
  ASSERT_TRUE(script.target);
  DiscoveryLimits limits{std::chrono::milliseconds(60000), std::chrono::milliseconds(600), std::chrono::milliseconds(60000)};
  DiscoveryWait w([t = script.target.get()] {
    std::vector<pid_t> pids;
    for (const auto& p : t->processes()) pids.push_back(p.pid);
    return pids;
  }, limits);
  EXPECT_EQ(wait_out(w), DiscoveryWait::Ended::kIdle) << w.figures();
  EXPECT_GE(w.progress().execs, 1u) << w.figures();
  EXPECT_GE(w.progress().wall_ms, 900) << w.figures();
}

}  // namespace
}  // namespace tracecorr::conform

// The agent that stays is judged, not a run of its program before it
// (run_after_stop.hpp, Target::judge's pass-over). Launch shapes in bash,
// with `sleep` as the program: a judged process stopped alone (SIGTERM) is
// followed by a run at another place (a pre-flight run that was still running
// when its session ended), by a restart at the same place (a supervisor's
// loop), or by nothing (a script that does not exec); a process passed over
// keeps anything after it from being judged until it has exited by itself.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>

#include "tracecorr/conform/run_after_stop.hpp"
#include "tracecorr/conform/target.hpp"

namespace tracecorr::conform {
namespace {

using namespace std::chrono_literals;

std::unique_ptr<Target> launch(const std::string& script) {
  LaunchSpec spec;
  spec.argv = {"/bin/bash", "-c", script};
  auto t = Target::launch(spec);
  EXPECT_TRUE(t.ok()) << (t.ok() ? "" : t.error().message());
  return t.ok() ? std::move(*t) : nullptr;
}

// The first process of the tree running `sleep` at `depth` (within 10 s).
std::optional<TreeProcess> sleep_at(const Target& target, int depth) {
  for (auto until = std::chrono::steady_clock::now() + 10s; std::chrono::steady_clock::now() < until;) {
    for (const auto& p : target.processes())
      if (p.depth == depth && p.comm == "sleep") return p;
    std::this_thread::sleep_for(10ms);
  }
  return std::nullopt;
}

// Short bounds: these trees go on (or end) at once, and never publish anything.
const DiscoveryLimits kLimits{2000ms, 2000ms, 20000ms};

// Judges the `sleep` at `depth`, stops it alone, and watches what the tree does.
RunAfterStop stop_judged_and_watch(Target& target, int depth) {
  auto judged = sleep_at(target, depth);
  EXPECT_TRUE(judged) << "no sleep at depth " << depth;
  if (!judged) return {};
  EXPECT_TRUE(target.judge(*judged, "the test's choice"));
  const auto before = images_of(target);
  EXPECT_TRUE(target.terminate_judged(2000ms));
  return watch_run_after_stop(target, before, nullptr, kLimits, first_look_after_stop(kLimits));
}

TEST(RunAfterStop, ARunBeforeTheAgentIsFollowedByTheProgramElsewhere) {
  auto target = launch("sleep 300; exec sleep 301");
  ASSERT_TRUE(target);
  auto seen = stop_judged_and_watch(*target, 1);
  ASSERT_TRUE(seen.run) << seen.describe();
  EXPECT_EQ(seen.run->pid, target->launched_pid()) << seen.describe();  // the shell exec'd it
  EXPECT_FALSE(seen.restart) << seen.describe();
  EXPECT_EQ(seen.signature, "depth 0: sleep 301");
  target->stop(500ms);
}

TEST(RunAfterStop, ARestartAtTheSamePlaceIsNoRunBeforeTheAgent) {
  auto target = launch("while :; do sleep 300; done");
  ASSERT_TRUE(target);
  auto seen = stop_judged_and_watch(*target, 1);
  ASSERT_TRUE(seen.run) << seen.describe();
  EXPECT_TRUE(seen.restart) << seen.describe();
  target->stop(500ms);
}

TEST(RunAfterStop, NothingFollowsTheAgentOfAScriptThatDoesNotExec) {
  auto target = launch("sleep 300; /bin/true");
  ASSERT_TRUE(target);
  const auto began = std::chrono::steady_clock::now();
  auto seen = stop_judged_and_watch(*target, 1);
  EXPECT_FALSE(seen.run) << seen.describe();
  EXPECT_NE(seen.figures.find("the tree exited"), std::string::npos) << seen.figures;
  EXPECT_LT(std::chrono::steady_clock::now() - began, 5s) << seen.figures;  // no wait beyond the tree's end
  target->stop(500ms);
}

// A program that is not the judged one is no run after it, whatever the tree does.
TEST(RunAfterStop, AnotherProgramAfterTheAgentIsNone) {
  auto target = launch("sleep 300; exec tail -f /dev/null");
  ASSERT_TRUE(target);
  auto seen = stop_judged_and_watch(*target, 1);
  EXPECT_FALSE(seen.run) << seen.describe();
  EXPECT_NE(seen.figures.find("idle"), std::string::npos) << seen.figures;
  target->stop(500ms);
}

TEST(PassOver, NothingAfterARunPassedOverIsJudgedUntilItExitsByItself) {
  auto target = launch("sleep 1.5; exec sleep 300");
  ASSERT_TRUE(target);
  target->pass_over({PassOver{"depth 1: sleep 1.5", "seen in the test"}});
  auto first = sleep_at(*target, 1);
  ASSERT_TRUE(first);
  EXPECT_FALSE(target->judge(*first, "the first run"));
  EXPECT_NE(target->passed_over_running().find("pid " + std::to_string(first->pid)), std::string::npos);
  // While it runs, the launched process (bash, at depth 0) is not judged either.
  const TreeProcess launched{target->launched_pid(), 0, 0, "bash", true};
  EXPECT_FALSE(target->judge(launched, "the shell"));
  auto stays = sleep_at(*target, 0);  // once the first run has exited by itself, the shell execs
  ASSERT_TRUE(stays);
  EXPECT_EQ(target->passed_over_running(), "");
  ASSERT_TRUE(target->judge(*stays, "the agent that stays"));
  EXPECT_EQ(target->pid(), target->launched_pid());
  EXPECT_NE(target->judged_reason().find("passed over pid " + std::to_string(first->pid)), std::string::npos)
      << target->judged_reason();
  EXPECT_NE(target->judged_reason().find("exited on its own: seen in the test"), std::string::npos)
      << target->judged_reason();
  target->stop(500ms);
}

}  // namespace
}  // namespace tracecorr::conform

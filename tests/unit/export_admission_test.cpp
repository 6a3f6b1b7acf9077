// ExportAdmission: which process of the judged tree exported, and whether its
// spans are the judged process's (a run of the agent before the one that
// stays exports with the agent's settings, as a child of the shell whose pid
// the agent takes by exec). Real processes and loopback connections: the
// admission finds each peer's socket by sock_diag and its holder in /proc.
#include "tracecorr/conform/export_admission.hpp"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>

#include "tracecorr/conform/target.hpp"
#include "tracecorr/fd.hpp"

namespace tracecorr::conform {
namespace {

struct Listener {
  UniqueFd fd;
  std::uint16_t port = 0;
  Listener() : fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::bind(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    EXPECT_EQ(::listen(fd.get(), 8), 0);
    socklen_t size = sizeof a;
    ::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&a), &size);
    port = ntohs(a.sin_port);
  }
  // The next connection's verdict, as the receiver would ask it.
  otlp::PeerVerdict check_next(ExportAdmission& admission) {
    UniqueFd conn(::accept4(fd.get(), nullptr, nullptr, SOCK_CLOEXEC));
    sockaddr_storage local{}, peer{};
    socklen_t ls = sizeof local, ps = sizeof peer;
    ::getsockname(conn.get(), reinterpret_cast<sockaddr*>(&local), &ls);
    ::getpeername(conn.get(), reinterpret_cast<sockaddr*>(&peer), &ps);
    return admission.check(local, peer);
  }
};

// bash: a subshell (the "pre-flight run") connects and holds the connection;
// the shell then either execs another program (the agent that stays, at the
// shell's pid) or stays bash. The subshell stays bash (the `:` after its
// sleep): had it exec'd its last command, a test that judges it would see
// another program at its pid than the one that connected, by timing alone.
pid_t launch(std::uint16_t port, bool exec_after) {
  const std::string script = "( exec 3<>/dev/tcp/127.0.0.1/" + std::to_string(port) + "; sleep 3; : ) & sleep 0.5; " +
                             (exec_after ? "exec sleep 3" : "sleep 3; :");
  pid_t pid = ::fork();
  if (pid == 0) {
    ::execl("/bin/bash", "bash", "-c", script.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  return pid;
}

// The shell (the test's child) and the subshell (its child, or reparented).
void end(pid_t shell, pid_t subshell) {
  if (subshell > 0) ::kill(subshell, SIGKILL);
  ::kill(shell, SIGKILL);
  ::waitpid(shell, nullptr, 0);
}

// Waits until `pid` runs something other than bash (its exec happened).
void wait_for_exec(pid_t pid) {
  for (int i = 0; i < 300; ++i) {
    char exe[256] = {};
    ssize_t n = ::readlink(("/proc/" + std::to_string(pid) + "/exe").c_str(), exe, sizeof exe - 1);
    if (n > 0 && std::string(exe).find("bash") == std::string::npos) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ADD_FAILURE() << "pid " << pid << " never exec'd";
}

TEST(ExportAdmission, AChildOfTheShellBeforeItsExecIsNotTheJudgedAgents) {
  Listener listener;
  const pid_t shell = launch(listener.port, true);
  ExportAdmission admission(0, shell);  // the tree: the shell and its descendants
  auto verdict = listener.check_next(admission);
  ASSERT_TRUE(verdict.of_target) << verdict.who;
  ASSERT_NE(verdict.pid, 0);
  EXPECT_NE(verdict.pid, shell);  // the subshell holds it
  wait_for_exec(shell);
  admission.judged(shell);  // the agent that stays: the shell's pid, another program
  EXPECT_FALSE(admission.exported_by_judged(verdict.pid))
      << "the subshell was forked by bash, before the exec: not a descendant of the agent";
  EXPECT_TRUE(admission.exported_by_judged(shell));  // its own exports (never admitted here): by pid
  EXPECT_TRUE(admission.exported_by_judged(0));      // unknown (the session token): counts
  end(shell, verdict.pid);
}

TEST(ExportAdmission, AChildOfTheJudgedProcessIsItsOwn) {
  Listener listener;
  const pid_t shell = launch(listener.port, false);
  ExportAdmission admission(0, shell);
  auto verdict = listener.check_next(admission);
  ASSERT_TRUE(verdict.of_target) << verdict.who;
  admission.judged(shell);  // still bash: the subshell is its descendant
  EXPECT_TRUE(admission.exported_by_judged(verdict.pid));
  admission.judged(verdict.pid);
  EXPECT_TRUE(admission.exported_by_judged(verdict.pid));
  EXPECT_FALSE(admission.exported_by_judged(shell + 100000));  // no process of the tree: by pid only
  end(shell, verdict.pid);
}

TEST(ExportAdmission, BeforeAnyProcessIsJudgedEveryAdmittedExportCounts) {
  Listener listener;
  const pid_t shell = launch(listener.port, true);
  ExportAdmission admission(0, shell);
  auto verdict = listener.check_next(admission);
  ASSERT_TRUE(verdict.of_target) << verdict.who;
  EXPECT_TRUE(admission.exported_by_judged(verdict.pid));
  end(shell, verdict.pid);
}

// Launch mode: `exec setsid AGENT` (setsid forks, the child makes a new
// session, the launched process exits at once) leaves the agent outside the
// launched session and group, reparented away before anything listed the tree:
// its connection is still the tree's, in either hold, while another launch of
// the same tracecorr lives (the fallback must not take it for that one's).
class SetsidExporter : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    if (*GetParam()) ::setenv("TRACECORR_TREE_HOLD", GetParam(), 1);
    else ::unsetenv("TRACECORR_TREE_HOLD");
  }
  void TearDown() override { ::unsetenv("TRACECORR_TREE_HOLD"); }
};

std::unique_ptr<Target> launch_target(const std::string& script) {
  LaunchSpec spec;
  spec.argv = {"/bin/bash", "-c", script};
  auto t = Target::launch(spec);
  EXPECT_TRUE(t.ok()) << (t.ok() ? "" : t.error().message());
  return t.ok() ? std::move(*t) : nullptr;
}

TEST_P(SetsidExporter, IsAdmittedAsTheLaunchedTrees) {
  auto other = launch_target("exec sleep 30");  // another session's launch, live
  ASSERT_TRUE(other);
  Listener listener;
  // The exporter stays bash (`; :`): were it to exec sleep between its
  // connection and judged(), the judged program would rightly be another.
  auto target = launch_target("exec setsid bash -c 'exec 3<>/dev/tcp/127.0.0.1/" + std::to_string(listener.port) +
                              "; sleep 30; :'");
  ASSERT_TRUE(target);
  ExportAdmission admission;
  admission.follow(target.get());
  auto verdict = listener.check_next(admission);
  EXPECT_TRUE(verdict.of_target) << verdict.who << " (held by " << target->hold_description() << ")";
  EXPECT_NE(verdict.pid, target->launched_pid());
  admission.judged(verdict.pid);
  EXPECT_TRUE(admission.exported_by_judged(verdict.pid));
  admission.follow(nullptr);
  target->stop(std::chrono::milliseconds(500));
  other->stop(std::chrono::milliseconds(500));
}

// Two exporters of the tree born one right after the other: the second's
// connection comes within the tree listing's refresh interval of the first's.
TEST_P(SetsidExporter, ASecondExporterBornRightAfterTheFirstIsAdmitted) {
  Listener listener;
  const std::string connect = "exec 3<>/dev/tcp/127.0.0.1/" + std::to_string(listener.port) + "; exec sleep 30";
  auto target = launch_target("bash -c '" + connect + "' & sleep 0.02; bash -c '" + connect + "' & wait");
  ASSERT_TRUE(target);
  ExportAdmission admission;
  admission.follow(target.get());
  auto first = listener.check_next(admission);
  EXPECT_TRUE(first.of_target) << first.who;
  auto second = listener.check_next(admission);
  EXPECT_TRUE(second.of_target) << second.who;
  admission.follow(nullptr);
  target->stop(std::chrono::milliseconds(500));
}

INSTANTIATE_TEST_SUITE_P(Holds, SetsidExporter, ::testing::Values("", "subreaper"),
                         [](const auto& info) { return std::string(*info.param ? "Subreaper" : "Cgroup"); });

}  // namespace
}  // namespace tracecorr::conform

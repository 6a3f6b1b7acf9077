// A tracer's wait takes its tracee's stops, and leaves the exit of a launched
// process to its launcher: the mapping watch once reaped a launched wrapper
// that exited between two of its waits, and the launcher waited 20 s for a
// process that was gone.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/ptrace.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "tracecorr/tracee_wait.hpp"

namespace tracecorr {
namespace {

using namespace std::chrono_literals;

// Waits (bounded) for the next report on `tid`; 0 when none came.
pid_t next_report(pid_t tid, int& status) {
  for (auto give_up = std::chrono::steady_clock::now() + 10s; std::chrono::steady_clock::now() < give_up;) {
    if (pid_t r = wait_tracee_nohang(tid, status); r != 0) return r;
    std::this_thread::sleep_for(1ms);
  }
  return 0;
}

// A child stopped by its own SIGSTOP, then seized with `options` and let go.
pid_t seized_child(void (*body)(), long options) {
  pid_t child = ::fork();
  if (child == 0) {
    ::raise(SIGSTOP);
    body();
    ::_exit(0);
  }
  int status = 0;
  EXPECT_EQ(::waitpid(child, &status, WUNTRACED), child);
  EXPECT_EQ(::ptrace(PTRACE_SEIZE, child, nullptr, reinterpret_cast<void*>(options)), 0);
  ::kill(child, SIGCONT);
  return child;
}

TEST(TraceeWait, TakesEachStopAsWaitpidEncodesIt) {
  pid_t child = seized_child([] { ::_exit(7); }, PTRACE_O_TRACEEXIT);
  int status = 0;
  for (int stops = 0; stops < 8; ++stops) {
    ASSERT_EQ(next_report(child, status), child);
    ASSERT_TRUE(WIFSTOPPED(status)) << std::hex << status;
    if (status >> 8 == (SIGTRAP | (PTRACE_EVENT_EXIT << 8))) break;  // _exit's PTRACE_EVENT_EXIT
    ASSERT_EQ(::ptrace(PTRACE_CONT, child, nullptr, nullptr), 0);
  }
  ASSERT_EQ(status >> 8, SIGTRAP | (PTRACE_EVENT_EXIT << 8)) << std::hex << status;
  ASSERT_EQ(::ptrace(PTRACE_CONT, child, nullptr, nullptr), 0);
  ASSERT_EQ(next_report(child, status), child);
  EXPECT_TRUE(WIFEXITED(status));
  siginfo_t info{};
  ASSERT_EQ(::waitid(P_PID, static_cast<id_t>(child), &info, WEXITED | WNOHANG), 0);
}

TEST(TraceeWait, LeavesALaunchedProcesssExitToItsLauncher) {
  pid_t child = seized_child([] { ::_exit(7); }, 0);
  int status = 0;
  ASSERT_EQ(next_report(child, status), child);
  while (WIFSTOPPED(status)) {  // the SIGCONT's stop, if the kernel reports it
    ASSERT_EQ(::ptrace(PTRACE_CONT, child, nullptr, nullptr), 0);
    ASSERT_EQ(next_report(child, status), child);
  }
  ASSERT_TRUE(WIFEXITED(status)) << std::hex << status;
  EXPECT_EQ(WEXITSTATUS(status), 7);
  ASSERT_EQ(next_report(child, status), child) << "reported again: nothing was taken";
  siginfo_t info{};
  ASSERT_EQ(::waitid(P_PID, static_cast<id_t>(child), &info, WEXITED | WNOHANG), 0) << "the launcher's to take";
  EXPECT_EQ(info.si_pid, child);
  EXPECT_EQ(info.si_status, 7);
}

// The traced process is another's child (a launch script's command): its
// exit is taken by the tracer, or its parent would never hear of it.
TEST(TraceeWait, ReapsAnotherParentsChildSoThatParentHearsOfIt) {
  int pids[2];
  ASSERT_EQ(::pipe(pids), 0);
  pid_t middle = ::fork();
  if (middle == 0) {
    pid_t grandchild = ::fork();
    if (grandchild == 0) {
      ::raise(SIGSTOP);
      ::_exit(9);
    }
    (void)!::write(pids[1], &grandchild, sizeof grandchild);
    int st = 0;
    ::waitpid(grandchild, &st, 0);
    ::_exit(WIFEXITED(st) ? WEXITSTATUS(st) : 99);
  }
  pid_t grandchild = 0;
  ASSERT_EQ(::read(pids[0], &grandchild, sizeof grandchild), static_cast<ssize_t>(sizeof grandchild));
  // Stopped by its own SIGSTOP (its parent sees that stop, not us), then seized.
  for (int i = 0; i < 5000; ++i) {
    char path[64], state = 0;
    std::snprintf(path, sizeof path, "/proc/%d/stat", grandchild);
    if (FILE* f = std::fopen(path, "re")) {
      if (std::fscanf(f, "%*d (%*[^)]) %c", &state) != 1) state = 0;
      std::fclose(f);
    }
    if (state == 'T') break;
    std::this_thread::sleep_for(1ms);
  }
  ASSERT_EQ(::ptrace(PTRACE_SEIZE, grandchild, nullptr, nullptr), 0);
  ::kill(grandchild, SIGCONT);
  int status = 0;
  ASSERT_EQ(next_report(grandchild, status), grandchild);
  while (WIFSTOPPED(status)) {
    ASSERT_EQ(::ptrace(PTRACE_CONT, grandchild, nullptr, nullptr), 0);
    ASSERT_EQ(next_report(grandchild, status), grandchild);
  }
  EXPECT_EQ(WEXITSTATUS(status), 9);
  int middle_status = 0;
  ASSERT_EQ(::waitpid(middle, &middle_status, 0), middle);
  EXPECT_EQ(WEXITSTATUS(middle_status), 9) << "the middle parent heard of its child's exit";
  ::close(pids[0]);
  ::close(pids[1]);
}

}  // namespace
}  // namespace tracecorr

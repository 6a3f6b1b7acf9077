// What a test checks of a thread after a hardware watch let it go: that no
// tracer holds it, it is not left stopped, no debug register still watches
// for it, and it keeps writing. Read from /proc and, for the registers, a
// brief ptrace attachment of the test's own (x86-64 debug registers).
#pragma once

#include <sys/ptrace.h>
#include <sys/types.h>
#include <sys/user.h>
#include <sys/wait.h>

#include <gtest/gtest.h>

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>
#include <thread>

#include "tracecorr/memory.hpp"

namespace tracecorr::test_support {

inline std::string task_file(pid_t pid, pid_t tid, const char* name) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/task/" + std::to_string(tid) + "/" + name);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// The thread's TracerPid (0: untraced; -1: /proc does not say).
inline long tracer_of(pid_t pid, pid_t tid) {
  auto status = task_file(pid, tid, "status");
  auto at = status.find("TracerPid:");
  return at == std::string::npos ? -1 : std::stol(status.substr(at + 10));
}

// The state letter of /proc/PID/task/TID/stat ('t': tracing stop, 'T': stopped).
inline char scheduler_state(pid_t pid, pid_t tid) {
  auto stat = task_file(pid, tid, "stat");
  auto paren = stat.rfind(')');
  return paren == std::string::npos || paren + 2 >= stat.size() ? '?' : stat[paren + 2];
}

// DR0..DR3 and DR7 of a thread, read through a brief attachment of our own.
inline std::optional<std::array<unsigned long, 5>> debug_registers(pid_t tid) {
  if (ptrace(PTRACE_SEIZE, tid, nullptr, nullptr) != 0) return std::nullopt;
  ptrace(PTRACE_INTERRUPT, tid, nullptr, nullptr);
  int status = 0;
  if (waitpid(tid, &status, __WALL) != tid || !WIFSTOPPED(status)) return std::nullopt;
  std::array<unsigned long, 5> regs{};
  const int index[5] = {0, 1, 2, 3, 7};
  for (int i = 0; i < 5; ++i)
    regs[i] = static_cast<unsigned long>(ptrace(PTRACE_PEEKUSER, tid,
                                                reinterpret_cast<void*>(offsetof(struct user, u_debugreg) +
                                                                        index[i] * sizeof(user{}.u_debugreg[0])),
                                                nullptr));
  ptrace(PTRACE_DETACH, tid, nullptr, nullptr);
  return regs;
}

// Waits (bounded: a liveness check, not a timing assertion) until the `Size`
// bytes at `address` of `pid` change.
template <std::size_t Size>
bool memory_keeps_changing(pid_t pid, std::uint64_t address) {
  using namespace std::chrono_literals;
  LiveProcessMemory memory(pid);
  std::array<std::uint8_t, Size> first{}, now{};
  if (!memory.read(address, first)) return false;
  for (auto give_up = std::chrono::steady_clock::now() + 5s; std::chrono::steady_clock::now() < give_up;) {
    std::this_thread::sleep_for(1ms);
    if (!memory.read(address, now)) return false;
    if (now != first) return true;
  }
  return false;
}

// The thread as a watch must leave it: detached, not stopped, no watchpoint armed.
inline void expect_released(pid_t pid, pid_t tid) {
  EXPECT_EQ(tracer_of(pid, tid), 0) << "still traced after the watch";
  const char state = scheduler_state(pid, tid);
  EXPECT_NE(state, 't') << "left in a tracing stop";
  EXPECT_NE(state, 'T') << "left stopped";
  auto regs = debug_registers(tid);
  ASSERT_TRUE(regs.has_value()) << "could not attach to check the debug registers (still attached?)";
  EXPECT_EQ((*regs)[4], 0u) << "DR7 still enables watchpoints";
  for (int i = 0; i < 4; ++i) EXPECT_EQ((*regs)[i], 0u) << "DR" << i << " not cleared";
}

}  // namespace tracecorr::test_support

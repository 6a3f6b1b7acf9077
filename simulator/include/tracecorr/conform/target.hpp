// The agent process under test: launched by tracecorr (and restartable with
// other settings) or attached to by pid.
//
// A launched command is often not the agent itself: a shell script that
// starts `java ...` without exec, a wrapper that forks the agent two deep,
// helpers (`sleep 300 &`) that outlive their parent. So a launched target is
// a process *tree*: the launched process gets a session and process group of
// its own, and every process in that session or descending from it belongs
// to the tree. The session picks the process that loads the agent library
// (judge()); stop() stops the whole tree; output capture ends when the tree
// is stopped, never waiting for end-of-file from a pipe an orphan still holds.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "tracecorr/error.hpp"
#include "tracecorr/fd.hpp"

namespace tracecorr::conform {

struct LaunchSpec {
  std::vector<std::string> argv;               // argv[0] is looked up in PATH
  std::map<std::string, std::string> env;      // added to (and overriding) tracecorr's environment
  std::vector<std::string> unset_env;          // removed from the inherited environment
  // Runs in tracecorr after the fork, while the child waits before its exec
  // (e.g. to seize it and follow every thread it will start); the child execs
  // once it returns, whatever it returns.
  std::function<void(pid_t)> before_exec;
};

// One line of a launched target's output.
struct OutputLine {
  std::chrono::system_clock::time_point at;  // when its first byte was read
  std::string text;
};

// One process of a launched tree.
struct TreeProcess {
  pid_t pid = 0;
  pid_t ppid = 0;
  int depth = 0;            // 0: the launched process; 1: its child; ...
  std::string comm;         // the kernel's short name (hostile: bounded, not printable-checked)
  bool in_group = true;     // still in the launched process group (false: it made its own)
};

class Target {
 public:
  // Starts argv with the environment, in a session and process group of its
  // own; stdout and stderr are captured (and kept, bounded) so probes can look
  // for warnings the agent prints.
  static Expected<std::unique_ptr<Target>> launch(const LaunchSpec& spec);
  static Expected<std::unique_ptr<Target>> attach(pid_t pid);
  ~Target();  // a launched target is stopped; an attached one is left alone
  Target(const Target&) = delete;
  Target& operator=(const Target&) = delete;

  // The process being judged: the launched (or attached) one until judge()
  // names a descendant.
  pid_t pid() const { return judged_pid_; }
  pid_t launched_pid() const { return pid_; }
  bool launched() const { return launched_; }
  std::chrono::steady_clock::time_point started() const { return started_; }

  // The launched process and its live descendants, parents before children
  // (launched mode; attach mode: just the attached process).
  std::vector<TreeProcess> processes() const;
  // Judge `p` (a member of processes()) from now on; `why` says why it was chosen.
  void judge(const TreeProcess& p, std::string why);
  const std::string& judged_reason() const { return judged_reason_; }

  // Whether the judged process is still running.
  bool alive();
  // How the judged process ended, once it has ("exited with 0", "killed by SIGABRT").
  std::optional<std::string> exit_description();
  // Attach mode: why the process we attached to is no longer the one judged
  // ("exited during the run", "exec'd another program during the run"), or
  // nullopt. Verdicts on it would judge something else: an environment error.
  std::optional<std::string> attached_process_lost();

  // Stops the whole tree: SIGTERM to the process group and to every member
  // that left it, then SIGKILL to whatever remains after `grace`. Ends the
  // output capture. Returns how the judged process ended.
  std::string stop(std::chrono::milliseconds grace = std::chrono::milliseconds(2000));

  std::string output() const;  // stdout and stderr, interleaved as read
  // The same, line by line, each with when its first byte was read.
  std::vector<OutputLine> output_lines() const;
  std::string description() const;

 private:
  Target() = default;
  void drain_output();
  void end_output_capture();
  // The wait status (as waitpid encodes it) once the launched process has terminated.
  std::optional<int> reap(bool block);
  bool launched_process_alive();
  // Sends `sig` to the process group and to each member outside it; returns
  // pidfds of the members signalled (to wait on).
  std::vector<UniqueFd> signal_tree(int sig);

  pid_t pid_ = -1;          // launched (or attached) process
  pid_t judged_pid_ = -1;
  UniqueFd judged_pidfd_;   // when the judged process is not our child
  std::string judged_reason_;
  bool launched_ = false;
  std::string command_;
  std::chrono::steady_clock::time_point started_{};
  std::optional<int> wait_status_;
  std::uint64_t attach_start_time_ = 0;  // attach mode: /proc/PID/stat start time
  std::string attach_exec_identity_;     // attach mode: changes on exec
  UniqueFd output_fd_;
  UniqueFd output_stop_;    // eventfd: tells the capture thread to finish
  std::thread output_thread_;
  mutable std::mutex output_mutex_;
  std::string output_;
  std::vector<std::pair<std::chrono::system_clock::time_point, std::size_t>> line_starts_;  // (read at, offset)
};

}  // namespace tracecorr::conform

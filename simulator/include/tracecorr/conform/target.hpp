// The agent process under test: launched by tracecorr (and restartable with
// other settings) or attached to by pid.
#pragma once

#include <sys/types.h>

#include <chrono>
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
};

// One line of a launched target's output.
struct OutputLine {
  std::chrono::system_clock::time_point at;  // when its first byte was read
  std::string text;
};

class Target {
 public:
  // Starts argv with the environment; stdout and stderr are captured (and
  // kept, bounded) so probes can look for warnings the agent prints.
  static Expected<std::unique_ptr<Target>> launch(const LaunchSpec& spec);
  static Expected<std::unique_ptr<Target>> attach(pid_t pid);
  ~Target();  // a launched target is stopped; an attached one is left alone
  Target(const Target&) = delete;
  Target& operator=(const Target&) = delete;

  pid_t pid() const { return pid_; }
  bool launched() const { return launched_; }
  std::chrono::steady_clock::time_point started() const { return started_; }
  bool alive();
  // How the process ended, once it has ("exited with 0", "killed by SIGABRT").
  std::optional<std::string> exit_description();
  // Attach mode: why the process we attached to is no longer the one judged
  // ("exited during the run", "exec'd another program during the run"), or
  // nullopt. Verdicts on it would judge something else: an environment error.
  std::optional<std::string> attached_process_lost();

  // SIGTERM, then SIGKILL after `grace`. Returns how it ended.
  std::string stop(std::chrono::milliseconds grace = std::chrono::milliseconds(2000));

  std::string output() const;  // stdout and stderr, interleaved as read
  // The same, line by line, each with when its first byte was read.
  std::vector<OutputLine> output_lines() const;
  std::string description() const;

 private:
  Target() = default;
  void drain_output();
  // The wait status (as waitpid encodes it) once the process has terminated.
  std::optional<int> reap(bool block);

  pid_t pid_ = -1;
  bool launched_ = false;
  std::string command_;
  std::chrono::steady_clock::time_point started_{};
  std::optional<int> wait_status_;
  std::uint64_t attach_start_time_ = 0;  // attach mode: /proc/PID/stat start time
  std::string attach_exec_identity_;     // attach mode: changes on exec
  UniqueFd output_fd_;
  std::thread output_thread_;
  mutable std::mutex output_mutex_;
  std::string output_;
  std::vector<std::pair<std::chrono::system_clock::time_point, std::size_t>> line_starts_;  // (read at, offset)
};

}  // namespace tracecorr::conform

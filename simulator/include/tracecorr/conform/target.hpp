// The agent process under test: launched by tracecorr (and restartable with
// other settings) or attached to by pid.
//
// A launched command is often not the agent itself: a shell script that
// starts `java ...` without exec, a wrapper that forks the agent two deep,
// a `setsid` that leaves the launched session, helpers (`sleep 300 &`) that
// outlive their parent. So a launched target is a process *tree*: every
// process the launched command starts, whatever session or group it moves
// to, held in a TreeHold (tree_hold.hpp: a cgroup of its own). The launched
// process gets a process group of its own (not a session: autogroups are per
// session). The session picks the process that loads the agent library
// (judge()); stop() ends the whole tree and says what it had to kill; output
// capture ends when the tree is stopped, never waiting for end-of-file from a
// pipe an orphan still holds.
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

#include "tracecorr/conform/tree_hold.hpp"
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
  // Called with a process of the launched tree held at an exec, before the
  // new program runs (its root is the one it will run in: a container's,
  // after `chroot`), when the launch is followed by ptrace (the session's slot
  // watch, or a follower the session starts for this alone).
  std::function<void(pid_t)> on_exec;
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

// A process to pass over when it is found publishing (Target::pass_over): a
// run of the agent before the one that stays, learned from an earlier launch.
struct PassOver {
  std::string signature;  // Target::signature() of the process at that place
  std::string seen;       // what the earlier launch saw, for the judged reason
};

// How stop() ended a launched tree: for the report, which names what had to be killed.
struct StoppedTree {
  std::string hold;                    // TreeHold::description()
  bool held_by_cgroup = false;         // TreeHold::is_cgroup(): else the fallback, which sees only members it found
  std::size_t processes = 0;           // live members when the stop began
  std::vector<TreeProcess> left_group;  // members that had left the launched process group (setsid, setpgid)
  std::vector<TreeProcess> killed;      // still running `grace` after SIGTERM: killed
  std::size_t survivors = 0;           // still running after the kill (none, unless the kernel would not)
  // "stopped 3 processes of the launched tree (held by cgroup ...); 1 had left its process group: ...;
  // killed after the grace: pid 4312 (sleep)"
  std::string describe() const;
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
  // Judge `p` (a member of processes()) from now on; `why` says why it was
  // chosen. False: `p` is to be passed over (pass_over()), or a process passed
  // over still runs (only a run that exited by itself is passed over: until it
  // has, nothing after it is judged), and the caller looks on.
  bool judge(const TreeProcess& p, std::string why);
  // Pass over processes with these signatures (signature()): an earlier
  // launch of the same command saw such a process exit on its own while the
  // launched tree ran on, or the tree run the agent again elsewhere once
  // tracecorr had stopped it (a pre-flight run of the agent before the one that stays).
  void pass_over(std::vector<PassOver> runs) { pass_over_ = std::move(runs); }
  const std::vector<TreeProcess>& passed_over() const { return passed_over_; }
  // A process passed over that still runs ("" when none): it has not shown
  // that it is a run before the agent that stays.
  std::string passed_over_running() const;
  // What tells a process of one launch from the same place in the next: its
  // depth in the tree and its command line ("depth 2: timeout 0.5 agent --check").
  static std::string signature(const TreeProcess& p);
  // The judged process's signature, taken when it was judged.
  const std::string& judged_signature() const { return judged_signature_; }
  const std::string& judged_reason() const { return judged_reason_; }

  // The judged process's executable (/proc/PID/exe), read when it was judged.
  const std::string& judged_executable() const { return judged_executable_; }

  // Whether the judged process is still running.
  bool alive();
  // Launch mode: SIGTERM to the judged process alone (not the launched one),
  // waiting within `grace` for it to exit; stop() then ends the rest. True:
  // it exited. Lets the session see what the tree does once it has.
  bool terminate_judged(std::chrono::milliseconds grace = std::chrono::milliseconds(2000));
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
  // What the stop did (launch mode, once stopped).
  const std::optional<StoppedTree>& stopped_tree() const { return stopped_tree_; }
  // How the launched tree is held (TreeHold::description(); empty in attach mode).
  std::string hold_description() const;

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
  // Sends `sig` to the process group and to each member; returns pidfds of
  // the members signalled (to wait on).
  std::vector<UniqueFd> signal_tree(const std::vector<TreeProcess>& members, int sig);
  // The tree without a cgroup (TreeHold's fallback): the process group, what
  // descends from it or from a member seen before, and orphans adopted by
  // tracecorr (their child subreaper) that are this tree's.
  std::vector<TreeProcess> followed_processes() const;
  std::vector<TreeProcess> held_processes(const std::vector<pid_t>& members) const;
  // SIGKILL to every member (the cgroup's at once); how many still run after kKillWait.
  std::size_t kill_tree();
  void reap_adopted_orphans();

  pid_t pid_ = -1;          // launched (or attached) process
  std::unique_ptr<TreeHold> hold_;  // launch mode, until stopped
  std::optional<StoppedTree> stopped_tree_;
  std::string stopped_how_;
  std::vector<PassOver> pass_over_;
  std::vector<TreeProcess> passed_over_;
  std::vector<UniqueFd> passed_over_pidfds_;  // each passed over process's, to tell when it exits
  std::string passed_over_seen_;  // what the earlier launch saw of the last one (its command line is gone once it exits)
  std::string judged_signature_;
  std::string judged_executable_;
  bool judged_sigtermed_ = false;   // terminate_judged() sent it SIGTERM
  bool judged_terminated_ = false;  // and it exited within the grace
  mutable std::mutex members_mutex_;
  mutable std::map<pid_t, std::uint64_t> members_seen_;  // fallback: pid -> start time of every member seen
  pid_t judged_pid_ = -1;
  UniqueFd judged_pidfd_;   // when the judged process is not our child
  std::string judged_reason_;
  bool launched_ = false;
  std::string launch_mark_;  // TRACECORR_LAUNCH in the launched environment (target.cpp)
  std::string command_;
  std::chrono::steady_clock::time_point started_{};
  std::optional<int> wait_status_;
  bool status_taken_elsewhere_ = false;  // the launched process was reaped, not by reap()
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

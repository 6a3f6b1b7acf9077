// What holds a launched process tree, so that nothing it starts outlives the
// run whatever it does: a new session (`setsid`), a process group of its own,
// a double fork that leaves its parent to init, a chain of forks deeper than
// any walk of parent links would follow.
//
// The hold is a cgroup v2 of its own per launch, made below tracecorr's own
// cgroup: every descendant is born in it and stays in it (only a process
// with the right to write to another cgroup's cgroup.procs, root, can move
// itself out), its members are read from cgroup.procs, and cgroup.kill ends
// them all at once. It changes nothing the timing judges depend on: it is
// made only where no CPU controller is enabled below tracecorr's cgroup
// (the launched processes then share the CPU with the machine exactly as
// before: same scheduling group, same autogroup, no cpu.weight of their own),
// and the processes keep tracecorr's session. Where no such cgroup can be
// made (no cgroup v2, a read-only cgroupfs in a container, a CPU controller),
// the hold is the fallback, said in description(): tracecorr becomes a child
// subreaper (orphans of the tree come back to it, not to init) and Target
// follows the tree by process group, parent links and the members it has
// seen.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tracecorr/error.hpp"

namespace tracecorr::conform {

class TreeHold {
 public:
  // A cgroup when one can be made (TRACECORR_TREE_HOLD=subreaper forces the
  // fallback, to test it); never fails: the fallback says why.
  static std::unique_ptr<TreeHold> create();
  ~TreeHold();  // kills what is left, removes the cgroup
  TreeHold(const TreeHold&) = delete;
  TreeHold& operator=(const TreeHold&) = delete;

  // Puts `pid` (tracecorr's child, held before its exec) in the hold: all it
  // starts from then on is born inside. A cgroup that refuses it is given up
  // for the fallback (description() says why).
  void adopt(pid_t pid);
  bool is_cgroup() const { return !cgroup_.empty(); }
  // The live processes in the cgroup; nullopt when the hold is the fallback
  // (or the cgroup could not be read): the caller follows the tree itself.
  std::optional<std::vector<pid_t>> members() const;
  // SIGKILL to every member at once (cgroup.kill; before Linux 5.14: the
  // cgroup frozen, then each member killed) and waits up to `bound` until none
  // is left. Returns how many still run. The fallback has nothing to kill here.
  std::size_t kill_all(std::chrono::milliseconds bound);
  // "cgroup /sys/fs/cgroup/tracecorr-...", or "no cgroup (why): ...".
  const std::string& description() const { return description_; }

 private:
  TreeHold() = default;
  void give_up_cgroup(const std::string& why);

  std::string cgroup_;  // the cgroup's directory; empty: the fallback
  std::string description_;
};

// Removes the holds a tracecorr that no longer runs left behind (killed by
// SIGKILL, say): what still runs in them is killed first, since nothing
// should have outlived that run. Called by create() once per process.
void remove_abandoned_holds();

}  // namespace tracecorr::conform

// See run_after_stop.hpp.
#include "tracecorr/conform/run_after_stop.hpp"

#include <thread>

#include "tracecorr/procfs.hpp"

namespace tracecorr::conform {
namespace {

constexpr auto kStopPollInterval = std::chrono::milliseconds(20);
// A launcher whose child has exited goes on (or ends) at once: this much of
// the tree's CPU time, or this long idle, with no process running the judged
// program again, and it will not.
constexpr std::chrono::milliseconds kFirstLookCpu{1000};
constexpr std::chrono::milliseconds kFirstLookIdle{1000};

// Whether `p` runs the judged program and did not, or was not there, before.
bool runs_it_again(const TreeProcess& p, const TreeImages& before, const std::string& program) {
  const auto exe = executable_of(p.pid);
  if (exe.empty() || exe != program) return false;
  auto was = before.find(p.pid);
  return was == before.end() || was->second != exe;
}

}  // namespace

TreeImages images_of(const Target& target) {
  TreeImages images;
  for (const auto& p : target.processes()) images.emplace(p.pid, executable_of(p.pid));
  return images;
}

DiscoveryLimits first_look_after_stop(const DiscoveryLimits& session_limits) {
  return DiscoveryLimits{kFirstLookCpu, kFirstLookIdle, session_limits.ceiling};
}

std::string RunAfterStop::describe() const {
  if (!run) return "no process of the launched tree ran its program again (" + figures + ")";
  return "pid " + std::to_string(run->pid) + " (" + run->comm + ") " +
         (restart ? "at the same place with the same command" : "at another place (" + signature + ")");
}

RunAfterStop watch_run_after_stop(const Target& target, const TreeImages& before,
                                  const std::function<bool(pid_t)>& publishes, const DiscoveryLimits& limits,
                                  const DiscoveryLimits& first_look) {
  auto pids = [&target] {
    std::vector<pid_t> out;
    for (const auto& p : target.processes()) out.push_back(p.pid);
    return out;
  };
  DiscoveryWait first(pids, first_look);
  std::optional<DiscoveryWait> publishing;  // from the first process that runs the program again
  RunAfterStop out;
  for (;;) {
    const auto tree = target.processes();
    for (const auto& p : tree) {
      if (p.pid == target.pid() || !runs_it_again(p, before, target.judged_executable())) continue;
      if (!publishing) publishing.emplace(pids, limits);
      if (publishes && !publishes(p.pid)) continue;
      out.run = p;
      out.signature = Target::signature(p);
      out.restart = out.signature == target.judged_signature();
      out.figures = publishing->progress().describe();
      return out;
    }
    DiscoveryWait& wait = publishing ? *publishing : first;
    if (tree.empty()) {
      out.figures = "the tree exited; " + wait.progress().describe();
      return out;
    }
    if (wait.over()) {
      out.figures = wait.figures();
      return out;
    }
    std::this_thread::sleep_for(kStopPollInterval);
  }
}

}  // namespace tracecorr::conform

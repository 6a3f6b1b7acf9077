// What a launched tree does once tracecorr has stopped the process it judged
// (Session::close). The agent that stays is judged, not a run of the same
// program before it (`timeout 5 AGENT --check; exec AGENT`); a run before it
// that was still running when the session ended looks like the agent until it
// has gone. So the session stops the judged process alone (SIGTERM, not the
// rest of the tree) and watches the tree, on its own progress, for a process
// that starts (or execs) the judged program since and publishes the protocol:
//  - at another place (Target::signature: another depth or command line):
//    the judged one may have been a run before the agent that stays; the
//    session is launched again, passing it over while it runs (Target::judge:
//    only a run that then exits by itself is passed over);
//  - at the same place with the same command: a restart (a supervisor's
//    loop), no run before anything: the judged process stays judged;
//  - none (the tree ends with it, as a wrapper or a script that does not
//    exec does): the judged process was the agent that stays.
#pragma once

#include <sys/types.h>

#include <functional>
#include <map>
#include <optional>
#include <string>

#include "tracecorr/conform/discovery_wait.hpp"
#include "tracecorr/conform/target.hpp"

namespace tracecorr::conform {

// pid -> executable (/proc/PID/exe) of each process of the tree.
using TreeImages = std::map<pid_t, std::string>;
TreeImages images_of(const Target& target);

struct RunAfterStop {
  std::optional<TreeProcess> run;  // publishes the protocol, running the judged program
  std::string signature;           // Target::signature() of it
  bool restart = false;            // at the judged process's place, with its command
  std::string figures;             // how the watch went (DiscoveryWait::figures)
  std::string describe() const;    // "pid 4312 (tracecorr-fixtu) at another place (depth 0: ...)"
};

// After the judged process of `target` has exited: until a process that was
// not in `before`, or ran another program then, runs the judged program and
// `publishes` (nullptr: running it is enough), or the tree is gone. The tree
// gets `first_look` of its progress to start the program again, then, once
// one of its processes has, the session's discovery `limits` to publish.
RunAfterStop watch_run_after_stop(const Target& target, const TreeImages& before,
                                  const std::function<bool(pid_t)>& publishes, const DiscoveryLimits& limits,
                                  const DiscoveryLimits& first_look);

// The first look's limits: a launcher goes on at once when its child exits.
DiscoveryLimits first_look_after_stop(const DiscoveryLimits& session_limits);

}  // namespace tracecorr::conform

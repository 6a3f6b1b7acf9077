// Waiting for a ptrace tracee without taking what is not the tracer's.
#pragma once

#include <signal.h>
#include <sys/types.h>

namespace tracecorr {

// waitpid(tid, &status, __WALL | WNOHANG) for a thread traced by this process,
// except that a thread-group leader's exit is never reaped when this process
// is its real parent: that exit status is the launcher's (conform::Target's),
// and a tracer's waitpid racing the exit would take it, leaving the launcher
// to wait for a process that is gone. Such an exit is reported (the status
// as waitpid encodes it) and left in place. A leader whose parent is another
// process is reaped as waitpid would: that parent hears of the exit only once
// its tracer has.
// Returns tid with `status` set, 0 when nothing is pending, -1 with errno.
pid_t wait_tracee_nohang(pid_t tid, int& status);

// Whether a waitid report is a termination (exited, killed, dumped), and that
// termination's status as waitpid encodes it.
bool reports_exit(const siginfo_t& info);
int exit_wait_status(const siginfo_t& info);

}  // namespace tracecorr

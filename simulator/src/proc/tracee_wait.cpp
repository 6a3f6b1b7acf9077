#include "tracecorr/tracee_wait.hpp"

#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>

#include "tracecorr/procfs.hpp"

namespace tracecorr {
namespace {

// A thread-group leader whose real parent is this process (a launched target).
bool our_childs_leader(pid_t tid) {
  if (thread_group_of(tid, 0) != tid) return false;
  auto st = read_process_stat(tid);
  return st && st->ppid == ::getpid();
}

}  // namespace

bool reports_exit(const siginfo_t& info) {
  return info.si_code == CLD_EXITED || info.si_code == CLD_KILLED || info.si_code == CLD_DUMPED;
}

int exit_wait_status(const siginfo_t& info) {
  if (info.si_code == CLD_EXITED) return (info.si_status & 0xff) << 8;
  return (info.si_status & 0x7f) | (info.si_code == CLD_DUMPED ? 0x80 : 0);
}

pid_t wait_tracee_nohang(pid_t tid, int& status) {
  siginfo_t info{};
  if (::waitid(P_PID, static_cast<id_t>(tid), &info, WEXITED | WSTOPPED | WNOHANG | WNOWAIT | __WALL) != 0) return -1;
  if (info.si_pid != tid) return 0;
  if (reports_exit(info)) {
    if (!our_childs_leader(tid)) return ::waitpid(tid, &status, __WALL | WNOHANG);
    status = exit_wait_status(info);
    return tid;
  }
  // A stop: take it and nothing else (waitid without WEXITED reaps no exit,
  // should the leader be killed between the two calls). A ptrace stop's
  // si_status is the whole code that waitpid's status carries above its 0x7f.
  info = {};
  if (::waitid(P_PID, static_cast<id_t>(tid), &info, WSTOPPED | WNOHANG | __WALL) != 0) return -1;
  if (info.si_pid != tid) return 0;
  status = (info.si_status << 8) | 0x7f;
  return tid;
}

}  // namespace tracecorr

#include "tracecorr/conform/target.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <set>
#include <thread>

#include "tracecorr/procfs.hpp"
#include "tracecorr/tracee_wait.hpp"

extern char** environ;

namespace tracecorr::conform {
namespace {

// Bound on captured output: probes look for warnings, not megabytes of logs.
constexpr std::size_t kOutputLimit = 4 << 20;
// After SIGKILL, how long the tree gets to disappear before stop() gives up waiting.
constexpr auto kKillWait = std::chrono::milliseconds(2000);
// Depth given to members whose parent links do not lead to the launched
// process (reparented to init or to tracecorr): sorted last.
constexpr int kMaxTreeDepth = 1 << 20;
// Bound on the members a fallback tree remembers (pid -> start time).
constexpr std::size_t kMaxMembersSeen = 1 << 16;

// The launched pids of every live Target of this process: an orphan the
// fallback hold adopted (tracecorr is its child subreaper) is no launch.
std::mutex live_launches_mutex;
std::set<pid_t> live_launches;

// Each launch's environment carries a mark of its own: an orphan the fallback
// hold adopted that it never saw (`exec setsid AGENT`: the launched process
// exits as soon as it has forked the agent) is told to be this launch's, and
// not another live one's, by the environment it started with.
constexpr const char* kLaunchMarkVariable = "TRACECORR_LAUNCH";
std::atomic<unsigned> launches_made{0};
// Bound on the environment read from an orphan (it is the target's: hostile).
constexpr std::size_t kMaxEnvironRead = 256 << 10;

bool carries_launch_mark(pid_t pid, const std::string& mark) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/environ", std::ios::binary);
  std::string environ_text(kMaxEnvironRead, '\0');
  in.read(environ_text.data(), static_cast<std::streamsize>(environ_text.size()));
  environ_text.resize(static_cast<std::size_t>(in.gcount()));
  const std::string entry = std::string(kLaunchMarkVariable) + "=" + mark;
  for (std::size_t at = environ_text.find(entry); at != std::string::npos; at = environ_text.find(entry, at + 1))
    if ((at == 0 || environ_text[at - 1] == '\0') &&
        (at + entry.size() == environ_text.size() || environ_text[at + entry.size()] == '\0'))
      return true;
  return false;
}

std::string describe_status(int status) {
  if (WIFEXITED(status)) return "exited with " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    int sig = WTERMSIG(status);
    return std::string("killed by SIG") + (sigabbrev_np(sig) ? sigabbrev_np(sig) : std::to_string(sig).c_str());
  }
  return "status " + std::to_string(status);
}

std::string join(const std::vector<std::string>& argv) {
  std::string s;
  for (const auto& a : argv) s += (s.empty() ? "" : " ") + a;
  return s;
}

// glibc 2.36's <sys/pidfd.h> lacks extern "C": call the system calls directly.
int open_pidfd(pid_t pid) { return static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)); }
int send_pidfd_signal(int pidfd, int sig) { return static_cast<int>(::syscall(SYS_pidfd_send_signal, pidfd, sig, nullptr, 0)); }

bool pidfd_exited(int pidfd) {
  pollfd p{pidfd, POLLIN, 0};
  return ::poll(&p, 1, 0) > 0;
}

// Waits until every pidfd reports its process exited, or the deadline.
// Returns how many are still running.
std::size_t wait_for_exit(const std::vector<UniqueFd>& fds, std::chrono::steady_clock::time_point deadline) {
  for (;;) {
    std::size_t running = 0;
    for (const auto& fd : fds) running += !pidfd_exited(fd.get());
    if (running == 0 || std::chrono::steady_clock::now() >= deadline) return running;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

}  // namespace

Expected<std::unique_ptr<Target>> Target::launch(const LaunchSpec& spec) {
  if (spec.argv.empty()) return make_error("no command given", "launch");
  int pipe_fds[2];
  if (pipe2(pipe_fds, O_CLOEXEC) != 0) return make_error(std::strerror(errno), "pipe for target output");
  UniqueFd read_end(pipe_fds[0]), write_end(pipe_fds[1]);
  // Never block on the read end: capture ends on request, not on end-of-file.
  fcntl(read_end.get(), F_SETFL, fcntl(read_end.get(), F_GETFL) | O_NONBLOCK);
  UniqueFd output_stop(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!output_stop) return make_error(std::strerror(errno), "eventfd for target output");

  // Build argv and envp before fork: the child only calls async-signal-safe functions.
  std::map<std::string, std::string> env;
  for (char** e = environ; *e; ++e) {
    std::string kv(*e);
    auto eq = kv.find('=');
    if (eq != std::string::npos) env[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  for (const auto& name : spec.unset_env) env.erase(name);
  for (const auto& [k, v] : spec.env) env[k] = v;
  const std::string mark = std::to_string(::getpid()) + "-" + std::to_string(++launches_made);
  env[kLaunchMarkVariable] = mark;
  std::vector<std::string> env_strings;
  for (const auto& [k, v] : env) env_strings.push_back(k + "=" + v);
  std::vector<char*> envp, argv;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> args = spec.argv;
  for (auto& s : args) argv.push_back(s.data());
  argv.push_back(nullptr);

  int exec_pipe[2];  // reports an exec failure to the parent
  if (pipe2(exec_pipe, O_CLOEXEC) != 0) return make_error(std::strerror(errno), "pipe for exec status");
  UniqueFd exec_read(exec_pipe[0]), exec_write(exec_pipe[1]);
  // Holds the child before its exec while it is put in the tree's hold and
  // before_exec runs: nothing it starts can be born outside the hold.
  int gate[2];
  if (pipe2(gate, O_CLOEXEC) != 0) return make_error(std::strerror(errno), "pipe for the launch gate");
  UniqueFd gate_read(gate[0]), gate_write(gate[1]);
  auto hold = TreeHold::create();

  pid_t pid = fork();
  if (pid < 0) return make_error(std::strerror(errno), "fork");
  if (pid == 0) {
    // Own process group: the tree is every process in this group or below
    // this pid, and stop() reaches the helpers a launch script starts. Not an
    // own session: the scheduler's autogroups are per session, and a session
    // of its own would give the whole agent one share of the CPUs against the
    // rest of the machine (starving its socket and exporter threads behind its
    // own CPU-bound ones whenever anything else runs).
    setpgid(0, 0);
    dup2(write_end.get(), STDOUT_FILENO);
    dup2(write_end.get(), STDERR_FILENO);
    int devnull = open("/dev/null", O_RDONLY);
    if (devnull >= 0) dup2(devnull, STDIN_FILENO);
    gate_write.reset();
    char go = 0;
    ssize_t r;
    do r = read(gate_read.get(), &go, 1);
    while (r < 0 && errno == EINTR);
    if (r != 1) _exit(127);  // tracecorr went away before letting it run
    execvpe(argv[0], argv.data(), envp.data());
    int err = errno;
    (void)!write(exec_write.get(), &err, sizeof err);
    _exit(127);
  }
  write_end.reset();
  exec_write.reset();
  gate_read.reset();
  hold->adopt(pid);
  if (spec.before_exec) spec.before_exec(pid);
  const char go = 1;
  (void)!write(gate_write.get(), &go, 1);
  gate_write.reset();
  int exec_errno = 0;
  ssize_t n = read(exec_read.get(), &exec_errno, sizeof exec_errno);
  if (n == sizeof exec_errno) {
    waitpid(pid, nullptr, 0);
    return make_error(std::string("cannot execute: ") + std::strerror(exec_errno), "launch " + spec.argv[0]);
  }

  std::unique_ptr<Target> t(new Target());
  t->pid_ = t->judged_pid_ = pid;
  t->hold_ = std::move(hold);
  {
    std::lock_guard lock(live_launches_mutex);
    live_launches.insert(pid);
  }
  t->launched_ = true;
  t->launch_mark_ = mark;
  t->command_ = join(spec.argv);
  t->started_ = std::chrono::steady_clock::now();
  t->output_fd_ = std::move(read_end);
  t->output_stop_ = std::move(output_stop);
  t->output_thread_ = std::thread([raw = t.get()] { raw->drain_output(); });
  return t;
}

Expected<std::unique_ptr<Target>> Target::attach(pid_t pid) {
  if (pid <= 0 || kill(pid, 0) != 0)
    return make_error(std::string("no such process: ") + std::strerror(errno), "pid " + std::to_string(pid));
  std::unique_ptr<Target> t(new Target());
  t->pid_ = t->judged_pid_ = pid;
  t->command_ = "pid " + std::to_string(pid);
  t->started_ = std::chrono::steady_clock::now();
  t->attach_start_time_ = process_start_time(pid);
  t->attach_exec_identity_ = exec_identity(pid);
  return t;
}

Target::~Target() {
  if (launched_) stop(std::chrono::milliseconds(1000));
  end_output_capture();
  std::lock_guard lock(live_launches_mutex);
  live_launches.erase(pid_);
}

void Target::drain_output() {
  char buf[4096];
  auto keep = [&](ssize_t n) {
    auto now = std::chrono::system_clock::now();
    std::lock_guard lock(output_mutex_);
    std::size_t before = output_.size();
    if (before < kOutputLimit) output_.append(buf, std::min<std::size_t>(n, kOutputLimit - before));
    // When each line began to arrive: judges recognise a warning by when it is
    // printed, not by its words.
    for (std::size_t i = before; i < output_.size(); ++i)
      if (i == 0 || output_[i - 1] == '\n') line_starts_.emplace_back(now, i);
  };
  for (;;) {
    pollfd fds[2] = {{output_fd_.get(), POLLIN, 0}, {output_stop_.get(), POLLIN, 0}};
    if (::poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (fds[1].revents) {
      // Asked to finish: keep what is already in the pipe, then stop. A
      // process that outlived the tree's stop (or an orphan that still holds
      // the pipe) must not keep tracecorr waiting for end-of-file.
      for (std::size_t rounds = 0; rounds < kOutputLimit / sizeof buf; ++rounds) {
        ssize_t n = read(output_fd_.get(), buf, sizeof buf);
        if (n <= 0) break;
        keep(n);
      }
      return;
    }
    ssize_t n = read(output_fd_.get(), buf, sizeof buf);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n <= 0) return;  // every writer closed: the tree is gone
    keep(n);
  }
}

std::vector<OutputLine> Target::output_lines() const {
  std::lock_guard lock(output_mutex_);
  std::vector<OutputLine> lines;
  for (const auto& [at, offset] : line_starts_) {
    auto end = output_.find('\n', offset);
    lines.push_back({at, output_.substr(offset, (end == std::string::npos ? output_.size() : end) - offset)});
  }
  return lines;
}

void Target::end_output_capture() {
  if (output_stop_) {
    std::uint64_t one = 1;
    (void)!write(output_stop_.get(), &one, sizeof one);
  }
  if (output_thread_.joinable()) output_thread_.join();
}

namespace {

bool live(const ProcessStat& st) { return st.state != 'Z' && st.state != 'X'; }

// The members as TreeProcesses, each with its depth below `root` by parent
// links among the members (-1 where they lead elsewhere: reparented away),
// parents before children, orphans last.
std::vector<TreeProcess> tree_of(const std::map<pid_t, ProcessStat>& members, pid_t root) {
  std::map<pid_t, int> depth;
  for (const auto& [pid, st] : members) {
    std::vector<pid_t> path;
    int base = -1;
    for (pid_t at = pid; path.size() <= members.size(); ) {
      if (auto known = depth.find(at); known != depth.end()) {
        base = known->second;
        break;
      }
      path.push_back(at);
      if (at == root) {
        base = 0;
        path.pop_back();
        depth[root] = 0;
        break;
      }
      auto it = members.find(at);
      if (it == members.end() || it == members.find(it->second.ppid)) break;
      at = it->second.ppid;
    }
    // `path` runs from pid up to (not including) the ancestor of known depth.
    for (std::size_t i = 0; i < path.size(); ++i)
      depth[path[i]] = base < 0 ? -1 : base + static_cast<int>(path.size() - i);
  }
  std::vector<TreeProcess> out;
  for (const auto& [pid, st] : members)
    out.push_back(TreeProcess{pid, st.ppid, depth.count(pid) ? depth[pid] : -1, st.comm, st.pgrp == root});
  std::sort(out.begin(), out.end(), [](const TreeProcess& a, const TreeProcess& b) {
    auto key = [](const TreeProcess& p) { return p.depth < 0 ? kMaxTreeDepth : p.depth; };
    return std::make_pair(key(a), a.pid) < std::make_pair(key(b), b.pid);
  });
  return out;
}

}  // namespace

std::vector<TreeProcess> Target::processes() const {
  if (!launched_) {
    auto st = read_process_stat(pid_);
    if (!st) return {};
    return {TreeProcess{pid_, st->ppid, 0, st->comm, true}};
  }
  if (stopped_tree_) return {};
  if (hold_)
    if (auto members = hold_->members()) return held_processes(*members);
  return followed_processes();
}

std::vector<TreeProcess> Target::held_processes(const std::vector<pid_t>& members) const {
  std::map<pid_t, ProcessStat> stats;
  for (pid_t pid : members)
    if (auto st = read_process_stat(pid); st && live(*st)) stats.emplace(pid, *st);
  return tree_of(stats, pid_);
}

std::vector<TreeProcess> Target::followed_processes() const {
  std::map<pid_t, ProcessStat> all;
  std::map<pid_t, std::vector<pid_t>> children;
  // Twice: /proc is listed before the stats are read, and a process forked
  // in between whose parent exited meanwhile (`exec setsid AGENT`: the
  // launched process forks the agent and exits at once) is in neither look
  // but the second.
  for (int look = 0; look < 2; ++look)
    for (int pid : numbered_entries("/proc"))
      if (auto st = all.count(pid) ? std::nullopt : read_process_stat(pid); st && live(*st)) {
        all.emplace(pid, *st);
        children[st->ppid].push_back(pid);
      }
  std::set<pid_t> other_launches;
  {
    std::lock_guard lock(live_launches_mutex);
    other_launches = live_launches;
  }
  other_launches.erase(pid_);
  std::lock_guard lock(members_mutex_);
  auto seen = [&](pid_t pid, const ProcessStat& st) {
    auto it = members_seen_.find(pid);
    return it != members_seen_.end() && it->second == st.start_time;
  };
  // Where the tree is found: the launched process, its group, the members
  // seen before (their parent may have exited), and orphans adopted by
  // tracecorr that are no other launch's: this tree's when it was seen, when
  // no other launch is live to claim it, or when it started with this
  // launch's mark in its environment.
  std::deque<pid_t> queue;
  for (const auto& [pid, st] : all) {
    const bool adopted = st.ppid == ::getpid() && pid != pid_ && !other_launches.count(pid) &&
                         (seen(pid, st) || other_launches.empty() || carries_launch_mark(pid, launch_mark_));
    if (pid == pid_ || st.pgrp == pid_ || seen(pid, st) || adopted) queue.push_back(pid);
  }
  std::map<pid_t, ProcessStat> members;
  while (!queue.empty()) {
    pid_t pid = queue.front();
    queue.pop_front();
    if (members.count(pid) || other_launches.count(pid)) continue;
    members.emplace(pid, all.at(pid));
    for (pid_t child : children[pid]) queue.push_back(child);
  }
  for (const auto& [pid, st] : members)
    if (members_seen_.size() < kMaxMembersSeen) members_seen_[pid] = st.start_time;
  return tree_of(members, pid_);
}

std::string Target::signature(const TreeProcess& p) {
  constexpr std::size_t kMaxCommandLine = 512;
  // A process in the middle of its exec shows its new name before its new
  // arguments (the kernel sets comm, then the stack the command line is read
  // from): an empty command line of a live process is read again, briefly. On
  // a loaded machine the gap was long enough for a restart of `sleep 300` to
  // look like a run at another place than the judged `sleep 300`.
  std::vector<std::string> args;
  for (int attempt = 0; attempt < 50; ++attempt) {
    args = process_strings(p.pid, "cmdline", kMaxCommandLine);
    const char state = task_state(p.pid, p.pid);
    if (!args.empty() || state == 0 || state == 'Z') break;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return "depth " + std::to_string(p.depth) + ": " + join(args);
}

bool Target::judge(const TreeProcess& p, std::string why) {
  auto already = [&] {
    return std::any_of(passed_over_.begin(), passed_over_.end(), [&](const TreeProcess& q) { return q.pid == p.pid; });
  };
  if (already()) return false;
  const std::string sig = signature(p);
  auto run = std::find_if(pass_over_.begin(), pass_over_.end(), [&](const PassOver& r) { return r.signature == sig; });
  if (run != pass_over_.end()) {
    passed_over_.push_back(p);
    passed_over_pidfds_.emplace_back(open_pidfd(p.pid));
    passed_over_seen_ = run->seen;
    return false;
  }
  if (!passed_over_running().empty()) return false;
  judged_reason_ = std::move(why);
  judged_signature_ = sig;
  if (!passed_over_.empty()) {
    judged_reason_ += "; passed over ";
    for (std::size_t i = 0; i < passed_over_.size(); ++i)
      judged_reason_ += (i ? ", " : "") + std::string("pid ") + std::to_string(passed_over_[i].pid) + " (" +
                        passed_over_[i].comm + ")";
    judged_reason_ += ", which did the same before it and exited on its own: " + passed_over_seen_ +
                      " (a run before the agent that stays)";
  }
  std::error_code ec;
  auto exe = std::filesystem::read_symlink("/proc/" + std::to_string(p.pid) + "/exe", ec);
  judged_executable_ = ec ? std::string() : exe.string();
  if (p.pid == judged_pid_) return true;
  judged_pid_ = p.pid;
  judged_pidfd_.reset();
  if (p.pid != pid_) judged_pidfd_.reset(open_pidfd(p.pid));
  return true;
}

std::string Target::passed_over_running() const {
  for (std::size_t i = 0; i < passed_over_.size(); ++i)
    if (passed_over_pidfds_[i] && !pidfd_exited(passed_over_pidfds_[i].get()))
      return "pid " + std::to_string(passed_over_[i].pid) + " (" + passed_over_[i].comm + ")";
  return "";
}

bool Target::terminate_judged(std::chrono::milliseconds grace) {
  if (!launched_ || stopped_tree_ || judged_pid_ == pid_ || !judged_pidfd_ || !alive()) return false;
  const auto deadline = std::chrono::steady_clock::now() + grace;
  send_pidfd_signal(judged_pidfd_.get(), SIGTERM);
  judged_sigtermed_ = true;  // stop() does not send it again, nor wait for it twice
  while (!pidfd_exited(judged_pidfd_.get()) && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  judged_terminated_ = pidfd_exited(judged_pidfd_.get());
  return judged_terminated_;
}

// Only ever reaps termination. waitid(WEXITED) alone is not enough: the kernel
// reports a *ptrace*-stopped tracee to any thread of the tracer's thread group
// whatever the flags ("traditionally we see ptrace'd stopped tasks regardless
// of options"), and tracecorr's record watcher ptraces the target's main
// thread, whose tid is pid_. A plain waitid here consumed that stop: the
// watcher then blocked forever in waitpid and the target looked dead. So peek
// with WNOWAIT and consume only an exit.
std::optional<int> Target::reap(bool block) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  for (;;) {
    siginfo_t info{};
    if (waitid(P_PID, static_cast<id_t>(pid_), &info, WEXITED | WNOHANG | WNOWAIT) != 0) {
      // ECHILD: another wait in this process took the exit (no tracer here
      // may: tracee_wait.hpp). Gone, with its status unknown; never "alive".
      status_taken_elsewhere_ = errno == ECHILD;
      return std::nullopt;
    }
    bool exited = info.si_pid == pid_ && reports_exit(info);
    if (exited) {
      siginfo_t done{};
      if (waitid(P_PID, static_cast<id_t>(pid_), &done, WEXITED | WNOHANG) != 0 || done.si_pid != pid_)
        return std::nullopt;
      return exit_wait_status(done);
    }
    if (!block || std::chrono::steady_clock::now() >= deadline) return std::nullopt;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

bool Target::launched_process_alive() {
  if (wait_status_ || status_taken_elsewhere_) return false;
  if (auto status = reap(false)) {
    wait_status_ = status;
    return false;
  }
  return true;
}

bool Target::alive() {
  if (!launched_) {
    // Not our child: a zombie (exited, not yet reaped by its parent) answers
    // kill(pid, 0) too, and a reused pid names another process.
    if (kill(pid_, 0) != 0) return false;
    if (attach_start_time_ != 0 && process_start_time(pid_) != attach_start_time_) return false;
    return !(task_state(pid_, pid_) == 'Z' && live_task(pid_) == pid_);
  }
  if (judged_pid_ != pid_) {
    launched_process_alive();  // reap the launcher when it ends, whatever we judge
    return judged_pidfd_ && !pidfd_exited(judged_pidfd_.get());
  }
  return launched_process_alive();
}

std::optional<std::string> Target::attached_process_lost() {
  if (launched_) return std::nullopt;
  if (!alive()) return "pid " + std::to_string(pid_) + " exited during the run";
  if (!attach_exec_identity_.empty() && exec_identity(pid_) != attach_exec_identity_)
    return "pid " + std::to_string(pid_) + " exec'd another program during the run";
  return std::nullopt;
}

std::optional<std::string> Target::exit_description() {
  if (alive()) return std::nullopt;
  if (launched_ && judged_pid_ != pid_) {
    std::string text = "pid " + std::to_string(judged_pid_) + " exited (a descendant, not tracecorr's child: status unknown)";
    if (wait_status_) text += "; the launched process " + describe_status(*wait_status_);
    return text;
  }
  if (!wait_status_)
    return status_taken_elsewhere_ ? "exited (its status taken by another wait: unknown)"
                                   : "exited (not our child: status unknown)";
  return describe_status(*wait_status_);
}

std::vector<UniqueFd> Target::signal_tree(const std::vector<TreeProcess>& members, int sig) {
  std::vector<UniqueFd> fds;
  bool group = false;
  for (const auto& p : members) {
    UniqueFd fd(open_pidfd(p.pid));
    if (!fd) continue;  // gone since the scan
    group = group || p.in_group;
    send_pidfd_signal(fd.get(), sig);
    fds.push_back(std::move(fd));
  }
  // The group as one too: its members forked since the scan.
  if (group) kill(-pid_, sig);
  return fds;
}

namespace {

std::string list_processes(const std::vector<TreeProcess>& processes) {
  constexpr std::size_t kNamed = 8;
  std::string text;
  for (std::size_t i = 0; i < processes.size() && i < kNamed; ++i)
    text += (i ? ", " : "") + std::string("pid ") + std::to_string(processes[i].pid) + " (" + processes[i].comm + ")";
  if (processes.size() > kNamed) text += " and " + std::to_string(processes.size() - kNamed) + " more";
  return text;
}

}  // namespace

std::string StoppedTree::describe() const {
  std::string text = "stopped " + std::to_string(processes) + " process" + (processes == 1 ? "" : "es") +
                     " of the launched tree (held by " + hold + ")";
  if (!left_group.empty())
    text += "; " + std::to_string(left_group.size()) + " had left the launched process group (setsid or setpgid): " +
            list_processes(left_group);
  if (!killed.empty())
    text += "; still running after SIGTERM and the grace, killed: " + list_processes(killed);
  if (survivors > 0) text += "; " + std::to_string(survivors) + " still ran after SIGKILL";
  return text;
}

std::string Target::hold_description() const {
  if (stopped_tree_) return stopped_tree_->hold;
  return hold_ ? hold_->description() : std::string();
}

std::string Target::stop(std::chrono::milliseconds grace) {
  if (!launched_) return "left running (attached)";
  if (stopped_tree_) return stopped_how_;
  const bool judged_alive = alive() || judged_terminated_;
  StoppedTree tree;
  tree.hold = hold_description();
  tree.held_by_cgroup = hold_ && hold_->is_cgroup();
  auto members = processes();
  tree.processes = members.size();
  for (const auto& m : members)
    if (!m.in_group) tree.left_group.push_back(m);
  const auto deadline = std::chrono::steady_clock::now() + grace;
  // The judged agent first, alone: a wrapper between it and tracecorr
  // (runuser, su) answers SIGTERM by killing its child 2 s later, cutting
  // short the agent's shutdown flush that the judges read.
  if (judged_alive && judged_pid_ != pid_ && judged_pidfd_ && !judged_sigtermed_) {
    send_pidfd_signal(judged_pidfd_.get(), SIGTERM);
    while (!pidfd_exited(judged_pidfd_.get()) && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  auto signalled = signal_tree(members, SIGTERM);
  wait_for_exit(signalled, deadline);
  // Members forked since the scan got the group's SIGTERM, or none: look again.
  auto left = processes();
  while (!left.empty() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    left = processes();
  }
  if (!left.empty()) {
    tree.killed = left;
    tree.survivors = kill_tree();
  }
  if (!wait_status_) {
    if (auto status = reap(true)) wait_status_ = status;
  }
  reap_adopted_orphans();
  stopped_tree_ = std::move(tree);
  hold_.reset();  // the cgroup is empty: removed
  end_output_capture();
  if (!stopped_tree_->killed.empty())
    stopped_how_ = "did not stop within " + std::to_string(grace.count()) + " ms of SIGTERM; killed " +
                   list_processes(stopped_tree_->killed);
  else if (!judged_alive)
    stopped_how_ = exit_description().value_or("exited");
  else if (judged_pid_ != pid_)
    stopped_how_ = "pid " + std::to_string(judged_pid_) + " stopped by SIGTERM";
  else
    stopped_how_ = exit_description().value_or("stopped");
  return stopped_how_;
}

std::size_t Target::kill_tree() {
  if (hold_ && hold_->is_cgroup()) return hold_->kill_all(kKillWait);
  // The fallback: SIGKILL what is found, until nothing is (a member forking
  // meanwhile is found at the next look).
  const auto deadline = std::chrono::steady_clock::now() + kKillWait;
  for (;;) {
    auto left = processes();
    if (left.empty()) return 0;
    if (std::chrono::steady_clock::now() >= deadline) return left.size();
    auto fds = signal_tree(left, SIGKILL);
    wait_for_exit(fds, std::min(deadline, std::chrono::steady_clock::now() + std::chrono::milliseconds(100)));
  }
}

void Target::reap_adopted_orphans() {
  // Orphans adopted by tracecorr (the fallback's child subreaper) are its
  // children now: their exits are taken here, one by one, never by a wait
  // for any child (which could take another launch's status).
  std::lock_guard lock(members_mutex_);
  for (const auto& [pid, start] : members_seen_) {
    if (pid == pid_) continue;
    auto st = read_process_stat(pid);
    if (!st || st->ppid != ::getpid() || st->start_time != start) continue;
    siginfo_t info{};
    (void)waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOHANG);
  }
}

std::string Target::output() const {
  std::lock_guard lock(output_mutex_);
  return output_;
}

std::string Target::description() const { return command_; }

}  // namespace tracecorr::conform

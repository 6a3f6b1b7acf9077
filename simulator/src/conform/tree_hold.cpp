// See tree_hold.hpp.
#include "tracecorr/conform/tree_hold.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>

#include "tracecorr/fd.hpp"
#include "tracecorr/procfs.hpp"

namespace tracecorr::conform {
namespace {

using Clock = std::chrono::steady_clock;

constexpr const char* kHoldPrefix = "tracecorr-hold-";
// Bound on what is read of cgroup.procs: a tree that forks this many
// processes is not followed process by process (cgroup.kill still ends it).
constexpr std::size_t kMaxProcsBytes = 1 << 20;
constexpr auto kPollInterval = std::chrono::milliseconds(5);

// Reads a small cgroup file whole (bounded); nullopt when it cannot be opened.
std::optional<std::string> read_file(const std::string& path, std::size_t bound = 64 * 1024) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return std::nullopt;
  std::string text;
  char buf[4096];
  while (text.size() < bound) {
    ssize_t n = ::read(fd.get(), buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    text.append(buf, static_cast<std::size_t>(n));
  }
  return text;
}

// Writes `value` to a cgroup control file; errno's text on failure.
std::optional<std::string> write_file(const std::string& path, const std::string& value) {
  UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CLOEXEC));
  if (!fd) return std::string(std::strerror(errno));
  if (::write(fd.get(), value.data(), value.size()) != static_cast<ssize_t>(value.size())) return std::string(std::strerror(errno));
  return std::nullopt;
}

// The cgroup v2 directory this process is in: the cgroup2 mount (from
// mountinfo) joined with the "0::" line of /proc/self/cgroup.
Expected<std::string> own_cgroup_directory() {
  std::ifstream mountinfo("/proc/self/mountinfo");
  std::string mount_point;
  for (std::string line; std::getline(mountinfo, line);) {
    // id parent dev root mount-point options [optional fields] - fstype source super-options
    auto dash = line.find(" - ");
    if (dash == std::string::npos || line.compare(dash + 3, 8, "cgroup2 ") != 0) continue;
    std::istringstream fields(line.substr(0, dash));
    std::string id, parent, dev, root, point;
    if (!(fields >> id >> parent >> dev >> root >> point) || root != "/") continue;
    mount_point = point;
    break;
  }
  if (mount_point.empty()) return make_error("no cgroup v2 hierarchy is mounted");
  std::ifstream cgroup("/proc/self/cgroup");
  for (std::string line; std::getline(cgroup, line);) {
    if (line.rfind("0::", 0) != 0) continue;
    std::string path = line.substr(3);
    if (path.find("..") != std::string::npos || path.find(' ') != std::string::npos)
      return make_error("tracecorr's cgroup v2 path is not below the mount: " + path);
    return mount_point + (path == "/" ? "" : path);
  }
  return make_error("tracecorr is in no cgroup v2 (/proc/self/cgroup has no 0:: line)");
}

bool controller_enabled(const std::string& subtree_control, const std::string& controller) {
  std::istringstream words(subtree_control);
  for (std::string w; words >> w;)
    if (w == controller) return true;
  return false;
}

std::string hold_name() {
  static std::atomic<unsigned> next{0};
  const pid_t self = ::getpid();
  return kHoldPrefix + std::to_string(self) + "-" + std::to_string(process_start_time(self)) + "-" +
         std::to_string(next++);
}

std::vector<pid_t> parse_pids(const std::string& text) {
  std::vector<pid_t> pids;
  std::istringstream lines(text);
  for (long pid; lines >> pid;)
    if (pid > 0) pids.push_back(static_cast<pid_t>(pid));
  return pids;
}

bool populated(const std::string& cgroup) {
  auto events = read_file(cgroup + "/cgroup.events");
  return !events || events->find("populated 0") == std::string::npos;
}

// Every member SIGKILLed, then up to `bound` for the cgroup to empty.
bool kill_cgroup(const std::string& cgroup, std::chrono::milliseconds bound) {
  if (write_file(cgroup + "/cgroup.kill", "1")) {
    // Before Linux 5.14: freeze (no member can fork a new one meanwhile),
    // kill each, thaw (a frozen task still dies of SIGKILL).
    (void)write_file(cgroup + "/cgroup.freeze", "1");
    for (auto until = Clock::now() + std::chrono::milliseconds(500); Clock::now() < until;) {
      auto events = read_file(cgroup + "/cgroup.events");
      if (!events || events->find("frozen 1") != std::string::npos) break;
      std::this_thread::sleep_for(kPollInterval);
    }
    if (auto procs = read_file(cgroup + "/cgroup.procs", kMaxProcsBytes))
      for (pid_t pid : parse_pids(*procs)) ::kill(pid, SIGKILL);
    (void)write_file(cgroup + "/cgroup.freeze", "0");
  }
  for (auto until = Clock::now() + bound; populated(cgroup);) {
    if (Clock::now() >= until) return false;
    std::this_thread::sleep_for(kPollInterval);
  }
  return true;
}

// rmdir, retried while the last members finish exiting.
bool remove_cgroup(const std::string& cgroup) {
  for (int attempt = 0; attempt < 100; ++attempt) {
    if (::rmdir(cgroup.c_str()) == 0 || errno == ENOENT) return true;
    if (errno != EBUSY) return false;
    std::this_thread::sleep_for(kPollInterval);
  }
  return false;
}

void become_child_subreaper() {
  static std::once_flag once;
  std::call_once(once, [] { (void)::prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); });
}

}  // namespace

void remove_abandoned_holds() {
  auto parent = own_cgroup_directory();
  if (!parent) return;
  DIR* dir = ::opendir(parent->c_str());
  if (!dir) return;
  std::vector<std::string> abandoned;
  while (dirent* e = ::readdir(dir)) {
    std::string name = e->d_name;
    if (name.rfind(kHoldPrefix, 0) != 0) continue;
    // tracecorr-hold-PID-STARTTIME-N: its owner runs while that pid has that start time.
    unsigned long long owner = 0, started = 0, n = 0;
    if (std::sscanf(name.c_str() + std::strlen(kHoldPrefix), "%llu-%llu-%llu", &owner, &started, &n) != 3) continue;
    if (owner > 0 && process_start_time(static_cast<pid_t>(owner)) == started) continue;
    abandoned.push_back(*parent + "/" + name);
  }
  ::closedir(dir);
  for (const auto& cgroup : abandoned) {
    kill_cgroup(cgroup, std::chrono::milliseconds(2000));
    remove_cgroup(cgroup);
  }
}

std::unique_ptr<TreeHold> TreeHold::create() {
  std::unique_ptr<TreeHold> hold(new TreeHold());
  const char* forced = std::getenv("TRACECORR_TREE_HOLD");
  if (forced && std::string(forced) == "subreaper") {
    hold->give_up_cgroup("TRACECORR_TREE_HOLD=subreaper");
    return hold;
  }
  auto parent = own_cgroup_directory();
  if (!parent) {
    hold->give_up_cgroup(parent.error().message());
    return hold;
  }
  // A CPU controller below tracecorr's cgroup would make the launched tree
  // one scheduling entity with one cpu.weight: one share of the machine for
  // all its threads, which the timing judges would then see as starvation.
  if (auto control = read_file(*parent + "/cgroup.subtree_control"); control && controller_enabled(*control, "cpu")) {
    hold->give_up_cgroup("the cpu controller is enabled below " + *parent +
                         ": a cgroup of its own would give the launched tree one CPU share");
    return hold;
  }
  static std::once_flag cleaned;
  std::call_once(cleaned, remove_abandoned_holds);
  std::string cgroup = *parent + "/" + hold_name();
  if (::mkdir(cgroup.c_str(), 0755) != 0) {
    hold->give_up_cgroup("cannot create a cgroup in " + *parent + ": " + std::strerror(errno));
    return hold;
  }
  hold->cgroup_ = cgroup;
  hold->description_ = "cgroup " + cgroup;
  return hold;
}

void TreeHold::give_up_cgroup(const std::string& why) {
  if (!cgroup_.empty()) remove_cgroup(cgroup_);
  cgroup_.clear();
  description_ = "no cgroup of its own (" + why +
                 "): followed by process group, parent links and the members seen, tracecorr their child subreaper";
  become_child_subreaper();
}

TreeHold::~TreeHold() {
  if (cgroup_.empty()) return;
  if (populated(cgroup_)) kill_cgroup(cgroup_, std::chrono::milliseconds(2000));
  remove_cgroup(cgroup_);
}

void TreeHold::adopt(pid_t pid) {
  if (cgroup_.empty()) return;
  if (auto failed = write_file(cgroup_ + "/cgroup.procs", std::to_string(pid)))
    give_up_cgroup("cannot move the launched process into " + cgroup_ + ": " + *failed);
}

std::optional<std::vector<pid_t>> TreeHold::members() const {
  if (cgroup_.empty()) return std::nullopt;
  auto procs = read_file(cgroup_ + "/cgroup.procs", kMaxProcsBytes);
  if (!procs) return std::nullopt;
  return parse_pids(*procs);
}

std::size_t TreeHold::kill_all(std::chrono::milliseconds bound) {
  if (cgroup_.empty()) return 0;
  if (kill_cgroup(cgroup_, bound)) return 0;
  auto left = members();
  return left ? left->size() : 1;
}

}  // namespace tracecorr::conform

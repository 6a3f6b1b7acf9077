#include "tracecorr/procfs.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string_view>
#include <sstream>

#include "tracecorr/fd.hpp"

namespace tracecorr {

std::vector<int> numbered_entries(const std::string& directory) {
  std::vector<int> out;
  std::unique_ptr<DIR, int (*)(DIR*)> dir(::opendir(directory.c_str()), ::closedir);
  if (!dir) return out;
  while (const dirent* e = ::readdir(dir.get())) {
    int n = 0;
    const char* end = e->d_name + std::strlen(e->d_name);
    auto [p, ec] = std::from_chars(e->d_name, end, n);
    if (ec == std::errc() && p == end && n >= 0) out.push_back(n);
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::optional<ProcessStat> read_process_stat(pid_t pid) {
  std::string path = "/proc/" + std::to_string(pid) + "/stat";
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return std::nullopt;
  char buf[1024];  // a stat line is a few hundred bytes; comm is at most 16
  ssize_t n = ::read(fd.get(), buf, sizeof buf - 1);
  if (n <= 0) return std::nullopt;
  std::string_view text(buf, static_cast<std::size_t>(n));
  auto open = text.find('('), close = text.rfind(')');  // comm may contain spaces and parentheses
  if (open == std::string_view::npos || close == std::string_view::npos || close < open) return std::nullopt;
  ProcessStat st;
  st.pid = pid;
  st.comm = std::string(text.substr(open + 1, close - open - 1));
  std::istringstream rest{std::string(text.substr(close + 1))};
  std::string field;
  for (int i = 3; i <= 22; ++i) {
    if (!(rest >> field)) return std::nullopt;
    switch (i) {
      case 3: st.state = field.empty() ? '?' : field[0]; break;
      case 4: st.ppid = static_cast<pid_t>(std::strtol(field.c_str(), nullptr, 10)); break;
      case 5: st.pgrp = static_cast<pid_t>(std::strtol(field.c_str(), nullptr, 10)); break;
      case 6: st.session = static_cast<pid_t>(std::strtol(field.c_str(), nullptr, 10)); break;
      case 22: st.start_time = std::strtoull(field.c_str(), nullptr, 10); break;
      default: break;
    }
  }
  return st;
}

pid_t thread_group_of(pid_t tid, pid_t fallback) {
  std::ifstream in("/proc/" + std::to_string(tid) + "/status");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("Tgid:", 0) == 0) return static_cast<pid_t>(std::atol(line.c_str() + 5));
  return fallback;
}

std::vector<std::string> process_strings(pid_t pid, const char* file, std::size_t max_bytes) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/" + file, std::ios::binary);
  std::string text(max_bytes, '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<std::size_t>(std::max<std::streamsize>(in.gcount(), 0)));
  std::vector<std::string> out;
  for (std::size_t at = 0; at < text.size();) {
    const auto end = std::min(text.find('\0', at), text.size());
    out.push_back(text.substr(at, end - at));
    at = end + 1;
  }
  return out;
}

char task_state(pid_t pid, pid_t tid) {
  std::string path = "/proc/" + std::to_string(pid) + (tid == pid ? "" : "/task/" + std::to_string(tid)) + "/stat";
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  char buf[1024];
  ssize_t n = ::read(fd, buf, sizeof buf - 1);
  ::close(fd);
  if (n <= 0) return 0;
  std::string_view text(buf, static_cast<std::size_t>(n));
  auto close = text.rfind(')');  // comm may hold spaces and parentheses
  if (close == std::string_view::npos || close + 2 >= text.size()) return 0;
  return text[close + 2];
}

namespace {
std::string read_small(const std::string& path, std::size_t max_bytes) {
  std::string out;
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return out;
  char buf[4096];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    out.append(buf, static_cast<std::size_t>(n));
    if (out.size() >= max_bytes) break;
  }
  ::close(fd);
  return out;
}
}  // namespace

std::uint64_t process_start_time(pid_t pid) {
  auto st = read_process_stat(pid);
  return st ? st->start_time : 0;
}

bool NamedProcesses::still_named(pid_t pid) {
  const std::uint64_t now = process_start_time(pid);
  if (now == 0) return true;  // nothing under the number now: nothing to mistake
  auto [known, first] = start_times_.emplace(pid, now);
  return first || known->second == now;
}

std::string exec_identity(pid_t pid) { return read_small(process_dir(pid) + "/auxv", 4096); }

std::string executable_of(pid_t pid) {
  std::error_code ec;
  auto exe = std::filesystem::read_symlink("/proc/" + std::to_string(pid) + "/exe", ec);
  return ec ? std::string() : exe.string();
}

pid_t live_task(pid_t pid) {
  char state = task_state(pid, pid);
  if (state != 'Z' && state != 'X') return pid;
  for (int tid : numbered_entries("/proc/" + std::to_string(pid) + "/task")) {
    if (tid == pid) continue;
    char s = task_state(pid, tid);
    if (s != 0 && s != 'Z' && s != 'X') return tid;
  }
  return pid;
}

std::string process_dir(pid_t pid) {
  pid_t task = live_task(pid);
  return "/proc/" + std::to_string(pid) + (task == pid ? "" : "/task/" + std::to_string(task));
}

bool runs_under_qemu_user(pid_t pid) {
  char buf[4096];
  const std::string link = process_dir(pid) + "/exe";
  const ssize_t n = ::readlink(link.c_str(), buf, sizeof buf - 1);
  if (n <= 0) return false;
  const std::string exe(buf, static_cast<std::size_t>(n));
  const auto slash = exe.rfind('/');
  return exe.compare(slash == std::string::npos ? 0 : slash + 1, 5, "qemu-") == 0;
}

}  // namespace tracecorr

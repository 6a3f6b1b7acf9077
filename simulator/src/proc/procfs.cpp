#include "tracecorr/procfs.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <charconv>
#include <cstring>
#include <memory>
#include <string_view>

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
  std::string text = read_small("/proc/" + std::to_string(pid) + "/stat", 4096);
  auto close = text.rfind(')');  // comm may contain spaces and parentheses
  if (close == std::string::npos) return 0;
  std::string_view rest = std::string_view(text).substr(close + 1);
  for (int field = 3; field <= 22; ++field) {
    auto b = rest.find_first_not_of(' ');
    if (b == std::string_view::npos) return 0;
    rest.remove_prefix(b);
    auto e = rest.find(' ');
    std::string_view value = rest.substr(0, e);
    if (field == 22) {
      std::uint64_t v = 0;
      std::from_chars(value.data(), value.data() + value.size(), v);
      return v;
    }
    rest.remove_prefix(e == std::string_view::npos ? rest.size() : e);
  }
  return 0;
}

std::string exec_identity(pid_t pid) { return read_small(process_dir(pid) + "/auxv", 4096); }

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

}  // namespace tracecorr

#include "tracecorr/procfs.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <memory>
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

}  // namespace tracecorr

#include "tracecorr/procfs.hpp"

#include <dirent.h>

#include <algorithm>
#include <charconv>
#include <cstring>
#include <memory>

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

}  // namespace tracecorr

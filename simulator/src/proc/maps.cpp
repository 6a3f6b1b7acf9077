#include "tracecorr/maps.hpp"
#include "tracecorr/procfs.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>

#include "tracecorr/fd.hpp"

namespace tracecorr {
namespace {

constexpr std::string_view kDeletedSuffix = " (deleted)";

bool parse_hex(std::string_view text, std::uint64_t& out) {
  if (text.empty()) return false;
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), out, 16);
  return ec == std::errc() && p == text.data() + text.size();
}

bool parse_dec(std::string_view text, std::uint64_t& out) {
  if (text.empty()) return false;
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), out, 10);
  return ec == std::errc() && p == text.data() + text.size();
}

// Splits off the next space-delimited field, skipping leading spaces.
std::string_view next_field(std::string_view& line) {
  std::size_t begin = line.find_first_not_of(' ');
  if (begin == std::string_view::npos) {
    line = {};
    return {};
  }
  line.remove_prefix(begin);
  std::size_t end = line.find(' ');
  std::string_view field = line.substr(0, end);
  line.remove_prefix(end == std::string_view::npos ? line.size() : end);
  return field;
}

bool parse_line(std::string_view line, Mapping& m) {
  std::string_view range = next_field(line), perms = next_field(line), offset = next_field(line),
                   device = next_field(line), inode = next_field(line);
  std::size_t dash = range.find('-');
  if (dash == std::string_view::npos || !parse_hex(range.substr(0, dash), m.start) ||
      !parse_hex(range.substr(dash + 1), m.end) || m.end < m.start)
    return false;
  if (perms.size() != 4 || !parse_hex(offset, m.file_offset) || device.find(':') == std::string_view::npos ||
      !parse_dec(inode, m.inode))
    return false;
  m.read = perms[0] == 'r';
  m.write = perms[1] == 'w';
  m.exec = perms[2] == 'x';
  m.shared = perms[3] == 's';
  m.device = std::string(device);
  // The path starts after the column padding; everything after that is the
  // path, spaces included (the kernel escapes only '\n' in names).
  std::size_t path_begin = line.find_first_not_of(' ');
  m.path = path_begin == std::string_view::npos ? std::string() : std::string(line.substr(path_begin));
  return true;
}

std::string errno_reason(int err) {
  if (err == ENOENT || err == ESRCH) return "the process is gone";
  if (err == EACCES || err == EPERM) return "permission denied (need root or CAP_SYS_PTRACE)";
  return std::strerror(err);
}

}  // namespace

bool Mapping::deleted() const {
  return path.size() > kDeletedSuffix.size() && path.ends_with(kDeletedSuffix);
}

std::string Mapping::file_path() const {
  return deleted() ? path.substr(0, path.size() - kDeletedSuffix.size()) : path;
}

std::vector<Mapping> parse_maps(std::string_view text) {
  std::vector<Mapping> maps;
  while (!text.empty()) {
    std::size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text.remove_prefix(nl == std::string_view::npos ? text.size() : nl + 1);
    Mapping m;
    if (parse_line(line, m)) maps.push_back(std::move(m));
  }
  return maps;
}

Expected<std::string> read_proc_text(pid_t pid, const std::string& name, std::size_t max_bytes) {
  std::string path = process_dir(pid) + "/" + name;
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return make_error("cannot open: " + errno_reason(errno), path);
  std::string text;
  char buf[65536];
  for (;;) {
    ssize_t n = ::read(fd.get(), buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      return make_error("cannot read: " + errno_reason(errno), path);
    }
    if (n == 0) break;
    if (text.size() + static_cast<std::size_t>(n) > max_bytes)
      return make_error("larger than the " + std::to_string(max_bytes) + "-byte bound", path);
    text.append(buf, static_cast<std::size_t>(n));
  }
  return text;
}

Expected<std::vector<Mapping>> read_maps(pid_t pid) {
  auto text = read_proc_text(pid, "maps");
  if (!text) return text.error();
  // A process that exited between open and read yields an empty file.
  if (text->empty()) return make_error("no mappings: the process is gone or a kernel thread", process_dir(pid) + "/maps");
  return parse_maps(*text);
}

const Mapping* find_mapping(const std::vector<Mapping>& maps, std::uint64_t addr) {
  for (const auto& m : maps)
    if (m.contains(addr)) return &m;
  return nullptr;
}

}  // namespace tracecorr

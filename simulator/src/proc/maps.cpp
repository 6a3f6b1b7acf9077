#include "tracecorr/maps.hpp"
#include "tracecorr/procfs.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <functional>
#include <optional>

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

ErrorKind errno_kind(int err) {
  if (err == ENOENT || err == ESRCH) return ErrorKind::kGone;
  if (err == EACCES || err == EPERM) return ErrorKind::kPermission;
  return ErrorKind::kUnspecified;
}

std::string errno_reason(int err) {
  if (err == ENOENT || err == ESRCH) return "the process is gone";
  if (err == EACCES || err == EPERM) return "permission denied (need root or CAP_SYS_PTRACE)";
  return std::strerror(err);
}

// Collects the VmFlags of the wanted mappings from smaps, one line at a time:
// a header line (the maps format) names the mapping the following "Key: value"
// lines describe.
class VmFlagsScanner {
 public:
  explicit VmFlagsScanner(std::span<const std::uint64_t> starts) : starts_(starts) {}

  void line(std::string_view text) {
    if (text.starts_with("VmFlags:")) {
      if (current_ && !found(*current_)) found_.emplace_back(*current_, parse_codes(text.substr(8)));
      current_.reset();  // one VmFlags line per mapping
      return;
    }
    // "Key: value" lines have a colon in their first field; header lines do not.
    std::string_view rest = text;
    std::string_view first = next_field(rest);
    if (first.empty() || first.back() == ':') return;
    Mapping m;
    current_.reset();
    if (!parse_line(text, m)) return;
    for (auto start : starts_)
      if (start == m.start) current_ = start;
  }

  bool complete() const { return found_.size() == unique_starts(); }

  std::vector<std::pair<std::uint64_t, VmFlags>> result() const {
    std::vector<std::pair<std::uint64_t, VmFlags>> out;
    for (auto start : starts_)
      for (const auto& f : found_)
        if (f.first == start && std::none_of(out.begin(), out.end(), [&](const auto& o) { return o.first == start; }))
          out.push_back(f);
    return out;
  }

 private:
  static VmFlags parse_codes(std::string_view text) {
    VmFlags flags;
    for (std::string_view code = next_field(text); !code.empty() && flags.codes.size() < VmFlags::kMaxCodes;
         code = next_field(text))
      flags.codes.emplace_back(code.substr(0, 8));  // codes are two letters; a longer token is kept short
    return flags;
  }
  bool found(std::uint64_t start) const {
    return std::any_of(found_.begin(), found_.end(), [&](const auto& f) { return f.first == start; });
  }
  std::size_t unique_starts() const {
    std::size_t n = 0;
    for (std::size_t i = 0; i < starts_.size(); ++i)
      if (std::find(starts_.begin(), starts_.begin() + static_cast<std::ptrdiff_t>(i), starts_[i]) ==
          starts_.begin() + static_cast<std::ptrdiff_t>(i))
        ++n;
    return n;
  }

  std::span<const std::uint64_t> starts_;
  std::optional<std::uint64_t> current_;
  std::vector<std::pair<std::uint64_t, VmFlags>> found_;
};

// Reads `path` (a /proc file: read in chunks, its size unknown) and hands
// each chunk to `take` until it returns false or the file ends.
Status for_each_chunk(const std::string& path, const std::function<bool(std::string_view)>& take) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) {
    const int err = errno;
    return make_error(errno_kind(err), "cannot open: " + errno_reason(err), path);
  }
  char buf[65536];
  for (;;) {
    ssize_t n = ::read(fd.get(), buf, sizeof buf);
    if (n < 0) {
      const int err = errno;
      if (err == EINTR) continue;
      return make_error(errno_kind(err), "cannot read: " + errno_reason(err), path);
    }
    if (n == 0 || !take(std::string_view(buf, static_cast<std::size_t>(n)))) return Ok{};
  }
}

}  // namespace

bool VmFlags::has(std::string_view code) const {
  return std::find(codes.begin(), codes.end(), code) != codes.end();
}

std::vector<std::pair<std::uint64_t, VmFlags>> parse_smaps_vm_flags(std::string_view text,
                                                                    std::span<const std::uint64_t> starts) {
  VmFlagsScanner scanner(starts);
  while (!text.empty() && !scanner.complete()) {
    std::size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text.remove_prefix(nl == std::string_view::npos ? text.size() : nl + 1);
    if (line.size() <= kMaxSmapsLine) scanner.line(line);
  }
  return scanner.result();
}

Expected<std::vector<std::pair<std::uint64_t, VmFlags>>> read_vm_flags(pid_t pid, std::span<const std::uint64_t> starts) {
  std::string path = process_dir(pid) + "/smaps";
  VmFlagsScanner scanner(starts);
  std::string line;
  bool overlong = false;  // inside a line past the bound: skipped up to its newline
  auto st = for_each_chunk(path, [&](std::string_view chunk) {
    while (!chunk.empty()) {
      std::size_t nl = chunk.find('\n');
      std::string_view piece = chunk.substr(0, nl);
      chunk.remove_prefix(nl == std::string_view::npos ? chunk.size() : nl + 1);
      if (!overlong) {
        if (line.size() + piece.size() > kMaxSmapsLine) {
          overlong = true;
          line.clear();
        } else {
          line += piece;
        }
      }
      if (nl == std::string_view::npos) break;  // the line goes on in the next chunk
      if (!overlong) scanner.line(line);
      line.clear();
      overlong = false;
    }
    return !scanner.complete();
  });
  if (!st) return st.error();
  if (!line.empty() && !overlong) scanner.line(line);
  return scanner.result();
}

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
  std::string text;
  bool too_long = false;
  auto st = for_each_chunk(path, [&](std::string_view chunk) {
    too_long = text.size() + chunk.size() > max_bytes;
    if (!too_long) text.append(chunk);
    return !too_long;
  });
  if (!st) return st.error();
  if (too_long) return make_error(ErrorKind::kTooLong, "larger than the " + std::to_string(max_bytes) + "-byte bound", path);
  return text;
}

Expected<std::vector<Mapping>> read_maps(pid_t pid) {
  auto text = read_proc_text(pid, "maps");
  if (!text) return text.error();
  // A process that exited between open and read yields an empty file.
  if (text->empty())
    return make_error(ErrorKind::kGone, "no mappings: the process is gone or a kernel thread", process_dir(pid) + "/maps");
  return parse_maps(*text);
}

const Mapping* find_mapping(const std::vector<Mapping>& maps, std::uint64_t addr) {
  for (const auto& m : maps)
    if (m.contains(addr)) return &m;
  return nullptr;
}

}  // namespace tracecorr

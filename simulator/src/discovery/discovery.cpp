#include "tracecorr/discovery.hpp"

#include <elf.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <cctype>
#include <optional>
#include <string_view>

#include "tracecorr/procfs.hpp"
#include "tracecorr/socket.hpp"

namespace tracecorr {
namespace {

std::string map_files_entry(pid_t pid, const Mapping& m) {
  char range[64];
  std::snprintf(range, sizeof range, "%llx-%llx", static_cast<unsigned long long>(m.start),
                static_cast<unsigned long long>(m.end));
  return process_dir(pid) + "/map_files/" + range;
}

// The cheap filter for libraries whose name does not match: only files named
// like shared objects are worth opening.
bool looks_like_shared_object(const std::string& path) {
  auto slash = path.rfind('/');
  std::string_view base = std::string_view(path).substr(slash == std::string::npos ? 0 : slash + 1);
  auto so = base.find(".so");
  if (so == std::string_view::npos) return false;
  auto after = base.substr(so + 3);
  return after.empty() || after.front() == '.';
}

// The library name pattern, compiled to what it can express: ".*/" then a
// literal, at most one group of one character class repeated ("([\w-]*)" or
// "+"), then a literal, none of them containing '/'. So the match is on the
// basename, in one pass. std::regex is not used because libstdc++'s matcher
// recurses per character and overflows the stack on long hostile paths.
struct NamePattern {
  std::string prefix, suffix;
  bool has_group = false;
  bool group_nonempty = false;  // "+" rather than "*"
  bool word = false, digit = false;
  std::string chars;  // literal characters of the class
  std::vector<std::pair<char, char>> ranges;

  bool in_class(char c) const {
    auto u = static_cast<unsigned char>(c);
    if (word && (std::isalnum(u) || c == '_')) return true;
    if (digit && std::isdigit(u)) return true;
    if (chars.find(c) != std::string::npos) return true;
    for (auto [lo, hi] : ranges)
      if (c >= lo && c <= hi) return true;
    return false;
  }
};

// Reads a literal up to the group or the end; nullopt on anything else.
std::optional<std::string> parse_literal(std::string_view& re) {
  std::string out;
  while (!re.empty() && re.front() != '(') {
    char c = re.front();
    if (c == '\\') {
      if (re.size() < 2 || std::isalnum(static_cast<unsigned char>(re[1]))) return std::nullopt;
      out += re[1];
      re.remove_prefix(2);
      continue;
    }
    if (std::strchr(".[]{}*+?|^$)", c) || c == '/') return std::nullopt;
    out += c;
    re.remove_prefix(1);
  }
  return out;
}

std::optional<NamePattern> compile_name_pattern(std::string_view re) {
  NamePattern p;
  if (re.substr(0, 3) != ".*/") return std::nullopt;
  re.remove_prefix(3);
  auto prefix = parse_literal(re);
  if (!prefix) return std::nullopt;
  p.prefix = *prefix;
  if (!re.empty()) {
    if (re.substr(0, 2) != "([") return std::nullopt;
    re.remove_prefix(2);
    p.has_group = true;
    while (!re.empty() && re.front() != ']') {
      if (re.front() == '\\' && re.size() >= 2) {
        char k = re[1];
        if (k == 'w') p.word = true;
        else if (k == 'd') p.digit = true;
        else if (!std::isalnum(static_cast<unsigned char>(k))) p.chars += k;
        else return std::nullopt;
        re.remove_prefix(2);
      } else if (re.size() >= 3 && re[1] == '-' && re[2] != ']') {
        p.ranges.emplace_back(re[0], re[2]);
        re.remove_prefix(3);
      } else {
        if (re.front() == '^' || re.front() == '/') return std::nullopt;
        p.chars += re.front();
        re.remove_prefix(1);
      }
    }
    if (re.substr(0, 3) == "]*)") p.group_nonempty = false;
    else if (re.substr(0, 3) == "]+)") p.group_nonempty = true;
    else return std::nullopt;
    re.remove_prefix(3);
    auto suffix = parse_literal(re);
    if (!suffix || !re.empty()) return std::nullopt;
    p.suffix = *suffix;
  }
  return p;
}

const std::optional<NamePattern>& cached_pattern(const std::string& regex) {
  static thread_local std::map<std::string, std::optional<NamePattern>> compiled;
  auto it = compiled.find(regex);
  if (it == compiled.end()) it = compiled.emplace(regex, compile_name_pattern(regex)).first;
  return it->second;
}

}  // namespace

bool library_name_pattern_supported(const std::string& regex) { return cached_pattern(regex).has_value(); }

bool library_name_matches(const std::string& path, const std::string& regex, std::string* suffix) {
  const auto& p = cached_pattern(regex);
  if (!p) return false;
  auto slash = path.rfind('/');
  if (slash == std::string::npos) return false;
  // ".*" does not cross a newline (ECMAScript), so neither does the directory part.
  if (std::memchr(path.data(), '\n', slash) != nullptr) return false;
  std::string_view base = std::string_view(path).substr(slash + 1);
  if (base.size() < p->prefix.size() + p->suffix.size()) return false;
  if (base.substr(0, p->prefix.size()) != p->prefix) return false;
  if (base.substr(base.size() - p->suffix.size()) != p->suffix) return false;
  std::string_view middle = base.substr(p->prefix.size(), base.size() - p->prefix.size() - p->suffix.size());
  if (!p->has_group) return middle.empty();
  if (p->group_nonempty && middle.empty()) return false;
  for (char c : middle)
    if (!p->in_class(c)) return false;
  if (suffix) *suffix = std::string(middle);
  return true;
}

namespace {

// The file behind a mapping is what the mapping says it is: a regular file
// with the mapping's device and inode. Anything else (a FIFO or device the
// target put at the path after the mapping's file went away) is refused.
// map_files is the kernel's own link to the mapped file, so only its type is
// checked there (overlay filesystems may show another device in maps).
Status check_mapped_file(int fd, const Mapping& m, const std::string& where, bool check_identity) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) return make_error(std::string("fstat failed: ") + std::strerror(errno), where);
  if (!S_ISREG(st.st_mode)) return make_error("not a regular file", where);
  if (!check_identity) return Ok{};
  char device[32];
  std::snprintf(device, sizeof device, "%02x:%02x", major(st.st_dev), minor(st.st_dev));
  if (st.st_ino != m.inode || m.device != device)
    return make_error("not the mapped file (device " + std::string(device) + " inode " + std::to_string(st.st_ino) +
                          ", the mapping has " + m.device + " inode " + std::to_string(m.inode) + ")",
                      where);
  return Ok{};
}

}  // namespace

Expected<UniqueFd> open_mapped_file(pid_t pid, const Mapping& m) {
  // O_NONBLOCK: a FIFO or device at a target-named path must not block the
  // open; O_NOFOLLOW: the last component is the mapped file, not a link to it.
  constexpr int kFlags = O_RDONLY | O_NONBLOCK | O_CLOEXEC;
  std::string entry = map_files_entry(pid, m);
  std::string map_files_problem;
  if (UniqueFd fd(::open(entry.c_str(), kFlags)); fd) {
    auto ok = check_mapped_file(fd.get(), m, entry, false);
    if (ok) return fd;
    map_files_problem = ok.error().what + " via map_files";
  } else {
    map_files_problem = std::string(std::strerror(errno)) + " via map_files";
  }
  // map_files needs CAP_SYS_ADMIN on older kernels; the path inside the
  // target's root is the next best thing (not for deleted files).
  std::string in_root_problem;
  if (auto in_root = open_in_target_root(pid, m.file_path(), kFlags | O_NOFOLLOW)) {
    auto ok = check_mapped_file(in_root->get(), m, m.file_path() + " in the root of pid " + std::to_string(pid), true);
    if (ok) return std::move(*in_root);
    in_root_problem = ok.error().what;
  } else {
    in_root_problem = in_root.error().what;
  }
  return make_error("cannot open the mapped file (" + map_files_problem + "; " + in_root_problem + " in the target's root)",
                    m.path + " in pid " + std::to_string(pid));
}

Expected<elf::LibraryAnalysis> LibraryCache::analyze(pid_t pid, const Mapping& m, const DiscoveryOptions& o) {
  // stat (not open) first: a cache hit costs one syscall.
  struct stat st {};
  std::string key;
  if (::stat(map_files_entry(pid, m).c_str(), &st) == 0) {
    key = std::to_string(st.st_dev) + ":" + std::to_string(st.st_ino) + ":" + std::to_string(st.st_mtim.tv_sec) + "." +
          std::to_string(st.st_mtim.tv_nsec) + ":" + std::to_string(st.st_size) + ":" + o.process_symbol + ":" +
          o.tls_symbol;
    if (auto it = cache_.find(key); it != cache_.end()) return it->second;
  }
  auto fd = open_mapped_file(pid, m);
  if (!fd) return fd.error();
  ++analyses_;
  auto analysis = elf::analyze_library(fd->get(), m.file_path(), o.process_symbol, o.tls_symbol);
  if (!key.empty()) cache_.emplace(key, analysis);
  return analysis;
}

std::string describe(const std::vector<PassedOver>& passed_over) {
  std::string out;
  for (const auto& p : passed_over) out += (out.empty() ? "" : ", ") + p.symbol + " in " + p.path;
  return out;
}

Expected<std::optional<AgentLibrary>> discover_process(pid_t pid, const DiscoveryOptions& o, LibraryCache& cache,
                                                       std::vector<PassedOver>* passed_over) {
  auto maps = read_maps(pid);
  if (!maps) return maps.error();

  struct Candidate {
    const Mapping* base = nullptr;  // file offset 0
    const Mapping* first = nullptr;
    bool name_matches = false;
    std::string suffix;
  };
  // One entry per mapped file (device + inode), in address order.
  std::vector<std::pair<std::string, Candidate>> files;
  for (const auto& m : *maps) {
    if (!m.file_backed()) continue;
    std::string id = m.device + ":" + std::to_string(m.inode);
    auto it = std::find_if(files.begin(), files.end(), [&](const auto& f) { return f.first == id; });
    if (it == files.end()) {
      Candidate c;
      c.first = &m;
      c.name_matches = library_name_matches(m.file_path(), o.name_regex, &c.suffix);
      files.emplace_back(id, c);
      it = files.end() - 1;
    }
    if (m.file_offset == 0 && (!it->second.base || m.start < it->second.base->start)) it->second.base = &m;
  }

  std::optional<AgentLibrary> best;
  int best_score = -1;
  for (auto& [id, c] : files) {
    // A program is any other file mapped from its start (where ELF headers
    // are): qemu-user maps a guest's code without execute permission, so the
    // permission says nothing. Files that are no ELF fail analysis once per cache.
    const bool shared_object = looks_like_shared_object(c.first->file_path());
    if (!c.name_matches && !(o.look_past_names && shared_object) &&
        !(o.look_in_executables && !shared_object && c.base))
      continue;
    auto analysis = cache.analyze(pid, c.base ? *c.base : *c.first, o);
    if (!analysis) {
      // A library that matches by name but cannot be analysed is still the
      // agent library: report it with what we know. Others are skipped.
      if (!c.name_matches) continue;
      if (best_score >= 1) continue;
      AgentLibrary lib;
      lib.pid = pid;
      lib.path = c.first->file_path();
      lib.deleted = c.first->deleted();
      lib.name_matches = true;
      lib.name_suffix = c.suffix;
      lib.elf.path = lib.path;
      lib.analysis_error = analysis.error().message();
      best = std::move(lib);
      best_score = 1;
      continue;
    }
    if (passed_over)
      for (const auto& name : analysis->tls_lookalikes)
        if (passed_over->size() < elf::kMaxTlsLookalikes) passed_over->push_back({c.first->file_path(), name});
    bool defines = (analysis->process_symbol && analysis->process_symbol->defined()) ||
                   (analysis->tls && analysis->tls->defined());
    if (!c.name_matches && !defines) continue;
    int score = (defines ? 2 : 0) + (c.name_matches ? 1 : 0);
    if (score <= best_score) continue;

    AgentLibrary lib;
    lib.pid = pid;
    lib.path = c.first->file_path();
    lib.deleted = c.first->deleted();
    lib.name_matches = c.name_matches;
    lib.name_suffix = c.suffix;
    lib.elf = *analysis;
    if (c.base) {
      // The mapping at file offset 0 holds the first PT_LOAD, page aligned.
      std::uint64_t page = static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
      lib.base_mapping_start = c.base->start;
      lib.load_bias = c.base->start - (lib.elf.first_load_vaddr & ~(page - 1));
      if (lib.elf.process_symbol && lib.elf.process_symbol->defined())
        lib.process_pointer_addr = lib.load_bias + lib.elf.process_symbol->value;
      if (lib.elf.tls_access.descriptor_vaddr)
        lib.tls_descriptor_addr = lib.load_bias + *lib.elf.tls_access.descriptor_vaddr;
    }
    best = std::move(lib);
    best_score = score;
  }
  return best;
}

bool process_pointer_settled(const AgentLibrary& library, const ProcessMemory& memory) {
  if (!library.process_pointer_addr) return false;
  const std::uint64_t address = *library.process_pointer_addr;
  auto maps = read_maps(library.pid);
  if (!maps) return false;
  const auto* m = find_mapping(*maps, address);
  if (!m || !m->write) return false;  // the data segment is not placed yet
  const auto& file_bytes = library.elf.process_pointer_in_file;
  if (!file_bytes || *file_bytes == 0) return true;
  auto value = memory.read_u64(address);
  return value && *value != *file_bytes;  // still the file's bytes: not zeroed or relocated yet
}

const char* to_string(CLibrary c) {
  switch (c) {
    case CLibrary::Unknown: return "unknown";
    case CLibrary::Glibc: return "glibc";
    case CLibrary::Musl: return "musl";
  }
  return "?";
}

std::optional<CLibrary> c_library_of_file(const std::string& path) {
  auto slash = path.rfind('/');
  std::string_view base = std::string_view(path).substr(slash == std::string::npos ? 0 : slash + 1);
  // glibc: its loader and libc.so.6 (its libc.so is a linker script, never mapped).
  if (base.substr(0, 8) == "ld-linux" || base == "libc.so.6") return CLibrary::Glibc;
  // musl: one file, loader and C library, installed as ld-musl-ARCH.so.1 or
  // libc.musl-ARCH.so.1 (Alpine) or libc.so (Debian's musl, the link's target).
  if (base.substr(0, 8) == "ld-musl-" || base.substr(0, 10) == "libc.musl-" || base == "libc.so") return CLibrary::Musl;
  return std::nullopt;
}

Expected<CLibrary> detect_c_library(pid_t pid, elf::Machine machine) {
  auto maps = read_maps(pid);
  if (!maps) return maps.error();
  std::optional<CLibrary> found;
  std::vector<std::string> seen;  // device:inode of files looked at
  for (const auto& m : *maps) {
    if (!m.file_backed()) continue;
    auto library = c_library_of_file(m.file_path());
    if (!library) continue;
    std::string id = m.device + ":" + std::to_string(m.inode);
    if (std::find(seen.begin(), seen.end(), id) != seen.end()) continue;
    seen.push_back(id);
    // Under qemu-user the process maps qemu's own C library beside the
    // guest's: only the file built for `machine` counts.
    auto fd = open_mapped_file(pid, m);
    if (!fd) continue;
    Elf64_Ehdr header;
    if (::pread(fd->get(), &header, sizeof header, 0) != static_cast<ssize_t>(sizeof header)) continue;
    if (std::memcmp(header.e_ident, ELFMAG, SELFMAG) != 0 || elf::machine_of(header.e_machine) != machine) continue;
    if (found && *found != *library) return CLibrary::Unknown;  // both: nothing to go by
    found = library;
  }
  return found.value_or(CLibrary::Unknown);
}

std::vector<pid_t> list_processes() {
  std::vector<pid_t> pids;
  for (int pid : numbered_entries("/proc"))
    if (pid > 0) pids.push_back(pid);
  return pids;
}

}  // namespace tracecorr

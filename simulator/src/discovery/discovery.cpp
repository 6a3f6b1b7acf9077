#include "tracecorr/discovery.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <regex>

#include "tracecorr/procfs.hpp"
#include "tracecorr/socket.hpp"
#include "tracecorr/spec_registry.hpp"

namespace tracecorr {
namespace {

std::string map_files_entry(pid_t pid, const Mapping& m) {
  char range[64];
  std::snprintf(range, sizeof range, "%llx-%llx", static_cast<unsigned long long>(m.start),
                static_cast<unsigned long long>(m.end));
  return "/proc/" + std::to_string(pid) + "/map_files/" + range;
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

const std::regex& cached_regex(const std::string& pattern) {
  static thread_local std::map<std::string, std::regex> compiled;
  auto it = compiled.find(pattern);
  if (it == compiled.end()) it = compiled.emplace(pattern, std::regex(pattern, std::regex::ECMAScript)).first;
  return it->second;
}

}  // namespace

DiscoveryOptions DiscoveryOptions::defaults() {
  DiscoveryOptions o;
  o.name_regex = std::string(spec::kLibraryNameRegex);
  o.storage_symbol = std::string(spec::kProcessStorageSymbol);
  o.tls_symbol = std::string(spec::kTlsSymbol);
  return o;
}

bool library_name_matches(const std::string& path, const std::string& regex, std::string* suffix) {
  std::smatch match;
  if (!std::regex_match(path, match, cached_regex(regex))) return false;
  if (suffix) *suffix = match.size() > 1 ? match[1].str() : std::string();
  return true;
}

Expected<UniqueFd> open_mapped_file(pid_t pid, const Mapping& m) {
  std::string entry = map_files_entry(pid, m);
  UniqueFd fd(::open(entry.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd) return fd;
  int err = errno;
  // map_files needs CAP_SYS_ADMIN on older kernels; the path inside the
  // target's root is the next best thing (not for deleted files).
  auto in_root = open_in_target_root(pid, m.file_path(), O_RDONLY);
  if (in_root) return in_root;
  return make_error(std::string("cannot open the mapped file (") + std::strerror(err) + " via map_files; " +
                        in_root.error().what + " in the target's root)",
                    m.path + " in pid " + std::to_string(pid));
}

Expected<elf::LibraryAnalysis> LibraryCache::analyze(pid_t pid, const Mapping& m, const DiscoveryOptions& o) {
  // stat (not open) first: a cache hit costs one syscall.
  struct stat st {};
  std::string key;
  if (::stat(map_files_entry(pid, m).c_str(), &st) == 0) {
    key = std::to_string(st.st_dev) + ":" + std::to_string(st.st_ino) + ":" + std::to_string(st.st_mtim.tv_sec) + "." +
          std::to_string(st.st_mtim.tv_nsec) + ":" + std::to_string(st.st_size) + ":" + o.storage_symbol + ":" +
          o.tls_symbol;
    if (auto it = cache_.find(key); it != cache_.end()) return it->second;
  }
  auto fd = open_mapped_file(pid, m);
  if (!fd) return fd.error();
  ++analyses_;
  auto analysis = elf::analyze_library(fd->get(), m.file_path(), o.storage_symbol, o.tls_symbol);
  if (!key.empty()) cache_.emplace(key, analysis);
  return analysis;
}

Expected<std::optional<AgentLibrary>> discover_process(pid_t pid, const DiscoveryOptions& o, LibraryCache& cache) {
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
    if (!c.name_matches && !(o.look_past_names && looks_like_shared_object(c.first->file_path()))) continue;
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
    bool defines = (analysis->process_storage && analysis->process_storage->defined()) ||
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
      if (lib.elf.process_storage && lib.elf.process_storage->defined())
        lib.storage_pointer_addr = lib.load_bias + lib.elf.process_storage->value;
      if (lib.elf.tls_access.descriptor_vaddr)
        lib.tls_descriptor_addr = lib.load_bias + *lib.elf.tls_access.descriptor_vaddr;
    }
    best = std::move(lib);
    best_score = score;
  }
  return best;
}

bool storage_pointer_settled(const AgentLibrary& library, const ProcessMemory& memory) {
  if (!library.storage_pointer_addr) return false;
  const std::uint64_t address = *library.storage_pointer_addr;
  auto maps = read_maps(library.pid);
  if (!maps) return false;
  const auto* m = find_mapping(*maps, address);
  if (!m || !m->write) return false;  // the data segment is not placed yet
  const auto& file_bytes = library.elf.storage_bytes_in_file;
  if (!file_bytes || *file_bytes == 0) return true;
  auto value = memory.read_u64(address);
  return value && *value != *file_bytes;  // still the file's bytes: not zeroed or relocated yet
}

std::vector<pid_t> list_processes() {
  std::vector<pid_t> pids;
  for (int pid : numbered_entries("/proc"))
    if (pid > 0) pids.push_back(pid);
  return pids;
}

}  // namespace tracecorr

// Finding a process context mapping by the names the OTEP lists.
#include <algorithm>
#include <array>

#include "tracecorr/process_context.hpp"

namespace tracecorr::process_context {
namespace {

constexpr std::array kKinds{MappingKind::AnonShmem, MappingKind::Anon, MappingKind::Memfd};

}  // namespace

std::string_view to_string(MappingKind kind) {
  switch (kind) {
    case MappingKind::AnonShmem: return "anon_shmem";
    case MappingKind::Anon: return "anon";
    case MappingKind::Memfd: return "memfd";
  }
  return "unknown";
}

std::string_view name_prefix(MappingKind kind) {
  // The names the kernel gives each way of publishing (the OTEP's reading
  // step 1). The bracketed two end in ']' so that "[anon:OTEL_CTXX]" is not
  // one; a memfd name is "/memfd:" + the name given to memfd_create.
  switch (kind) {
    case MappingKind::AnonShmem: return "[anon_shmem:OTEL_CTX]";
    case MappingKind::Anon: return "[anon:OTEL_CTX]";
    case MappingKind::Memfd: return "/memfd:OTEL_CTX";
  }
  return {};
}

std::optional<MappingKind> kind_of_mapping_name(std::string_view name) {
  for (auto kind : kKinds)
    if (name.starts_with(name_prefix(kind))) return kind;
  return std::nullopt;
}

std::vector<ContextMapping> find_context_mappings(const std::vector<Mapping>& maps) {
  std::vector<ContextMapping> found;
  for (const auto& m : maps)
    if (auto kind = kind_of_mapping_name(m.path)) found.push_back({m, *kind, std::nullopt});
  std::sort(found.begin(), found.end(), [](const auto& a, const auto& b) { return a.mapping.start < b.mapping.start; });
  return found;
}

Expected<std::vector<ContextMapping>> discover(pid_t pid, DontFork dont_fork, bool anon_shmem_only) {
  auto maps = read_maps(pid);
  if (!maps) return maps.error();
  auto found = find_context_mappings(*maps);
  if (anon_shmem_only)
    std::erase_if(found, [](const ContextMapping& m) { return m.kind != MappingKind::AnonShmem; });
  if (found.empty() || dont_fork == DontFork::kSkip) return found;
  std::vector<std::uint64_t> starts;
  for (const auto& f : found)
    if (starts.size() < kMaxMappingsRead) starts.push_back(f.mapping.start);
  // smaps unreadable (or the process gone since): dont_fork stays unknown;
  // the mappings themselves were seen.
  if (auto flags = read_vm_flags(pid, starts))
    for (auto& f : found)
      for (const auto& [start, vm] : *flags)
        if (start == f.mapping.start) f.dont_fork = vm.has("dc");
  return found;
}

std::vector<Mapping> find_misnamed_headers(const std::vector<Mapping>& maps, const ProcessMemory& memory) {
  std::vector<Mapping> found;
  std::size_t looked = 0;
  for (const auto& m : maps) {
    if (looked == kMisnamedLookBound) break;
    if (kind_of_mapping_name(m.path) || !m.read || !m.write) continue;
    // A memfd is a file to the kernel (an inode, a path): the only file looked at.
    const std::string_view name = m.path;
    const bool could_hold_one = name.starts_with("/memfd:") || (!m.file_backed() && (name.empty() || name.starts_with("[anon")));
    if (!could_hold_one || m.end - m.start < TC_PCTX_HEADER_SIZE) continue;
    ++looked;
    std::array<std::uint8_t, 8> signature{};
    if (!memory.read(m.start, signature)) continue;
    std::uint64_t word = 0;
    for (std::size_t i = 0; i < signature.size(); ++i) word |= std::uint64_t{signature[i]} << (8 * i);
    if (word == TC_PCTX_SIGNATURE_LE) found.push_back(m);
  }
  return found;
}

}  // namespace tracecorr::process_context

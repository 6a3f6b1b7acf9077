// One look at a process: its context mappings counted, the first few read and decoded.
#include <unistd.h>

#include <algorithm>

#include "tracecorr/procfs.hpp"
#include "tracecorr/process_context.hpp"

namespace tracecorr::process_context {

Expected<Snapshot> take_snapshot(pid_t pid, const ReadOptions& read, const DecodeLimits& decode, DontFork dont_fork) {
  auto mappings = discover(pid, dont_fork);
  if (!mappings) return mappings.error();
  Snapshot out;
  out.pid = pid;
  out.mappings_found = mappings->size();
  if (mappings->size() > kMaxMappingsRead) mappings->resize(kMaxMappingsRead);
  LiveProcessMemory memory(pid);
  for (auto& mapping : *mappings) {
    MappingSnapshot m;
    m.read = read_context(memory, mapping.mapping.start, read);
    if (m.read.ok()) m.decoded = decode_payload(m.read.payload, decode);
    m.mapping = std::move(mapping);
    out.mappings.push_back(std::move(m));
  }
  // After the reads: every timestamp they saw was written before this.
  out.boottime_now_ns = boottime_ns();
  const long ticks_per_second = ::sysconf(_SC_CLK_TCK);
  if (ticks_per_second > 0) {
    out.clock_tick_ns = 1000000000ull / static_cast<std::uint64_t>(ticks_per_second);
    // /proc/PID/stat's start time counts clock ticks on the boot-time clock.
    if (std::uint64_t start = process_start_time(pid)) out.process_start_boottime_ns = start * out.clock_tick_ns;
  }
  return out;
}

std::optional<KeyMapRefresher::KeyMap> KeyMapRefresher::refresh() {
  ++requests_;
  const auto now = std::chrono::steady_clock::now();
  const auto wait = last_failed_ ? std::min(min_interval_, kRetryAfterFailure) : min_interval_;
  if (last_read_ && ((wait == kOncePerLook && !last_failed_) || now - *last_read_ < wait)) return last_;
  last_read_ = now;
  ++reads_;
  auto fresh = read_(pid_);
  last_failed_ = !fresh;
  if (fresh) last_ = std::move(fresh);
  return last_;
}

}  // namespace tracecorr::process_context

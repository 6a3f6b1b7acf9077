// Thin RAII loader over the bpftool-generated skeletons of sampler.bpf.c and
// the benchmark's baselines (empty.bpf.c, floor.bpf.c): open/load, the tracked-process map, one cpu-clock perf event
// per online CPU, the ring buffer and the per-CPU counters.
#pragma once

#include <sys/types.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "sampler.h"
#include "tracecorr/error.hpp"
#include "tracecorr/fd.hpp"
#include "tracecorr/record_layout.hpp"
#include "tracecorr/sampler.hpp"

struct bpf_link;
struct bpf_program;
struct ring_buffer;
struct tc_sampler_bpf;  // skeletons (bpftool gen skeleton ... name tc_sampler_bpf)
struct tc_empty_bpf;
struct tc_floor_bpf;

namespace tracecorr::bpf {

struct LinkDeleter {
  void operator()(bpf_link* l) const;  // bpf_link__destroy: detaches and closes the perf event fd
};
using LinkPtr = std::unique_ptr<bpf_link, LinkDeleter>;

// Online CPUs from /sys/devices/system/cpu/online.
Expected<std::vector<int>> online_cpus();

// Opens a PERF_COUNT_SW_CPU_CLOCK event (frequency mode, `hz` samples per
// second) on every online CPU and attaches `prog` to each.
Expected<std::vector<LinkPtr>> attach_cpu_clock(bpf_program* prog, unsigned hz);

// The kernel's accounting of a program (kernel.bpf_stats_enabled=1 to fill it).
struct ProgramStats {
  std::uint64_t run_time_ns = 0;
  std::uint64_t run_cnt = 0;
  std::uint64_t recursion_misses = 0;
};
Expected<ProgramStats> program_stats(int prog_fd);

// Why BPF cannot be used here, or empty when the basics are present: BTF and
// privilege. Used by `agent` (to suggest --reader ptrace) and `doctor`.
std::string bpf_unavailable_reason();

// libbpf's last messages (warnings and errors), for error reports.
std::string libbpf_log_tail();

// The `tracked` map entry for a process whose records `layout` describes,
// found through `site`. An error: the layout fails RecordLayout::check() (the
// BPF program would otherwise be handed offsets it cannot honour).
Expected<tc_process> tracked_entry(const RecordLayout& layout, const PointerSite& site, std::uint32_t flags);

// One ring-buffer record, its lengths checked against the bytes the ring
// holds. The spans point into the ring buffer: valid during the callback only.
struct SampleView {
  tc_sample header{};
  std::span<const std::uint8_t> record;  // header.record_length bytes
  std::span<const std::uint8_t> stack;   // header.stack_bytes bytes when > 0: u64 frames, native byte order
  std::size_t frame_count() const { return stack.size() / sizeof(std::uint64_t); }
  std::uint64_t frame(std::size_t i) const;
};
// Checks and splits one ring-buffer record; nullopt when its lengths disagree
// with its size (counted as malformed by the loader).
std::optional<SampleView> parse_sample(std::span<const std::uint8_t> data);

struct SamplerLoaderOptions {
  std::size_t ringbuf_bytes = 8u << 20;  // power of two, multiple of the page size
};

class SamplerLoader {
 public:
  static Expected<std::unique_ptr<SamplerLoader>> open(const SamplerLoaderOptions& options = {});
  ~SamplerLoader();
  SamplerLoader(const SamplerLoader&) = delete;
  SamplerLoader& operator=(const SamplerLoader&) = delete;

  // Samples pid's threads, reading their records by `layout` through `site`
  // in layout slot `slot` (< TC_LAYOUTS_PER_PROCESS; the other slots stay).
  // Tracking again keeps the process context header track_process_context gave.
  Status track(pid_t pid, const RecordLayout& layout, PointerSite site, std::uint32_t flags = 0,
               LayoutSlot slot = 0);
  // Reads the process context header at `header_address` (nullopt: none) at
  // each of pid's samples. pid must be tracked.
  Status track_process_context(pid_t pid, std::optional<std::uint64_t> header_address);
  // Forgets one slot's layout; the process (its context header too) goes with its last.
  Status untrack(pid_t pid, LayoutSlot slot);
  Status untrack(pid_t pid);  // every slot

  Status attach(unsigned hz);  // one cpu-clock event per online CPU
  void detach();
  std::size_t attached_cpus() const { return links_.size(); }

  // Consumes ring-buffer records, waiting up to `timeout` for the first, and
  // for at most `consume_for` once consuming: a consumer slower than the
  // sampled threads (a host whose CPUs they keep busy, a slow callback) never
  // sees the ring empty, and libbpf consumes until it is. backlog(): the last
  // poll stopped at that limit, records may be waiting.
  // Records whose lengths disagree with their size are counted in malformed() and skipped.
  using Callback = std::function<void(const SampleView&)>;
  static constexpr std::chrono::milliseconds kConsumeLimit{20};
  Expected<std::size_t> poll(std::chrono::milliseconds timeout, const Callback& callback,
                             std::chrono::nanoseconds consume_for = kConsumeLimit);
  bool backlog() const { return consume_limit_reached_; }

  std::array<std::uint64_t, TC_CTR_COUNT> counters() const;  // summed over CPUs
  std::uint64_t malformed() const { return malformed_; }
  std::uint64_t read() const { return read_; }  // records delivered to a callback, over every poll
  // Bytes the ring buffer's consumer position has advanced since open(): every
  // record consumed with its 8-byte header and the kernel's padding, as the
  // kernel counts them (read from the ring's consumer page, not computed).
  std::uint64_t ring_bytes_consumed() const;
  int prog_fd() const;
  Expected<ProgramStats> stats() const { return program_stats(prog_fd()); }

 private:
  SamplerLoader() = default;
  static int on_record(void* ctx, void* data, std::size_t size);
  static constexpr int kConsumeLimitReached = -ECANCELED;  // on_record's stop: no libbpf error of its own
  bool consume_limit_passed();
  Status write_entry(pid_t pid, const tc_tracked& value);

  ::tc_sampler_bpf* skel_ = nullptr;
  ring_buffer* ringbuf_ = nullptr;
  // The ring's consumer page, mapped read-only a second time (libbpf 1.1 has
  // no accessor for the consumer position).
  const volatile std::uint64_t* consumer_page_ = nullptr;
  std::size_t consumer_page_size_ = 0;
  std::uint64_t consumer_at_open_ = 0;
  std::vector<LinkPtr> links_;
  std::map<pid_t, tc_tracked> tracked_;  // what the `tracked` map holds, so one field changes without the others
  const Callback* callback_ = nullptr;
  std::size_t delivered_ = 0;
  std::chrono::steady_clock::time_point consume_until_{};
  bool consume_limit_reached_ = false;
  std::uint64_t malformed_ = 0;
  std::uint64_t read_ = 0;
};

// The do-nothing program on the same events, for the overhead benchmark.
class EmptyLoader {
 public:
  static Expected<std::unique_ptr<EmptyLoader>> open();
  ~EmptyLoader();
  EmptyLoader(const EmptyLoader&) = delete;
  EmptyLoader& operator=(const EmptyLoader&) = delete;
  Status attach(unsigned hz);
  void detach() { links_.clear(); }
  int prog_fd() const;
  Expected<ProgramStats> stats() const { return program_stats(prog_fd()); }

 private:
  EmptyLoader() = default;
  ::tc_empty_bpf* skel_ = nullptr;
  std::vector<LinkPtr> links_;
};

// The records-only path's floor (floor.bpf.c), for the overhead benchmark: the
// pid lookup in a `tracked` map and an empty ring-buffer record per sample of
// a tracked process.
class FloorLoader {
 public:
  static Expected<std::unique_ptr<FloorLoader>> open();
  ~FloorLoader();
  FloorLoader(const FloorLoader&) = delete;
  FloorLoader& operator=(const FloorLoader&) = delete;
  Status track(pid_t pid);
  Status untrack(pid_t pid);
  Status attach(unsigned hz);
  void detach() { links_.clear(); }
  // Consumes the ring (waiting up to `timeout` first); returns the records consumed.
  Expected<std::size_t> drain(std::chrono::milliseconds timeout);
  int prog_fd() const;
  Expected<ProgramStats> stats() const { return program_stats(prog_fd()); }

 private:
  FloorLoader() = default;
  ::tc_floor_bpf* skel_ = nullptr;
  ring_buffer* ringbuf_ = nullptr;
  std::vector<LinkPtr> links_;
};

}  // namespace tracecorr::bpf

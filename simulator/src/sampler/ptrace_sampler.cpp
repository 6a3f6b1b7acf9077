// The ptrace sampler: no BPF, no BTF. At each tick it stops every thread of
// every tracked process in turn (PTRACE_SEIZE + PTRACE_INTERRUPT), reads its
// registers, walks its frame pointers and reads its record (by the process's
// RecordLayout) with process_vm_readv, then detaches. Nothing is written into
// the target.
#include <elf.h>
#include <sys/ptrace.h>
#include <sys/uio.h>
#include <sys/user.h>
#include <sys/wait.h>
#include <time.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <map>
#include <optional>
#include <thread>
#include <vector>

#include "tracecorr/memory.hpp"
#include "tracecorr/process_context_header.h"
#include "tracecorr/sampler.hpp"
#include "tracecorr/threadptr.hpp"

namespace tracecorr {
namespace {

std::uint64_t monotonic_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<std::uint64_t>(ts.tv_nsec);
}

struct Registers {
  std::uint64_t ip = 0, fp = 0, thread_pointer = 0;
};

// Registers of a ptrace-stopped thread.
bool read_registers(pid_t tid, Registers& r, int& err) {
#if defined(__x86_64__)
  user_regs_struct regs{};
  iovec iov{&regs, sizeof(regs)};
  if (ptrace(PTRACE_GETREGSET, tid, reinterpret_cast<void*>(NT_PRSTATUS), &iov) != 0) {
    err = errno;
    return false;
  }
  r.ip = regs.rip;
  r.fp = regs.rbp;
  r.thread_pointer = regs.fs_base;
  return true;
#elif defined(__aarch64__)
  user_regs_struct regs{};
  iovec iov{&regs, sizeof(regs)};
  if (ptrace(PTRACE_GETREGSET, tid, reinterpret_cast<void*>(NT_PRSTATUS), &iov) != 0) {
    err = errno;
    return false;
  }
  std::uint64_t tls = 0;
  iovec tiov{&tls, sizeof(tls)};
  if (ptrace(PTRACE_GETREGSET, tid, reinterpret_cast<void*>(NT_ARM_TLS), &tiov) != 0) {
    err = errno;
    return false;
  }
  r.ip = regs.pc;
  r.fp = regs.regs[29];
  r.thread_pointer = tls;
  return true;
#else
  (void)tid;
  (void)r;
  err = ENOSYS;
  return false;
#endif
}

class PtraceSampler final : public Sampler {
 public:
  explicit PtraceSampler(const PtraceSamplerOptions& o) : options_(o) {
    if (options_.frequency_hz == 0) options_.frequency_hz = 1;
    if (options_.max_frames > kMaxStackFrames) options_.max_frames = kMaxStackFrames;
    period_ns_ = 1'000'000'000ull / options_.frequency_hz;
  }

  std::string name() const override { return "ptrace"; }

  using Sampler::track;
  using Sampler::untrack;
  Status track(pid_t pid, LayoutSlot slot, const RecordLayout& layout, PointerSite site) override {
    if (pid <= 0) return make_error("invalid pid " + std::to_string(pid), "ptrace sampler");
    if (slot >= kLayoutsPerProcess)
      return make_error("layout slot " + std::to_string(slot) + " past the " + std::to_string(kLayoutsPerProcess) +
                            " a process holds",
                        "ptrace sampler, pid " + std::to_string(pid));
    if (auto st = layout.check(); !st) return st.error().within("ptrace sampler, pid " + std::to_string(pid));
    tracked_[pid].layouts[slot] = Layout{layout, site};  // a new process: no context header
    return Ok{};
  }
  Status track_process_context(pid_t pid, std::optional<std::uint64_t> header_address) override {
    auto it = tracked_.find(pid);
    if (it == tracked_.end())
      return make_error("pid " + std::to_string(pid) + " is not tracked: track() it first", "ptrace sampler");
    if (header_address && *header_address == 0)
      return make_error("a process context header at address 0", "ptrace sampler, pid " + std::to_string(pid));
    it->second.context_header = header_address.value_or(0);
    return Ok{};
  }
  Status untrack(pid_t pid, LayoutSlot slot) override {
    auto it = tracked_.find(pid);
    if (it == tracked_.end() || slot >= kLayoutsPerProcess) return Ok{};
    it->second.layouts[slot].reset();
    const auto& layouts = it->second.layouts;
    if (std::none_of(layouts.begin(), layouts.end(), [](const auto& l) { return l.has_value(); }))
      tracked_.erase(it);  // its context header with it
    return Ok{};
  }

  Expected<std::size_t> poll(const Callback& callback, std::chrono::milliseconds timeout) override {
    const std::uint64_t deadline = monotonic_ns() + static_cast<std::uint64_t>(timeout.count()) * 1'000'000ull;
    for (;;) {
      std::uint64_t now = monotonic_ns();
      if (next_tick_ == 0) next_tick_ = now;
      if (now >= next_tick_) {
        std::size_t n = 0;
        auto round = sample_round(callback, n);
        next_tick_ += period_ns_;
        if (next_tick_ <= now) next_tick_ = now + period_ns_;  // fell behind: skip ticks, do not burst
        if (!round) return round.error();
        if (n > 0 || monotonic_ns() >= deadline) return n;
        continue;
      }
      if (now >= deadline) return std::size_t{0};
      std::uint64_t until = next_tick_ < deadline ? next_tick_ : deadline;
      std::this_thread::sleep_for(std::chrono::nanoseconds(until - now));
    }
  }

  SamplerCounters counters() const override { return counters_; }

 private:
  Status sample_round(const Callback& callback, std::size_t& delivered) {
    std::size_t refused = 0, attempted = 0;
    int refused_errno = 0;
    reap_parked_attachments();
    for (const auto& [pid, tracked] : tracked_) {
      for (pid_t tid : list_threads(pid)) {
        ++attempted;
        int err = 0;
        std::vector<Sample> samples;  // one per layout the process is tracked with
        bool next_process = false;
        switch (sample_thread(pid, tid, tracked, samples, err)) {
          case Outcome::Sampled:
            for (const Sample& s : samples) {
              ++delivered;
              ++counters_.emitted;
              callback(s);
            }
            break;
          case Outcome::Gone:
            // A thread that vanished mid-read may be another thread's exec
            // killing it: leave the process alone until the next round.
            next_process = !is_parked(tid);
            break;
          case Outcome::Refused:
            ++refused;
            refused_errno = err;
            break;
        }
        if (next_process) break;
      }
    }
    if (attempted > 0 && refused == attempted)
      return make_error(std::string("PTRACE_SEIZE refused: ") + std::strerror(refused_errno) +
                            " (needs root or CAP_SYS_PTRACE, and kernel.yama.ptrace_scope <= 2)",
                        "ptrace sampler");
    return Ok{};
  }

  enum class Outcome { Sampled, Gone, Refused };

  struct Layout {
    RecordLayout layout;
    PointerSite site;
  };
  struct Tracked {
    std::array<std::optional<Layout>, kLayoutsPerProcess> layouts;  // by slot
    std::uint64_t context_header = 0;  // 0: no process context
  };

  // One stop of the thread: its registers, stack and context header read
  // once, its record by every layout of the process, one Sample each.
  Outcome sample_thread(pid_t pid, pid_t tid, const Tracked& tracked, std::vector<Sample>& out, int& err) {
    reap_parked_attachments();  // never seize while holding an unreaped tracee (see detach_or_reap)
    if (is_parked(tid)) return Outcome::Gone;
    if (seize_thread(pid, tid) != 0) {
      err = errno;
      return err == ESRCH ? Outcome::Gone : Outcome::Refused;
    }
    const std::uint64_t interrupted_ns = monotonic_ns();
    if (ptrace(PTRACE_INTERRUPT, tid, nullptr, nullptr) != 0) {
      detach_or_reap(tid);
      return Outcome::Gone;
    }
    auto stop = wait_for_ptrace_stop(tid);
    if (stop.kind == PtraceStop::Kind::kExited) return Outcome::Gone;  // exited while we attached
    if (stop.kind == PtraceStop::Kind::kNotStopping) {
      park_unstopped(tid);  // skipped until it stops and is detached
      ++counters_.not_stopping;
      return Outcome::Gone;
    }
    const int status = stop.status;
    // A signal-delivery-stop (not our interrupt's event stop) must be re-injected.
    const bool event_stop = (status >> 16) == PTRACE_EVENT_STOP;
    const int inject = event_stop ? 0 : WSTOPSIG(status);

    ++counters_.samples;
    Sample s;
    s.pid = pid;
    s.tid = tid;
    s.cpu = -1;
    s.time_ns = monotonic_ns();
    s.interrupted_ns = interrupted_ns;
    if (options_.run_queue_waits) s.run_queue_wait_ns = thread_run_queue_wait_ns(tid);
    Registers regs;
    int reg_err = 0;
    LiveProcessMemory mem(pid);
    read_context_header(mem, tracked.context_header, s);
    const bool registers_read = read_registers(tid, regs, reg_err);
    if (!registers_read) {
      s.error = SampleError::ThreadPointerFailed;
      s.stack_errno = reg_err;
    } else {
      s.frames = walk_frame_pointers(
          regs.ip, regs.fp,
          [&mem](std::uint64_t addr, std::uint64_t& out) {
            auto v = mem.read_u64(addr);
            if (!v) return false;
            out = *v;
            return true;
          },
          options_.max_frames);
    }
    // The reader defect reads-running-thread lets the thread run before its record is read.
    if (options_.reads_running_thread) detach_or_reap(tid, inject);
    for (LayoutSlot slot = 0; slot < kLayoutsPerProcess; ++slot) {
      if (!tracked.layouts[slot]) continue;
      Sample& one = out.emplace_back(s);
      one.slot = slot;
      if (registers_read) {
        read_sample_record(mem, regs.thread_pointer, *tracked.layouts[slot], one);
        if (options_.reads_running_thread) read_again_while_running(mem, tracked.layouts[slot]->layout, one);
      } else {
        ++counters_.thread_pointer_failed;
        ++counters_.stack_failed;
      }
    }
    if (!options_.reads_running_thread) detach_or_reap(tid, inject);
    return Outcome::Sampled;
  }

  // reads-running-thread (a reader defect): the record from its second field
  // on read again once the thread ran on, and spliced after the first read's
  // bytes before it (OTEP 4947: trace_id from one read, span_id and the rest
  // from the other).
  void read_again_while_running(const ProcessMemory& mem, const RecordLayout& layout, Sample& s) {
    if (!s.record || layout.fields.size() < 2) return;
    auto again = read_once_the_thread_ran_on(mem, layout, s);
    if (!again) return;
    std::vector<std::uint8_t> spliced(s.record->begin(), s.record->end());
    for (std::size_t i = layout.fields[1].offset; i < spliced.size() && i < again->bytes.size(); ++i)
      spliced[i] = again->bytes[i];
    s.record = RecordBytes(spliced);
  }

  // The record read again and again until it differs from the sample's, or
  // the thread ran `running_read_progress` on a CPU (schedstat), or
  // `running_read_bound` passed: the last read.
  std::optional<RecordRead> read_once_the_thread_ran_on(const ProcessMemory& mem, const RecordLayout& layout,
                                                        const Sample& s) {
    const auto ran_ns = [tid = s.tid] {
      auto stat = thread_schedstat(tid);
      return stat ? stat->on_cpu_ns : 0;
    };
    const std::uint64_t progress_ns = static_cast<std::uint64_t>(options_.running_read_progress.count()) * 1000u;
    const std::uint64_t ran_at_sample = ran_ns();
    const std::uint64_t deadline = monotonic_ns() + static_cast<std::uint64_t>(options_.running_read_bound.count()) * 1'000'000u;
    std::optional<RecordRead> last;
    do {
      std::this_thread::sleep_for(std::chrono::microseconds(100));
      auto again = read_record(mem, layout, s.record_pointer);
      if (!again) return last;
      last = std::move(*again);
      if (last->bytes != *s.record) break;
    } while (ran_ns() < ran_at_sample + progress_ns && monotonic_ns() < deadline);
    return last;
  }

  // The same steps, and the same classification, as bpf/sampler.bpf.c.
  void read_sample_record(const ProcessMemory& mem, std::uint64_t tp, const Layout& tracked, Sample& s) {
    const RecordLayout& layout = tracked.layout;
    s.thread_pointer = tp;
    if (tp == 0 && uses_thread_pointer(layout)) {
      s.error = SampleError::ThreadPointerFailed;
      ++counters_.thread_pointer_failed;
      return;
    }
    auto slot = pointer_address(mem, layout, tracked.site, tp);
    if (!slot) {
      if (slot.error().kind == ErrorKind::kNotAllocated) {
        s.error = SampleError::TlsBlockNotAllocated;
        ++counters_.tls_block_not_allocated;
      } else {
        s.error = SampleError::RecordPointerReadFailed;
        ++counters_.record_pointer_read_failed;
      }
      return;
    }
    auto rp = record_address(mem, layout, *slot);
    if (!rp) {
      s.error = SampleError::RecordPointerReadFailed;
      ++counters_.record_pointer_read_failed;
      return;
    }
    if (*rp == 0) {
      s.error = SampleError::RecordPointerNull;
      ++counters_.record_pointer_null;
      return;
    }
    s.record_pointer = *rp;
    auto read = read_record(mem, layout, *rp);
    if (!read) {
      s.error = SampleError::RecordReadFailed;
      ++counters_.record_read_failed;
      return;
    }
    // Saturated as the BPF sample's 32-bit field carries it: the same Sample for the same record.
    s.record_declared_length = std::min<std::uint64_t>(read->declared_length, UINT32_MAX);
    if (read->truncated()) {
      s.error = SampleError::RecordTruncated;
      ++counters_.record_truncated;
    }
    const RecordBytes& bytes = read->bytes;
    if (!layout.valid(bytes))
      ++counters_.valid_zero;
    else if (layout.presence_offset && bytes[*layout.presence_offset] == 0)
      ++counters_.trace_absent;
    s.record = std::move(read->bytes);
  }

  // The same check as bpf/sampler.bpf.c's read_context: the 32 bytes, their
  // signature and version, then the timestamp.
  void read_context_header(const ProcessMemory& mem, std::uint64_t header_address, Sample& s) {
    if (header_address == 0) return;
    std::array<std::uint8_t, TC_PCTX_HEADER_SIZE> header{};
    std::uint64_t signature = 0, published_at = 0;
    std::uint32_t version = 0;
    if (mem.read(header_address, header)) {
      // Little-endian, as the header is on every architecture the OTEP names (and these hosts are).
      std::memcpy(&signature, header.data() + TC_PCTX_SIGNATURE_OFFSET, sizeof signature);
      std::memcpy(&version, header.data() + TC_PCTX_VERSION_OFFSET, sizeof version);
      std::memcpy(&published_at, header.data() + TC_PCTX_PUBLISHED_AT_OFFSET, sizeof published_at);
      if (!options_.context_identity_check ||
          (signature == TC_PCTX_SIGNATURE_LE &&
           (version == TC_PCTX_VERSION_CURRENT || version == TC_PCTX_VERSION_DEVELOPMENT))) {
        s.context_published_at = published_at;
        if (published_at == 0) ++counters_.context_being_written;
        return;
      }
    }
    ++counters_.context_unreadable;
  }

  PtraceSamplerOptions options_;
  std::uint64_t period_ns_ = 0;
  std::uint64_t next_tick_ = 0;
  std::map<pid_t, Tracked> tracked_;
  SamplerCounters counters_;
};

}  // namespace

std::unique_ptr<Sampler> make_ptrace_sampler(const PtraceSamplerOptions& options) {
  return std::make_unique<PtraceSampler>(options);
}

}  // namespace tracecorr

#include "bpf_sampler.hpp"

#include <bpf/libbpf.h>

#include <cstring>

#include "sampler_loader.hpp"

namespace tracecorr::bpf {
namespace {

SampleError to_sample_error(std::uint32_t status) {
  switch (status) {
    case TC_SAMPLE_OK: return SampleError::Ok;
    case TC_SAMPLE_THREAD_POINTER_FAILED: return SampleError::ThreadPointerFailed;
    case TC_SAMPLE_RECORD_POINTER_READ_FAILED: return SampleError::RecordPointerReadFailed;
    case TC_SAMPLE_RECORD_POINTER_NULL: return SampleError::RecordPointerNull;
    case TC_SAMPLE_RECORD_TRUNCATED: return SampleError::RecordTruncated;
    case TC_SAMPLE_TLS_BLOCK_NOT_ALLOCATED: return SampleError::TlsBlockNotAllocated;
    default: return SampleError::RecordReadFailed;
  }
}

static_assert(TC_MAX_STACK_DEPTH == kMaxStackFrames);
static_assert(TC_LAYOUTS_PER_PROCESS == kLayoutsPerProcess);

class BpfSampler final : public Sampler {
 public:
  explicit BpfSampler(std::unique_ptr<SamplerLoader> l) : loader_(std::move(l)) {}
  std::string name() const override { return "bpf"; }
  using Sampler::track;
  using Sampler::untrack;
  Status track(pid_t pid, LayoutSlot slot, const RecordLayout& layout, PointerSite site) override {
    return loader_->track(pid, layout, site, 0, slot);
  }
  Status track_process_context(pid_t pid, std::optional<std::uint64_t> header_address) override {
    return loader_->track_process_context(pid, header_address);
  }
  Status untrack(pid_t pid, LayoutSlot slot) override { return loader_->untrack(pid, slot); }

  Expected<std::size_t> poll(const Callback& callback, std::chrono::milliseconds timeout) override {
    SamplerLoader::Callback convert = [&callback](const SampleView& v) {
      const tc_sample& r = v.header;
      Sample s;
      s.pid = static_cast<pid_t>(r.pid);
      s.tid = static_cast<pid_t>(r.tid);
      s.slot = r.slot;
      s.cpu = static_cast<int>(r.cpu);
      s.time_ns = r.ktime_ns;
      s.thread_pointer = r.thread_pointer;
      s.record_pointer = r.record_pointer;
      s.error = to_sample_error(r.status);
      if (r.context == TC_CONTEXT_READ) s.context_published_at = r.context_published_at;
      if (s.error == SampleError::Ok || s.error == SampleError::RecordTruncated) {
        s.record = RecordBytes(v.record);
        s.record_declared_length = r.declared_length;
      }
      if (r.stack_bytes < 0) {
        s.stack_errno = -r.stack_bytes;
      } else {
        // parse_sample bounded the stack by the ring record's size and the depth.
        s.frames.reserve(v.frame_count());
        for (std::size_t i = 0; i < v.frame_count(); ++i) s.frames.push_back(v.frame(i));
      }
      callback(s);
    };
    return loader_->poll(timeout, convert);
  }
  bool backlog() const override { return loader_->backlog(); }
  void stop_sampling() override { loader_->detach(); }

  SamplerCounters counters() const override {
    auto c = loader_->counters();
    SamplerCounters out;
    out.samples = c[TC_CTR_SAMPLES];
    out.emitted = c[TC_CTR_EMITTED];
    out.thread_pointer_failed = c[TC_CTR_THREAD_POINTER_FAILED];
    out.record_pointer_read_failed = c[TC_CTR_RECORD_POINTER_READ_FAILED];
    out.record_pointer_null = c[TC_CTR_RECORD_POINTER_NULL];
    out.record_read_failed = c[TC_CTR_RECORD_READ_FAILED];
    out.valid_zero = c[TC_CTR_VALID_ZERO];
    out.trace_absent = c[TC_CTR_TRACE_ABSENT];
    out.stack_failed = c[TC_CTR_STACK_FAILED];
    out.lost = c[TC_CTR_RINGBUF_FULL] + loader_->malformed();
    out.record_truncated = c[TC_CTR_RECORD_TRUNCATED];
    out.context_unreadable = c[TC_CTR_CONTEXT_UNREADABLE];
    out.context_being_written = c[TC_CTR_CONTEXT_BEING_WRITTEN];
    out.tls_block_not_allocated = c[TC_CTR_TLS_BLOCK_NOT_ALLOCATED];
    const std::uint64_t taken = loader_->read() + loader_->malformed();
    out.unread = out.emitted > taken ? out.emitted - taken : 0;
    return out;
  }

 private:
  std::unique_ptr<SamplerLoader> loader_;
};

std::size_t ring_bytes_for(const BpfSamplerOptions& options) {
  // The consumer drains on a timer (<= 100 ms): hold at least a second of
  // the largest records (the bound's record and a full stack, plus the
  // ring's 8-byte header) at the attached rate on every possible CPU, as a
  // power of two. Records are only as long as they are, so this is ample.
  int cpus = libbpf_num_possible_cpus();
  std::size_t per_second =
      static_cast<std::size_t>(cpus > 0 ? cpus : 1) * options.frequency_hz * (TC_SAMPLE_MAX_BYTES + 8);
  std::size_t bytes = options.ringbuf_bytes;
  while (bytes < per_second && bytes < (std::size_t{1} << 30)) bytes <<= 1;
  return bytes;
}

}  // namespace

Expected<std::unique_ptr<Sampler>> make_bpf_sampler(const BpfSamplerOptions& options) {
  SamplerLoaderOptions lo;
  lo.ringbuf_bytes = ring_bytes_for(options);
  auto loader = SamplerLoader::open(lo);
  if (!loader) return loader.error();
  if (auto st = (*loader)->attach(options.frequency_hz); !st) return st.error();
  return std::unique_ptr<Sampler>(new BpfSampler(std::move(*loader)));
}

}  // namespace tracecorr::bpf

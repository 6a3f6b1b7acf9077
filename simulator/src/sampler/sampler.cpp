// Shared sampler pieces: names, counters, reading what a run sampled, and the frame-pointer walk.
#include "tracecorr/sampler.hpp"

#include <algorithm>

namespace tracecorr {

const char* to_string(SampleError e) {
  switch (e) {
    case SampleError::Ok: return "ok";
    case SampleError::ThreadPointerFailed: return "thread_pointer_failed";
    case SampleError::RecordPointerReadFailed: return "record_pointer_read_failed";
    case SampleError::RecordPointerNull: return "record_pointer_null";
    case SampleError::RecordReadFailed: return "record_read_failed";
    case SampleError::RecordTruncated: return "record_truncated";
    case SampleError::TlsBlockNotAllocated: return "tls_block_not_allocated";
  }
  return "unknown";
}

Status Sampler::untrack(pid_t pid) {
  Status result = Ok{};
  for (LayoutSlot slot = 0; slot < kLayoutsPerProcess; ++slot)
    if (auto st = untrack(pid, slot); !st && result) result = st;
  return result;
}

std::vector<std::pair<std::string, std::uint64_t>> SamplerCounters::named() const {
  return {
      {"samples", samples},
      {"emitted", emitted},
      {"thread_pointer_failed", thread_pointer_failed},
      {"record_pointer_read_failed", record_pointer_read_failed},
      {"record_pointer_null", record_pointer_null},
      {"record_read_failed", record_read_failed},
      {"valid_zero", valid_zero},
      {"trace_absent", trace_absent},
      {"stack_failed", stack_failed},
      {"lost", lost},
      {"not_stopping", not_stopping},
      {"record_truncated", record_truncated},
      {"context_unreadable", context_unreadable},
      {"context_being_written", context_being_written},
      {"tls_block_not_allocated", tls_block_not_allocated},
      {"unread", unread},
  };
}

Status read_what_was_sampled(Sampler& sampler, const Sampler::Callback& callback, const std::atomic<bool>& stop) {
  sampler.stop_sampling();
  // The bound: what was taken and not read when sampling stopped (a sampler
  // that says it has a backlog for ever must not hold the run).
  std::uint64_t left = sampler.counters().unread;
  do {
    auto polled = sampler.poll(callback, std::chrono::milliseconds(0));
    if (!polled) return polled.error();
    left -= std::min<std::uint64_t>(left, *polled);
  } while (left > 0 && sampler.backlog() && !stop.load());
  return Ok{};
}

std::vector<std::uint64_t> walk_frame_pointers(std::uint64_t ip, std::uint64_t fp, const ReadWord& read,
                                               std::size_t max_frames) {
  std::vector<std::uint64_t> frames;
  if (max_frames == 0) return frames;
  frames.reserve(max_frames < 16 ? max_frames : 16);
  frames.push_back(ip);
  // Like perf_callchain_user: each frame record is {next frame pointer, return
  // address}; a frame that cannot be read (including fp 0) ends the walk.
  // arm64 additionally requires an aligned frame pointer that moves up the stack.
  while (frames.size() < max_frames) {
    if (fp == 0 || fp > UINT64_MAX - 16) break;
#if defined(__aarch64__)
    if ((fp & 7) != 0) break;
#endif
    std::uint64_t next = 0, ret = 0;
    if (!read(fp, next) || !read(fp + 8, ret)) break;
    frames.push_back(ret);
#if defined(__aarch64__)
    if (next <= fp) break;
#endif
    fp = next;
  }
  return frames;
}

}  // namespace tracecorr

// See judging.hpp.
#include "judging.hpp"

namespace tracecorr::otel_thread_context {

std::string thread_text(pid_t tid) { return "thread " + std::to_string(tid); }

std::optional<ThreadContextRecord> decoded(const RecordSample& s) {
  if (!s.bytes) return std::nullopt;
  auto r = decode_record(*s.bytes);
  if (!r) return std::nullopt;
  return std::move(*r);
}

}  // namespace tracecorr::otel_thread_context

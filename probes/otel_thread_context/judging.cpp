// See judging.hpp.
#include "judging.hpp"

namespace tracecorr::otel_thread_context {

int finding_severity(Finding::Outcome o) {
  switch (o) {
    case Finding::Outcome::Violated: return 4;
    case Finding::Outcome::KitError: return 3;
    case Finding::Outcome::Tolerated: return 2;
    case Finding::Outcome::Met: return 1;
    case Finding::Outcome::NotApplicable: return 0;
  }
  return 0;
}

std::string thread_text(pid_t tid) { return "thread " + std::to_string(tid); }

std::optional<ThreadContextRecord> decoded(const RecordSample& s) {
  if (!s.bytes) return std::nullopt;
  auto r = decode_record(*s.bytes);
  if (!r) return std::nullopt;
  return std::move(*r);
}

}  // namespace tracecorr::otel_thread_context

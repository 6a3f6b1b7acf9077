// See own_time.hpp.
#include "tracecorr/own_time.hpp"

#include <algorithm>

#include "tracecorr/clock_offset.hpp"
#include "tracecorr/threadptr.hpp"

namespace tracecorr {

std::optional<std::int64_t> least_own_time(const std::vector<RunQueueMark>& marks, std::int64_t from_ns,
                                           std::int64_t to_ns) {
  std::uint64_t before = 0;
  std::optional<std::uint64_t> after;
  for (const auto& m : marks) {
    if (m.from_ns <= from_ns) before = std::max(before, m.waited_ns);
    if (m.until_ns >= to_ns) after = std::min(after.value_or(m.waited_ns), m.waited_ns);
  }
  if (!after) return std::nullopt;
  const std::uint64_t waited = *after > before ? *after - before : 0;
  return (to_ns - from_ns) - static_cast<std::int64_t>(waited);
}

void RunQueueMarks::take(pid_t tid, std::optional<std::int64_t> stored_after_ns) {
  if (count_ >= kMaxMarks) return;
  const std::int64_t before = read_clock_ns(CLOCK_MONOTONIC);
  auto stat = thread_schedstat(tid);
  if (!stat) return;
  RunQueueMark mark{stat->run_queue_wait_ns, read_clock_ns(CLOCK_MONOTONIC)};
  auto last = last_.find(tid);
  if (last != last_.end() && (stat->timeslices < last->second.timeslices || stat->run_queue_wait_ns < last->second.waited_ns)) {
    marks_.erase(tid);  // the counts went back: another thread with the id of one that exited
    last = last_.end();
  }
  // It got a CPU since the last reading began: every wait before that was counted by now.
  if (last != last_.end() && stat->timeslices > last->second.timeslices) mark.until_ns = last->second.before_ns;
  if (stored_after_ns) mark.until_ns = std::max(mark.until_ns, *stored_after_ns);
  last_[tid] = {stat->timeslices, stat->run_queue_wait_ns, before};
  marks_[tid].push_back(mark);
  ++count_;
}

}  // namespace tracecorr

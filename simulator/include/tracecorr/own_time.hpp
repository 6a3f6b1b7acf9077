// How late a writer is, in its own time. A writer takes a span's time and
// stores (or clears) its record a moment apart; a thread starved of a CPU in
// between makes that moment long on the wall clock. So a record seen naming
// a span too early or too late is judged by the time its thread could have
// run meanwhile: the wall time less every run-queue wait that may fall
// inside, from the thread's schedstat at marks around it.
//
// A mark is one reading of the thread's run-queue waits since it started
// (/proc/TID/schedstat's second field, which the kernel adds to when the
// thread gets a CPU) and where it stands on the caller's clock: at most what
// the thread had waited at any time from `from_ns` on, at least what it had
// waited at any time up to `until_ns`. Read while the thread is stopped at
// some instant in [a, b]: from b, until a. Read while it runs: from the end
// of the read, until a time after which it is known to have got a CPU before
// the read (RunQueueMarks).
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <vector>

namespace tracecorr {

struct RunQueueMark {
  std::uint64_t waited_ns = 0;
  std::int64_t from_ns = 0;
  std::int64_t until_ns = std::numeric_limits<std::int64_t>::min();  // min: bounds nothing
};

// A reading taken while the thread was stopped, at some instant from
// `stopped_after_ns` to `stopped_by_ns`.
inline RunQueueMark stopped_mark(std::uint64_t waited_ns, std::int64_t stopped_after_ns, std::int64_t stopped_by_ns) {
  return {waited_ns, stopped_by_ns, stopped_after_ns};
}

// The least time the thread can have had to itself from `from_ns` to
// `to_ns`: the wall time less its waits between the latest mark before and
// the earliest mark after (before the first mark: all it waited since it
// started). nullopt: no mark bounds the waits after `to_ns`.
std::optional<std::int64_t> least_own_time(const std::vector<RunQueueMark>& marks, std::int64_t from_ns,
                                           std::int64_t to_ns);

// Marks of running threads, taken now and then (take()) on CLOCK_MONOTONIC:
// a reading counts every wait up to the reading before it when the thread
// got a CPU again since (its timeslices grew), and up to `stored_after_ns`
// when the caller saw the thread store something after that time. At most
// kMaxMarks in all.
class RunQueueMarks {
 public:
  static constexpr std::size_t kMaxMarks = 200000;
  void take(pid_t tid, std::optional<std::int64_t> stored_after_ns = std::nullopt);
  const std::map<pid_t, std::vector<RunQueueMark>>& marks() const { return marks_; }

 private:
  struct Last {
    std::uint64_t timeslices = 0;
    std::uint64_t waited_ns = 0;
    std::int64_t before_ns = 0;  // when its reading began
  };
  std::map<pid_t, Last> last_;
  std::map<pid_t, std::vector<RunQueueMark>> marks_;
  std::size_t count_ = 0;
};

}  // namespace tracecorr

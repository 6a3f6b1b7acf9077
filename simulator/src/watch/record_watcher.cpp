#include "tracecorr/watch/record_watcher.hpp"

#include <algorithm>

#include "tracecorr/procfs.hpp"

namespace tracecorr::watch {
namespace {
// Bounded memory: a long attach-mode run keeps the most recent observations.
constexpr std::size_t kMaxObservations = 200'000;
constexpr std::size_t kMaxErrorsKept = 32;
constexpr auto kThreadPointerRetry = std::chrono::milliseconds(200);
constexpr auto kMaxThreadPointerRetry = std::chrono::milliseconds(3200);
// The leader's state is read this often, not on every poll: its /proc stat
// cost more than the rest of a poll. A leader gone zombie is left out of the
// polls at most this late, and until then its TLS block still holds what its
// thread last stored.
constexpr auto kLeaderStateRecheck = std::chrono::milliseconds(100);
// How often each thread with a record has its run-queue waits read besides
// at each new state, which is what bounds a writer's own time around a state
// closely (the stale-trace-present mutant: 39 to 50 of its states judged
// stale beside stress-ng --cpu 4 with reads at new states; 8 with reads every
// 100 ms alone). Each read costs a /proc read, dear in an emulated guest.
constexpr auto kRunQueueMarkEvery = std::chrono::milliseconds(100);
}  // namespace

RecordWatcher::RecordWatcher(pid_t pid, RecordLayout layout, PointerSite site, ActiveTraceOf active_trace,
                             std::unique_ptr<ThreadPointerSource> thread_pointers, std::chrono::microseconds interval)
    : pid_(pid), layout_(std::move(layout)), site_(site), active_trace_(std::move(active_trace)),
      thread_pointers_(std::move(thread_pointers)), memory_(pid), interval_(interval) {}

RecordWatcher::~RecordWatcher() { stop(); }

void RecordWatcher::start() {
  if (running_.exchange(true)) return;
  thread_ = std::thread([this] {
    while (running_) {
      poll_once();
      std::this_thread::sleep_for(interval_);
    }
  });
}

void RecordWatcher::stop() {
  running_ = false;
  if (thread_.joinable()) thread_.join();
}

void RecordWatcher::release_thread_pointer_source() {
  stop();
  thread_pointers_.reset();
}

std::optional<std::uint64_t> RecordWatcher::thread_pointer(pid_t tid, std::chrono::steady_clock::time_point now) {
  if (auto it = thread_pointer_cache_.find(tid); it != thread_pointer_cache_.end()) return it->second;
  if (auto it = thread_pointer_retry_at_.find(tid); it != thread_pointer_retry_at_.end() && now < it->second)
    return std::nullopt;
  auto tp = thread_pointers_->thread_pointer(tid);
  if (!tp || *tp == 0) {
    // Back off per thread: under qemu-user, qemu's own threads are never
    // known to the gdbstub, and every attempt stops the whole guest.
    auto& backoff = thread_pointer_backoff_[tid];
    backoff = std::min(backoff == std::chrono::milliseconds(0) ? kThreadPointerRetry : backoff * 2, kMaxThreadPointerRetry);
    thread_pointer_retry_at_[tid] = now + backoff;
    std::lock_guard lock(mutex_);
    ++stats_.thread_pointer_failures;
    if (!tp && errors_.size() < kMaxErrorsKept) errors_.push_back(tp.error().message());
    return std::nullopt;
  }
  thread_pointer_cache_[tid] = *tp;
  return *tp;
}

namespace {

// A thread without a TLS block for the variable's module (dynamic TLS it has
// not touched yet) holds the variable's initial null pointer: it has
// published nothing, as a thread whose pointer reads 0.
Expected<ThreadRecordRead> unallocated_as_unpublished(Expected<ThreadRecordRead> read) {
  if (!read && read.error().kind == ErrorKind::kNotAllocated) return ThreadRecordRead{};
  return read;
}

}  // namespace

void RecordWatcher::poll_once() {
  // Thread ids from procfs: asking the thread-pointer source (a gdbstub) for
  // its thread list would stop the guest on every poll.
  auto now = std::chrono::steady_clock::now();
  if (now >= leader_state_read_at_ + kLeaderStateRecheck) {
    leader_zombie_ = live_task(pid_) != pid_;
    leader_state_read_at_ = now;
  }
  auto tids = list_threads(pid_, leader_zombie_);
  if (now >= marks_taken_at_ + kRunQueueMarkEvery) {
    marks_taken_at_ = now;
    std::lock_guard lock(mutex_);
    for (pid_t tid : tids)
      if (last_bytes_.count(tid)) run_queue_marks_.take(tid);
  }
  // Thread pointers first, then let the target run again: a gdbstub source
  // keeps a qemu guest stopped from its first read until resume(), and the
  // records are read from memory without stopping anything.
  std::vector<std::pair<pid_t, std::uint64_t>> readable;
  bool asked = false;
  for (pid_t tid : tids) {
    asked = asked || !thread_pointer_cache_.count(tid);
    if (auto tp = thread_pointer(tid, now)) readable.emplace_back(tid, *tp);
  }
  if (asked) {
    if (auto st = thread_pointers_->resume(); !st) {
      std::lock_guard lock(mutex_);
      if (errors_.size() < kMaxErrorsKept) errors_.push_back(st.error().message());
    }
  }
  std::set<std::pair<TraceId, SpanId>> active;
  for (auto [tid, thread_pointer] : readable) {
    const std::optional<std::uint64_t> tp = thread_pointer;
    auto first = unallocated_as_unpublished(read_thread_record(memory_, layout_, *tp, site_));
    auto second = first ? unallocated_as_unpublished(read_thread_record(memory_, layout_, *tp, site_)) : first;
    auto read_by = std::chrono::steady_clock::now();
    std::lock_guard lock(mutex_);
    ++stats_.polls;
    if (!first || !second) {
      ++stats_.record_read_failures;
      continue;
    }
    record_pointers_[tid] = first->record_pointer;
    if (first->record_pointer == 0 && second->record_pointer == 0 && !last_bytes_.count(tid))
      seen_before_publication_.insert(tid);
    if (!first->bytes || !second->bytes) continue;  // no record published for this thread (yet)
    if (first->record_pointer != second->record_pointer || *first->bytes != *second->bytes) {
      ++stats_.torn_reads;
      continue;
    }
    const RecordBytes& bytes = *first->bytes;
    auto last = last_bytes_.find(tid);
    if (last == last_bytes_.end() || last->second != bytes) {
      last_bytes_[tid] = bytes;
      // The thread stored this state after the last read that saw its previous one: its waits read now
      // count every wait up to then (it ran to store).
      std::optional<std::int64_t> stored_after;
      if (auto open = open_observation_.find(tid); open != open_observation_.end() && open->second >= observations_dropped_)
        stored_after = std::chrono::duration_cast<std::chrono::nanoseconds>(
                           observations_[open->second - observations_dropped_].last_seen.time_since_epoch())
                           .count();
      run_queue_marks_.take(tid, stored_after);
      if (observations_.size() >= kMaxObservations) {
        observations_.erase(observations_.begin());
        ++observations_dropped_;
      }
      observations_.push_back(RecordObservation{now, tid, first->record_pointer, bytes, read_by, now});
      open_observation_[tid] = observations_dropped_ + observations_.size() - 1;
    } else if (auto open = open_observation_.find(tid);
               open != open_observation_.end() && open->second >= observations_dropped_) {
      observations_[open->second - observations_dropped_].last_seen = now;
    }
    if (auto trace = active_trace_ ? active_trace_(bytes) : std::nullopt) {
      auto key = std::make_pair(trace->trace_id, trace->context_id);
      auto [it, inserted] = contexts_.try_emplace(key);
      auto& seen = it->second;
      if (inserted) {
        seen.trace_id = trace->trace_id;
        seen.context_id = trace->context_id;
        seen.trace_flags = trace->trace_flags;
        seen.first_seen = now;
      }
      seen.last_seen = now;
      seen.threads.insert(tid);
      active.insert(key);
    }
  }
  std::lock_guard lock(mutex_);
  active_now_ = std::move(active);
}

std::map<pid_t, std::vector<RunQueueMark>> RecordWatcher::run_queue_marks() const {
  std::lock_guard lock(mutex_);
  return run_queue_marks_.marks();
}

std::vector<RecordObservation> RecordWatcher::observations() const {
  std::lock_guard lock(mutex_);
  return observations_;
}

std::vector<SeenContext> RecordWatcher::contexts() const {
  std::lock_guard lock(mutex_);
  std::vector<SeenContext> out;
  for (const auto& [key, t] : contexts_) out.push_back(t);
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.first_seen < b.first_seen; });
  return out;
}

std::vector<SeenContext> RecordWatcher::active_contexts() const {
  std::lock_guard lock(mutex_);
  std::vector<SeenContext> out;
  for (const auto& key : active_now_)
    if (auto it = contexts_.find(key); it != contexts_.end()) out.push_back(it->second);
  return out;
}

std::set<pid_t> RecordWatcher::seen_before_publication() const {
  std::lock_guard lock(mutex_);
  return seen_before_publication_;
}

std::map<pid_t, std::uint64_t> RecordWatcher::record_pointers() const {
  std::lock_guard lock(mutex_);
  return record_pointers_;
}

std::vector<std::string> RecordWatcher::errors() const {
  std::lock_guard lock(mutex_);
  return errors_;
}

WatcherStats RecordWatcher::stats() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

}  // namespace tracecorr::watch

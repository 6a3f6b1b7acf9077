// See thread_context_watch.hpp.
#include "thread_context_watch.hpp"

#include <time.h>

#include <algorithm>
#include <deque>
#include <functional>
#include <list>
#include <map>
#include <set>

#include "judges.hpp"
#include "otel_thread_context/registry.hpp"
#include "tracecorr/clock_offset.hpp"
#include "tracecorr/procfs.hpp"
#include "tracecorr/process_context.hpp"
#include "tracecorr/tls.hpp"

namespace tracecorr::otel_thread_context {
namespace {

constexpr auto kFindInterval = std::chrono::milliseconds(10);
constexpr auto kContextPollInterval = std::chrono::milliseconds(1);
// Each thread is stopped this often (every thread in each round): a record
// that lives a few tens of milliseconds is read several times.
constexpr unsigned kSamplingHz = 200;
// Watches at once (each a ptrace attachment and four debug registers of its
// own thread), and in all (a thread-per-request writer makes threads without end).
constexpr std::size_t kMaxWatchedThreads = 16;
constexpr std::size_t kMaxWatches = ThreadContextFacts::kMaxWatches;
// How often the process's threads are listed: a worker that starts while the
// window is open is watched from then on.
constexpr auto kThreadListInterval = std::chrono::milliseconds(20);
// A thread without its block of the module's dynamic TLS yet is asked again
// this often (a pool's thread allocates it at its first span).
constexpr auto kUnallocatedRetry = std::chrono::milliseconds(200);
// The sampled session looks at the spans received this often, and follows at
// most this many of the spans its records named, and of the receiver's.
constexpr auto kSpanLookInterval = std::chrono::milliseconds(100);
constexpr std::size_t kMaxSpansFollowed = 1024;

}  // namespace

ThreadContextWatch::ThreadContextWatch(std::string session, Lengths lengths)
    : sampled_(session == kSampledSession),
      window_(lengths.window),
      watch_quiet_(lengths.quiet),
      watch_ceiling_(std::max(lengths.ceiling, lengths.window)),
      want_named_records_(sampled_ ? lengths.want_named_records : 0),
      want_against_spans_(sampled_ ? lengths.want_records_against_spans : 0),
      wait_bounds_(lengths.wait_for_update) {
  facts_.session = std::move(session);
}

ThreadContextWatch::~ThreadContextWatch() { stop_watching(); }

void ThreadContextWatch::add_publication(Publication p) {
  if (update_wait_) update_wait_->published(p.published_at_ns);
  std::lock_guard lock(mutex_);
  for (const auto& seen : facts_.publications)
    if (seen.published_at_ns == p.published_at_ns) return;
  facts_.publications.push_back(std::move(p));
}

// TCTXR-02: no symbol is looked for until a process context names the keys.
bool ThreadContextWatch::find_publisher(conform::Session& session, conform::DiscoveryWait& wait) {
  std::size_t looked_at = 0;
  std::optional<Error> last_error;
  for (;;) {
    auto tree = session.target().processes();
    looked_at = std::max(looked_at, tree.size());
    for (const auto& p : tree) {
      auto snapshot = process_context::take_contents_snapshot(p.pid);
      if (!snapshot) {
        last_error = snapshot.error();
        continue;
      }
      auto data = reference_data_of(*snapshot);
      if (!data || !data->announces_thread_context()) continue;
      const auto& mapping = *std::find_if(snapshot->mappings.begin(), snapshot->mappings.end(),
                                          [](const auto& m) { return m.decoded && m.decoded->ok(); });
      if (!session.target().judge(p, "pid " + std::to_string(p.pid) + " (" + p.comm + ") publishes threadlocal.* keys in " +
                                         mapping.mapping.mapping.path))
        continue;  // a run before the agent that stays
      facts_.judged_pid = p.pid;
      if (wait_bounds_) update_wait_ = std::make_unique<watch::UpdateWait>(p.pid, *wait_bounds_);
      add_publication({mapping.read.header->published_at_ns, *data, std::nullopt});
      context_header_ = mapping.mapping.mapping.start;
      context_reader_ = std::thread([this] { follow_context(context_header_); });
      return true;
    }
    if (wait.over() || tree.empty()) break;
    std::this_thread::sleep_for(kFindInterval);
  }
  facts_.not_found = make_error("no process context carrying threadlocal.schema_version or "
                                "threadlocal.attribute_key_map appeared in " +
                                    std::to_string(looked_at) + " processes of the target: discovery waited until " +
                                    wait.figures() +
                                    (last_error ? " (last error: " + last_error->message() + ")" : ""),
                                "pid " + std::to_string(session.pid()));
  return false;
}

// Every publication while the session runs: the key map's history (TCTX-08,
// 10) and what the samples' timestamps name.
void ThreadContextWatch::follow_context(std::uint64_t header) {
  LiveProcessMemory memory(facts_.judged_pid);
  process_context::ReadOptions options;
  options.retry_pause = std::chrono::microseconds(50);
  process_context::CachedContextReader reader(memory, header, options);
  std::uint64_t last = 0;
  while (!stop_.load()) {
    const auto& read = reader.refresh();
    if (read.ok() && read.header && read.header->published_at_ns != last) {
      last = read.header->published_at_ns;
      Publication p;
      p.published_at_ns = last;
      if (auto payload = process_context::decode_payload(read.payload)) p.data = reference_data_of(*payload);
      else p.error = payload.error();
      add_publication(std::move(p));
    }
    std::this_thread::sleep_for(kContextPollInterval);
  }
}

void ThreadContextWatch::opened(conform::Session& session, conform::DiscoveryWait& wait) {
  facts_.launched = session.launched();
  if (!find_publisher(session, wait)) return;
  const pid_t pid = facts_.judged_pid;
  LiveProcessMemory memory(pid);
  LibraryCache cache;
  // TCTXR-03: under another schema the records live elsewhere; none is read.
  std::optional<ReferenceData> first;  // the context reader may be adding publications meanwhile
  {
    std::lock_guard lock(mutex_);
    first = facts_.publications.front().data;
  }
  if (first)
    if (auto other = other_schema(pid, *first, cache)) {
      std::lock_guard lock(mutex_);
      facts_.other_schema = *other;
      return;
    }
  for (;;) {  // TCTXR-04: the executable and every mapped library
    std::vector<PassedOver> passed_over;
    auto found = discover_process(pid, discovery_options(), cache, &passed_over);
    if (found && *found) {
      facts_.module = **found;
      break;
    }
    if (wait.over() || !session.target().alive()) {
      facts_.module_error = found ? make_error(ErrorKind::kNotFound, variable_not_found(passed_over),
                                               "pid " + std::to_string(pid))
                                  : found.error();
      break;
    }
    std::this_thread::sleep_for(kFindInterval);
  }
  if (!facts_.module) return;
  auto c_library = detect_c_library(pid, facts_.module->elf.machine);
  for (;;) {  // TCTXR-05: whichever model reaches it; the loader's relocation is worth waiting for
    auto access = resolve_tls_access(memory, *facts_.module, c_library ? *c_library : CLibrary::Unknown);
    if (access) {
      access_ = *access;
      facts_.access_model = to_string(access->model);
      break;
    }
    if (access.error().kind != ErrorKind::kNotReady || wait.over() || !session.target().alive()) {
      facts_.access_error = access.error();
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  if (!access_) return;
  if (!sampled_) {
#if !defined(__x86_64__) && !defined(__aarch64__)
    facts_.watch_unavailable = "hardware watchpoints are implemented for x86-64 and arm64 hosts only";
#endif
    if (runs_under_qemu_user(pid))
      facts_.watch_unavailable = "the target runs under qemu-user: its threads' pointers are the guest's, not the host's";
    if (!facts_.watch_unavailable.empty()) return;
  }
  reading_ = true;
  if (sampled_) {
    sampling_began_ = Clock::now();
    sampling_progress_ = std::make_unique<watch::TargetProgress>(pid);
    readers_ = std::thread([this] { sample(context_header_); });
  }
  else readers_ = std::thread([this] { watch_threads(); });
}

void ThreadContextWatch::sample(std::uint64_t header) {
  PtraceSamplerOptions options;
  options.frequency_hz = kSamplingHz;
  options.max_frames = 1;  // the record is what is judged, not the stack
  options.run_queue_waits = true;  // TCTX-27 judges a writer's lateness in its own time
  auto sampler = make_ptrace_sampler(options);
  const pid_t pid = facts_.judged_pid;
  if (auto st = sampler->track(pid, thread_context_record_layout(), access_->site); !st) {
    std::lock_guard lock(mutex_);
    facts_.access_error = st.error().within("the ptrace sampler");
    done_ = true;
    return;
  }
  if (header) (void)sampler->track_process_context(pid, header);
  {
    std::lock_guard lock(mutex_);
    const ClockOffset at_start = wall_minus_monotonic();
    facts_.wall_minus_monotonic_at_start_ns = at_start.wall_minus_monotonic_ns;
    facts_.wall_offset_uncertainty_ns = at_start.uncertainty_ns;
  }
  // When the session decides its own length, the scenario ends sampling (stop_watching()).
  const auto until = Clock::now() + (session_decides() ? watch_ceiling_ + window_ : window_);
  while (!stop_.load() && Clock::now() < until) {
    auto polled = sampler->poll(
        [this](const Sample& s) {
          std::lock_guard lock(mutex_);
          if (facts_.samples.size() >= ThreadContextFacts::kMaxSamples) {
            ++facts_.samples_dropped;
            return;
          }
          facts_.samples.push_back({s.tid, s.time_ns, s.record_pointer, s.error, s.record, s.record_declared_length,
                                    s.context_published_at, s.interrupted_ns, s.run_queue_wait_ns});
          if ((want_named_records_ || want_against_spans_) && s.record)
            if (auto r = decode_record(*s.record); r && r->readable() && !r->ids_zero()) {
              ++named_records_;
              if (named_spans_.size() < kFlagsNeverSetSpans) named_spans_.insert({r->trace_id, r->span_id});
              named_span_count_ = named_spans_.size();
              if (records_by_span_.size() < kMaxSpansFollowed || records_by_span_.count(r->span_id))
                ++records_by_span_[r->span_id];
            }
        },
        std::chrono::milliseconds(50));
    if (!polled) break;  // the process is gone, or ptrace is refused: the samples so far stand
  }
  {
    std::lock_guard lock(mutex_);
    const ClockOffset at_end = wall_minus_monotonic();
    facts_.wall_minus_monotonic_at_end_ns = at_end.wall_minus_monotonic_ns;
    facts_.wall_offset_uncertainty_ns += at_end.uncertainty_ns;
  }
  done_ = true;
}

// One watch's progress, shared between its thread (which counts) and the
// manager (which decides when the session has seen enough).
struct ThreadContextWatch::WatchProgress {
  Clock::time_point began = Clock::now();
  std::atomic<bool> finished{false};
  std::atomic<std::size_t> changes{0};  // pointer swaps and valid flips so far (as the judges count them)
  std::size_t counted = 1;              // states counted (the watch's thread only; the first is the watch's start)
  std::optional<std::uint64_t> last_record;  // the last non-NULL pointer before them
  // The thread has no TLS block for the module yet (dynamic TLS: allocated at
  // its first use); set before `finished`.
  std::optional<Error> unallocated;
};

namespace {

using WatchProgress = ThreadContextWatch::WatchProgress;

// Counts the states added since the last call: a store that moved the pointer
// from one record to another, or changed valid on the record still pointed to.
void count_changes(const watch::PublishedRecordWatchReport& report, WatchProgress& progress) {
  std::size_t changes = progress.changes.load();
  for (std::size_t k = progress.counted; k < report.states.size(); ++k) {
    const auto& before = report.states[k - 1];
    const auto& now = report.states[k];
    if (before.pointer) progress.last_record = before.pointer;
    if (now.cause == watch::PublishedRecordState::Cause::kOtherWriter) continue;
    const auto& last = progress.last_record;
    if (now.pointer != before.pointer) changes += now.pointer && last && *last != now.pointer;
    else if (now.pointer) changes += valid_record(before.record) != valid_record(now.record);
  }
  progress.counted = std::max<std::size_t>(progress.counted, report.states.size());
  progress.changes = changes;
}

// The watched session's watches: one per thread at a time, at most
// kMaxWatchedThreads at once and kMaxWatches in all; threads wait their turn.
class WatchPool {
 public:
  // `watch(tid, progress)` runs one watch to its end (on its own thread).
  using RunWatch = std::function<Expected<watch::PublishedRecordWatchReport>(pid_t, WatchProgress&)>;
  explicit WatchPool(RunWatch run) : run_(std::move(run)) {}
  ~WatchPool() { join_all(); }

  // New threads of `pid`, and threads whose turn came again, join the queue.
  void take_new_threads(pid_t pid, Clock::time_point now);
  // Ends what finished: counts its changes, queues again a thread that gave
  // way or had no TLS block yet.
  void reap(Clock::time_point now);
  void start_waiting(bool may_begin);
  std::vector<const WatchProgress*> running() const;
  std::size_t changes_of_finished() const { return changes_of_finished_; }
  std::size_t waiting() const { return waiting_.size(); }
  const std::atomic<std::size_t>& waiting_count() const { return waiting_count_; }
  bool idle() const { return running_.empty(); }
  // Every watch, and one error for each thread that never had its block.
  std::vector<ThreadWatch> take_results();

 private:
  struct Running {
    pid_t tid;
    std::thread thread;
    std::shared_ptr<WatchProgress> progress;
  };
  void join_all() {
    for (auto& r : running_) r.thread.join();
    running_.clear();
  }

  RunWatch run_;
  std::set<pid_t> known_;
  std::deque<pid_t> waiting_;
  std::atomic<std::size_t> waiting_count_{0};
  std::list<Running> running_;
  std::map<pid_t, std::pair<Clock::time_point, Error>> unallocated_;  // tid -> when to ask again, why
  std::vector<ThreadWatch> results_;
  std::mutex results_mutex_;
  std::size_t begun_ = 0, changes_of_finished_ = 0;
};

void WatchPool::take_new_threads(pid_t pid, Clock::time_point now) {
  for (auto tid : numbered_entries("/proc/" + std::to_string(pid) + "/task"))
    if (known_.insert(static_cast<pid_t>(tid)).second) waiting_.push_back(static_cast<pid_t>(tid));
  for (auto& [tid, retry] : unallocated_)
    if (retry.first <= now) {
      retry.first = Clock::time_point::max();  // until this attempt answers
      waiting_.push_back(tid);
    }
  std::lock_guard lock(results_mutex_);
  for (auto& r : results_)  // a watch that gave way: its thread waits for another turn
    if (r.report && !r.requeued && r.report->ended_because == "the caller ended it" && !r.report->thread_exited) {
      r.requeued = true;
      waiting_.push_back(r.tid);
    }
}

void WatchPool::reap(Clock::time_point now) {
  for (auto it = running_.begin(); it != running_.end();) {
    if (!it->progress->finished.load()) {
      ++it;
      continue;
    }
    it->thread.join();
    changes_of_finished_ += it->progress->changes.load();
    if (it->progress->unallocated) {
      unallocated_.insert_or_assign(it->tid, std::make_pair(now + kUnallocatedRetry, *it->progress->unallocated));
      --begun_;  // not a watch: the thread is asked again
    } else {
      unallocated_.erase(it->tid);
    }
    it = running_.erase(it);
  }
}

void WatchPool::start_waiting(bool may_begin) {
  while (may_begin && running_.size() < kMaxWatchedThreads && !waiting_.empty() && begun_ < kMaxWatches) {
    const pid_t tid = waiting_.front();
    waiting_.pop_front();
    auto progress = std::make_shared<WatchProgress>();
    running_.push_back({tid, std::thread([this, tid, progress] {
                          ThreadWatch result;
                          result.tid = tid;
                          auto report = run_(tid, *progress);
                          if (report) result.report = std::move(*report);
                          else result.error = report.error();
                          if (result.error && result.error->kind == ErrorKind::kNotAllocated) {
                            progress->unallocated = result.error;  // asked again later, not a watch
                          } else {
                            std::lock_guard lock(results_mutex_);
                            results_.push_back(std::move(result));
                          }
                          progress->finished = true;
                        }),
                        progress});
    ++begun_;
  }
  waiting_count_ = waiting_.size();
}

std::vector<const WatchProgress*> WatchPool::running() const {
  std::vector<const WatchProgress*> out;
  for (const auto& r : running_) out.push_back(r.progress.get());
  return out;
}

std::vector<ThreadWatch> WatchPool::take_results() {
  join_all();
  std::lock_guard lock(results_mutex_);
  for (auto& [tid, retry] : unallocated_) results_.push_back({tid, std::nullopt, retry.second, false});
  unallocated_.clear();
  return std::move(results_);
}

}  // namespace

// Every thread the process has while the session goes on is watched, from
// when it is first seen: an SDK's workers may start seconds after its process
// context (each with its tracer), and a thread pool may replace its threads
// (a thread without its block of dynamic TLS yet is asked again). While
// threads wait for a watch, one whose thread has stored nothing for a quarter
// of the window gives way and waits again, so a process with more threads
// than watches (a JVM) has each watched in turn. The session ends
// (facts_.watch_ended_because says why):
//  - once the window has passed, the watches have seen the kMinWatchedChanges
//    changes a verdict needs in all, and every watch has run a window or seen
//    that many itself;
//  - past the window, when no thread stored anything in the quiet stretch of
//    the writer's own time (watch::ActivityClock) since the last change
//    (or the start): a writer that never publishes, or stopped (the judges
//    then say inconclusive when they have too few);
//  - at the ceiling.
// An emulated writer beside a busy host makes a change every few seconds
// while watched: a session that ended once every watch had run its window
// had seen 2, and its four rules of publication were inconclusive.
void ThreadContextWatch::watch_threads() {
  const pid_t pid = facts_.judged_pid;
  const PointerSite site = access_->site;
  const auto began = Clock::now();
  const auto give_way_after = window_ / 4;
  watch::ActivityClock activity(pid, watch_ceiling_);
  std::size_t changes_seen = 0;
  std::atomic<bool> ending{false};
  std::unique_ptr<WatchPool> pool;
  pool = std::make_unique<WatchPool>([&](pid_t tid, WatchProgress& mine) {
    LiveProcessMemory memory(pid);
    const RecordLayout& layout = thread_context_record_layout();
    auto keep_watching = [&](const watch::PublishedRecordWatchReport& so_far) {
      count_changes(so_far, mine);
      if (stop_.load() || ending.load()) return false;
      if (pool->waiting_count().load() == 0 || so_far.states.empty()) return true;
      return Clock::now() - so_far.states.back().at < give_way_after;  // its last store (or its beginning)
    };
    return watch::watch_published_record(
        pid, tid, layout, [&](std::uint64_t tp) { return pointer_address(memory, layout, site, tp); }, watch_ceiling_,
        std::chrono::milliseconds(5), keep_watching);
  });
  std::string why;
  for (;;) {
    const auto now = Clock::now();
    pool->reap(now);
    if (!ending.load()) pool->take_new_threads(pid, now);
    pool->start_waiting(!ending.load() && !stop_.load());
    if (!ending.load()) {
      std::size_t changes = pool->changes_of_finished();
      for (const auto* w : pool->running()) changes += w->changes.load();
      if (changes > changes_seen) activity.changed();
      changes_seen = std::max(changes_seen, changes);
      why = stop_.load() ? "the session ended"
                         : why_watching_ends(now - began, pool->running(), changes_seen, activity);
      ending = !why.empty();
    }
    if (ending.load() && pool->idle()) break;
    std::this_thread::sleep_for(kThreadListInterval);
  }
  auto results = pool->take_results();
  std::lock_guard lock(mutex_);
  facts_.watches = std::move(results);
  facts_.threads_unwatched = pool->waiting();
  facts_.watched_for = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - began);
  facts_.watch_ended_because = why;
  done_ = true;
}

// Why the watched session ends now ("": it goes on); see watch_threads().
std::string ThreadContextWatch::why_watching_ends(Clock::duration elapsed, const std::vector<const WatchProgress*>& running,
                                                  std::size_t changes,
                                                  const watch::ActivityClock& activity) const {
  bool satisfied = true;
  for (const auto* w : running)
    satisfied = satisfied && (Clock::now() - w->began >= window_ || w->changes.load() >= kMinWatchedChanges);
  const bool window_passed = elapsed >= window_;
  auto writer_time = activity.since_change();
  if (!writer_time) return "the writer ended";
  const std::string counted = std::to_string(changes) + " change(s) seen";
  if (activity.past_ceiling()) return counted + ", the ceiling: " + writer_time->describe() + " since the last";
  if (window_passed && changes >= kMinWatchedChanges && satisfied)
    return counted + ": every watch ran its window or saw " + std::to_string(kMinWatchedChanges);
  if (window_passed && writer_time->available() >= watch_quiet_)
    return changes == 0 ? "no pointer swap or valid flip in " + writer_time->describe()
                        : counted + ", none in the last " + writer_time->describe();
  return "";
}

bool ThreadContextWatch::wants_more_samples() {
  if (!want_named_records_ || !sampling_began_) return false;
  const auto elapsed = Clock::now() - *sampling_began_;
  if (elapsed < window_) return true;
  const std::size_t named = named_records_.load(), spans = named_span_count_.load();
  const std::string counted = std::to_string(named) + " valid record(s) naming " + std::to_string(spans) +
                              " span(s) sampled (" + std::to_string(want_named_records_) + " naming " +
                              std::to_string(kFlagsNeverSetSpans) + " wanted, for TCTX-14)";
  auto writer_time = sampling_progress_->since_mark();
  std::string why;
  if (named >= want_named_records_ && spans >= kFlagsNeverSetSpans) why = counted;
  else if (!writer_time) why = counted + "; the writer ended";
  else if (elapsed >= watch_ceiling_) why = counted + ", the ceiling: " + writer_time->describe();
  else if (writer_time->available() >= watch_quiet_) why = counted + " in " + writer_time->describe();
  if (why.empty()) return true;
  std::lock_guard lock(mutex_);
  if (elapsed >= window_ + kThreadListInterval) sampling_ended_because_ = why;  // past the window: it waited
  return false;
}

bool ThreadContextWatch::wants_records_against_spans(const otlp::OtlpReceiver& receiver) {
  if (!want_against_spans_ || !sampling_began_) return false;
  const auto now = Clock::now();
  const auto elapsed = now - *sampling_began_;
  if (elapsed < window_ || now < next_span_look_) return true;
  next_span_look_ = now + kSpanLookInterval;
  // The spans received since the last look, read under the receiver's lock without copying them.
  (void)receiver.wait_for(
      [&](const std::vector<otlp::ReceivedSpan>& spans) {
        for (; received_scanned_ < spans.size() && received_span_ids_.size() < kMaxSpansFollowed; ++received_scanned_)
          received_span_ids_.insert(spans[received_scanned_].span_id);
        return true;
      },
      std::chrono::milliseconds(0));
  if (received_scanned_ == 0) return false;  // no span exported (yet): nothing to judge records against
  std::size_t against = 0;
  {
    std::lock_guard lock(mutex_);
    for (const auto& [span, records] : records_by_span_) against += received_span_ids_.count(span) ? records : 0;
  }
  const std::string counted = std::to_string(against) + " sampled record(s) naming a span the writer exported (" +
                              std::to_string(want_against_spans_) + " wanted, for TCTX-14 and 27)";
  auto writer_time = sampling_progress_->since_mark();
  std::string why;
  if (against >= want_against_spans_) why = counted;
  else if (!writer_time) why = counted + "; the writer ended";
  else if (elapsed >= watch_ceiling_) why = counted + ", the ceiling: " + writer_time->describe();
  else if (writer_time->available() >= watch_quiet_) why = counted + " in " + writer_time->describe();
  if (why.empty()) {
    waited_for_spans_ = true;
    return true;
  }
  std::lock_guard lock(mutex_);
  if (waited_for_spans_) sampling_ended_because_ = why;  // it went on for them past the window
  return false;
}

std::string ThreadContextWatch::sampling_ended_because() const {
  std::lock_guard lock(mutex_);
  return sampling_ended_because_;
}

std::string ThreadContextWatch::watching_summary() const {
  std::lock_guard lock(mutex_);
  if (facts_.watch_ended_because.empty()) return "";
  return std::to_string(facts_.watched_for.count()) + " ms (" + std::to_string(facts_.watches.size()) +
         " watch(es)): " + facts_.watch_ended_because;
}

void ThreadContextWatch::stop_watching() {
  stop_ = true;
  if (readers_.joinable()) readers_.join();
  if (context_reader_.joinable()) context_reader_.join();
  done_ = true;
}

std::shared_ptr<const conform::ProtocolEvidence> ThreadContextWatch::evidence() const {
  std::lock_guard lock(mutex_);
  return std::make_shared<ThreadContextFacts>(facts_);
}

const ThreadContextFacts* facts(const conform::SessionSet& sessions, const std::string& name) {
  const auto* s = sessions.find(name);
  return s ? s->protocol_as<ThreadContextFacts>() : nullptr;
}

}  // namespace tracecorr::otel_thread_context

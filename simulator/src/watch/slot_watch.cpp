// Publication order by hardware watchpoints on TLS slots; see slot_watch.hpp. The
// ptrace discipline is hardware_watch.hpp's: every thread is released
// (registers cleared, detached) on every way out.
#include "tracecorr/watch/slot_watch.hpp"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <fstream>
#include <future>
#include <map>
#include <set>
#include <thread>

#include "followed_tree.hpp"
#include "hardware_watch.hpp"
#include "tracecorr/watch/activity_clock.hpp"
#include "tracecorr/memory.hpp"

namespace tracecorr::watch {

std::string SlotWatchReport::describe() const {
  std::string s = std::to_string(threads_started) + " threads started under the watch, " + std::to_string(threads_armed) +
                  " slots armed before their first store, " + std::to_string(publications_seen) + " publications seen";
  if (!not_armed.empty()) {
    s += "; not armed:";
    for (const auto& [why, n] : not_armed) s += " " + std::to_string(n) + " (" + why + ")";
  }
  if (!ended_because.empty()) s += "; ended: " + ended_because;
  if (error) s += "; stopped early: " + error->message();
  return s;
}

struct SlotWatch::State {
  pid_t root = 0;
  RecordLayout layout;
  SlotLocator locate;
  Settings settings;
  std::atomic<bool> end_requested{false};
  std::atomic<bool> settled{false};
  SlotWatchReport report;  // the watch thread's until it is joined
  std::thread thread;
  void run(std::promise<Status>& seized);
};

SlotWatch::SlotWatch(std::unique_ptr<State> state) : state_(std::move(state)) {}

SlotWatch::~SlotWatch() { (void)finish(); }

SlotWatchReport SlotWatch::finish(std::chrono::steady_clock::time_point deadline) {
  if (!state_->thread.joinable()) return state_->report;
  while (!state_->settled && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  state_->end_requested = true;
  state_->thread.join();
  return state_->report;
}

Expected<std::unique_ptr<SlotWatch>> SlotWatch::follow_launch(pid_t pid, const RecordLayout& layout, SlotLocator locate,
                                                            Settings settings) {
#if !defined(TRACECORR_HARDWARE_WATCH)
  (void)pid, (void)layout, (void)locate, (void)settings;
  return make_error("the TLS slot watch needs hardware watchpoints, implemented for x86-64 and arm64 hosts only");
#else
  if (auto st = layout.check(); !st) return st.error().within("TLS slot watch");
  if (settings.watched_bytes == 0 || settings.watched_bytes > kMaxWatchedBytes)
    return make_error("TLS slot watch: " + std::to_string(settings.watched_bytes) + " bytes asked, 1.." +
                      std::to_string(kMaxWatchedBytes) + " can be watched");
  auto state = std::make_unique<State>();
  state->root = pid;
  state->layout = layout;
  state->locate = std::move(locate);
  state->settings = settings;
  if (auto st = hardware_watch::start_watch_thread(*state); !st) return st.error();
  return std::unique_ptr<SlotWatch>(new SlotWatch(std::move(state)));
#endif
}

#if !defined(TRACECORR_HARDWARE_WATCH)
void SlotWatch::State::run(std::promise<Status>& seized) { seized.set_value(make_error("no hardware watchpoints on this host")); }
#else
namespace {

using namespace hardware_watch;

constexpr auto kArmRetryInterval = std::chrono::milliseconds(20);
// How often the target's own time is read (its threads' schedstat) once a slot is located.
constexpr auto kProgressLook = std::chrono::milliseconds(50);
constexpr char kPublishedFirst[] = "published before its slot could be watched";

struct SlotThread {
  std::unique_ptr<WatchSession> session;
  pid_t pid = 0;
  bool armed = false;
  bool settled = false;  // armed, or published before it could be: nothing more to do
  std::uint64_t slot = 0;
  std::string why_not_armed;
};

class SlotFollower {
 public:
  explicit SlotFollower(SlotWatch::State& state) : s_(state), report_(state.report), tree_(/*syscall_stops=*/false) {}

  void run() {
    const auto began = Clock::now();
    IdlePause pause(std::chrono::microseconds(1000));
    auto next_arm_retry = began + kArmRetryInterval;
    for (;;) {
      const auto now = Clock::now();
      if (auto why = reason_to_end(began, now)) {
        report_.ended_because = *why;
        break;
      }
      auto any = tree_.pass(
          [this](SlotThread& t, const Stop& stop) {
            handle(t, stop);
            return AfterStop::kResume;
          },
          [this](const SlotThread& t) { count_unarmed(t); });
      if (!any) {
        fail(any.error());
        break;
      }
      if (now >= next_arm_retry) {
        arm_late_threads();
        next_arm_retry = Clock::now() + kArmRetryInterval;
      }
      pause.after(*any);
    }
    report_.threads_started += tree_.take_in_unseen_tasks();
    for (auto& [tid, t] : tree_.tasks()) count_unarmed(t);
    tree_.clear();  // each session disarms and detaches
    s_.settled = true;
  }

  Status seize_root() {
    if (auto st = tree_.seize_root(s_.root); !st) return st;
    ++report_.threads_started;
    return Ok{};
  }

 private:
  // Once a slot is located, the watch's windows are of the target's own time
  // (ActivityClock: wall minus its longest wait for a CPU): a starved target
  // (an emulated guest beside a busy host) gets the chance to start its
  // threads and publish that an idle one gets. The ceiling is wall clock.
  // Activity (a new thread, an armed slot, a publication) is counted at the
  // next look, not at each stop: a look reads every thread's schedstat.
  std::optional<std::string> reason_to_end(Clock::time_point began, Clock::time_point now) {
    if (s_.end_requested) return "ended by the session";
    if (tree_.empty()) return "every followed thread exited";
    if (!activity_) {
      if (now - began >= s_.settings.until_located)
        return "no thread's slot could be located within " + std::to_string(s_.settings.until_located.count()) + " ms";
      return std::nullopt;
    }
    if (activity_->past_ceiling(now))
      return "the ceiling, " + std::to_string(s_.settings.ceiling.count()) + " ms after the first slot was located" +
             (last_reading_ ? " (" + last_reading_->describe() + ")" : std::string());
    if (now < next_progress_look_) return std::nullopt;
    next_progress_look_ = now + kProgressLook;
    auto look = activity_->look(activity_since_look_);
    if (!look) return std::nullopt;  // its threads cannot be read: tree_.empty() tells soon
    activity_since_look_ = false;
    last_reading_ = look->since_start;
    if (last_reading_->available() >= s_.settings.after_located)
      return std::to_string(s_.settings.after_located.count()) + " ms of the target's own time after the first slot "
             "was located (" + last_reading_->describe() + ")";
    if (report_.publications_seen > 0 && look->since_change.available() >= s_.settings.quiet)
      return "no new thread or publication for " + std::to_string(s_.settings.quiet.count()) +
             " ms of the target's own time (" + last_reading_->describe() + ")";
    return std::nullopt;
  }

  void handle(SlotThread& t, const Stop& stop) {
    if (starts_a_task(stop)) {
      // The new task is attached already and reports its own first stop.
      if (tree_.adopt_new_task(t, stop)) {
        ++report_.threads_started;
        activity_since_look_ = true;
      }
    } else if (stop.kind == Stop::Kind::kEventStop && stop.event == PTRACE_EVENT_EXEC) {
      t.armed = t.settled = false;  // a new image: the kernel cleared the debug registers
      if (s_.settings.on_exec) s_.settings.on_exec(t.pid);
    } else if (stop.kind == Stop::Kind::kSignal) {
      auto signal = t.session->take_signal(stop);
      if (!signal) return fail(signal.error());
      using Taken = WatchSession::SignalStop::Kind;
      if (signal->kind == Taken::kCameFirst) return handle(t, signal->came_first);
      if (signal->kind == Taken::kStoreDone) observe_store(t);
      else if (signal->kind == Taken::kTheTargets) ++report_.signals_forwarded;
    }
    if (!t.settled) try_arm(t);
  }

  // A thread held in a stop: arm its slot if it can be located and is still zero.
  void try_arm(SlotThread& t) {
    auto tp = t.session->thread_pointer();
    if (!tp) return void(t.why_not_armed = tp.error().message());
    if (*tp == 0) return void(t.why_not_armed = "it had no thread pointer yet");
    auto slot = s_.locate(t.pid, *tp);
    if (!slot) return void(t.why_not_armed = slot.error().message());
    if (!activity_) {
      // The process that holds the library: a launch script may not exec it.
      activity_.emplace(t.pid, s_.settings.ceiling);
    }
    located_pids_.insert(t.pid);
    auto value = LiveProcessMemory(t.pid).read_u64(*slot);
    if (!value) return void(t.why_not_armed = "its slot could not be read");
    t.settled = true;
    if (*value != 0 && !s_.settings.every_store) return void(t.why_not_armed = kPublishedFirst);
    std::vector<std::uint64_t> chunks;  // a misaligned slot straddles one more
    for (std::uint64_t c = *slot & ~std::uint64_t{kWatchChunk - 1}; c < *slot + s_.settings.watched_bytes; c += kWatchChunk)
      chunks.push_back(c);
    if (chunks.size() > kRegisters) return void(t.why_not_armed = "its slot spans more 8-byte chunks than there are watchpoints");
    if (auto st = t.session->arm(chunks); !st) return void(t.why_not_armed = st.error().message());
    t.armed = true;
    t.slot = *slot;
    ++report_.threads_armed;
    activity_since_look_ = true;
    if (s_.settings.every_store) record_state(t, /*at_arming=*/true);
  }

  // A publication of `t`'s slot, now: what every kind has.
  static SlotPublication publication_of(const SlotThread& t) {
    SlotPublication p;
    p.at = Clock::now();
    p.pid = t.pid;
    p.tid = t.session->tid();
    p.slot_address = t.slot;
    return p;
  }

  // every_store: the watched bytes now, as one more publication.
  void record_state(const SlotThread& t, bool at_arming) {
    SlotPublication p = publication_of(t);
    p.at_arming = at_arming;
    p.slot_bytes.resize(s_.settings.watched_bytes);
    if (auto st = LiveProcessMemory(t.pid).read(t.slot, p.slot_bytes); !st) {
      p.slot_bytes.clear();
      p.read_error = st.error();
    } else {
      std::memcpy(&p.record_pointer, p.slot_bytes.data(), std::min<std::size_t>(8, p.slot_bytes.size()));
    }
    if (!at_arming) ++report_.publications_seen;
    keep(std::move(p));
  }

  void keep(SlotPublication p) {
    if (s_.settings.on_publication) s_.settings.on_publication(p);
    if (report_.publications.size() < SlotWatchReport::kMaxKeptPublications) report_.publications.push_back(std::move(p));
    activity_since_look_ = true;
  }

  void observe_store(SlotThread& t) {
    LiveProcessMemory memory(t.pid);
    if (!t.armed) return;
    if (s_.settings.every_store) return record_state(t, /*at_arming=*/false);
    auto read_pointer = memory.read_u64(t.slot);
    if (!read_pointer || *read_pointer == 0) return;  // cleared, or a store to a neighbour in the chunk
    const std::uint64_t pointer = *read_pointer;
    SlotPublication p = publication_of(t);
    p.record_pointer = pointer;
    // Read before the thread runs on: a record completed a few instructions later is seen incomplete.
    if (auto read = read_record(memory, s_.layout, pointer)) p.bytes = std::move(read->bytes);
    else p.read_error = read.error();
    ++report_.publications_seen;
    keep(std::move(p));
  }

  // Threads that were running when their process's slot became locatable
  // (the library was loaded after they started): stop each once to arm it.
  void arm_late_threads() {
    std::map<pid_t, bool> locatable;  // asked once per process per round, not once per thread
    auto can_locate = [&](pid_t pid) {
      if (located_pids_.count(pid)) return true;
      auto [it, inserted] = locatable.try_emplace(pid, false);
      if (inserted) it->second = s_.locate(pid, 0).ok();
      return it->second;
    };
    for (auto& [tid, t] : tree_.tasks()) {
      if (t.settled || t.session->held()) continue;
      if (!can_locate(t.pid)) continue;
      auto stop = t.session->interrupt(kInterruptBound);
      if (!stop) return fail(stop.error());
      if (stop->kind == Stop::Kind::kExited) continue;  // erased at its next poll
      handle(t, *stop);
      if (auto st = t.session->resume(); !st) return fail(st.error());
    }
  }

  void count_unarmed(const SlotThread& t) {
    if (t.armed) return;
    ++report_.not_armed[t.why_not_armed.empty() ? "never stopped where its slot could be located" : t.why_not_armed];
  }

  void fail(const Error& e) {
    if (!report_.error) report_.error = e;
    s_.end_requested = true;
  }

  static constexpr std::uint64_t kWatchChunk = 8;
  SlotWatch::State& s_;
  SlotWatchReport& report_;
  FollowedTree<SlotThread> tree_;
  std::set<pid_t> located_pids_;
  std::optional<ActivityClock> activity_;  // of the first located slot's process, from then
  std::optional<TargetProgress::Reading> last_reading_;  // since then, at the last look
  Clock::time_point next_progress_look_;
  bool activity_since_look_ = false;  // a new thread or a publication since the last look
};

}  // namespace

void SlotWatch::State::run(std::promise<Status>& seized) { seize_then_follow<SlotFollower>(*this, seized); }
#endif

}  // namespace tracecorr::watch

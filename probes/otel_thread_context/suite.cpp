// OTEP 4947's conformance suite (conform::Suite): two sessions of the same
// command. "sampled" stops the threads now and then with the ptrace sampler
// and reads their records with the process context's timestamp, as a
// profiler does; it is what an attached target runs. "watched" follows each
// thread's stores to its pointer and record with hardware watchpoints.
#include <algorithm>
#include <thread>

#include "judges.hpp"
#include "otel_thread_context/registry.hpp"
#include "probes.hpp"
#include "thread_context_watch.hpp"
#include "tracecorr/process_context.hpp"

namespace tracecorr::otel_thread_context {
namespace {

using namespace std::chrono_literals;

// How long each session reads a running writer: long enough for a writer
// whose spans last tens of milliseconds to attach, append and detach many
// times, and for one that appends a key a few hundred milliseconds in.
constexpr auto kSampledWindow = 1500ms;
constexpr auto kWatchedWindow = 1500ms;
// Beyond the window: the readers' own ending.
constexpr auto kWindowMargin = 5s;
// Sessions last as long as the writer needs. When TCTX-08 or 10 is judged,
// the sampled session goes on past its window until the key map is
// republished (watch::UpdateWait): an SDK appends keys as its workers'
// tracers start, seconds into a loaded run; after the first republication,
// kUpdateSettle of the writer's time to sample records using the new keys.
// The watched session goes on until its watches saw enough of every thread
// that stores (ThreadContextWatch::watch_threads). Either ends after kQuiet
// of the writer's own time without what it waits for, and at kCeiling.
constexpr auto kUpdateSettle = 600ms;
constexpr auto kQuiet = 5000ms;
constexpr auto kCeiling = 20000ms;

bool judges_updates(const conform::ScenarioOptions& o) { return o.judges("TCTX-08") || o.judges("TCTX-10"); }

std::chrono::milliseconds scaled(std::chrono::milliseconds d, const conform::ScenarioOptions& o) {
  return std::chrono::milliseconds(static_cast<long long>(static_cast<double>(d.count()) * o.time_scale));
}

class ThreadContextSuite final : public conform::Suite {
 public:
  const ProtocolSpec& protocol() const override { return spec::kProtocol; }

  const std::vector<std::unique_ptr<conform::Probe>>& probes() const override {
    static const auto probes = make_probes();
    return probes;
  }

  std::vector<std::string> session_names() const override { return {kSampledSession, kWatchedSession}; }
  std::string attach_session() const override { return kSampledSession; }

  Expected<std::unique_ptr<conform::Session>> open_session(const conform::TargetSpec& target, const std::string& name,
                                                           const conform::ScenarioOptions& options) const override {
    conform::SessionSettings settings;
    settings.name = name;  // no library to discover by name: the part finds the publisher, then the module
    ThreadContextWatch::Lengths lengths;
    lengths.window = scaled(name == kSampledSession ? kSampledWindow : kWatchedWindow, options);
    lengths.quiet = scaled(kQuiet, options);
    lengths.ceiling = std::max(kCeiling, scaled(kCeiling, options));
    if (name == kSampledSession && judges_updates(options))
      lengths.wait_for_update = watch::UpdateWaitBounds{lengths.window, scaled(kUpdateSettle, options), lengths.quiet,
                                                          lengths.ceiling};
    // TCTX-14 without spans to compare with warns on kFlagsNeverSetRecords records: a starved writer's window may hold fewer.
    if (name == kSampledSession && options.judges("TCTX-14")) lengths.want_named_records = kFlagsNeverSetRecords;
    // TCTX-14 and 27 against the exported spans pass on no fewer records: an emulated writer's window may hold fewer.
    if (name == kSampledSession && (options.judges("TCTX-14") || options.judges("TCTX-27")))
      lengths.want_records_against_spans = kMinReadsAgainstSpans;
    return conform::Session::open(target, settings, std::make_unique<ThreadContextWatch>(name, lengths));
  }

  Status run_scenario(conform::Session& session, const conform::ScenarioOptions& options) const override {
    // Nothing to drive: the writer's threads publish on their own. The
    // session lasts until its readers are done (or the target ends), or
    // until the key map was republished.
    auto* part = session.part<ThreadContextWatch>();
    if (!part || !part->reading()) return Ok{};
    if (part->session_decides()) {
      auto* wait = part->update_wait();
      if (wait) wait->start();
      for (;;) {
        const bool update = wait && wait->keep_going();
        // Records to judge against the exported spans (TCTX-14, 27), or, while none came, for TCTX-14's warning.
        const bool samples = part->wants_records_against_spans(session.receiver()) ||
                             (session.receiver().counters().spans == 0 && part->wants_more_samples());
        if ((!update && !samples) || part->done() || !session.target().alive()) break;
        std::this_thread::sleep_for(10ms);
      }
      return Ok{};
    }
    const auto until = std::chrono::steady_clock::now() + std::max(kCeiling, scaled(kCeiling, options)) + kWindowMargin;
    while (!part->done() && std::chrono::steady_clock::now() < until && session.target().alive())
      std::this_thread::sleep_for(10ms);
    return Ok{};
  }

  // The report says how long the sampled session waited for the key map to be republished, and why it stopped.
  void session_closed(const conform::Session& session, const conform::ScenarioOptions&, conform::RunResult& run) const override {
    const auto* part = session.part<ThreadContextWatch>();
    if (!part) return;
    if (const auto* wait = part->update_wait(); wait && !wait->why_ended().empty())
      run.notes.push_back("session " + session.settings().name + " sampled for " + std::to_string(wait->watched().count()) +
                          " ms, waiting for the key map to be republished (TCTX-08, 10): " + wait->why_ended());
    if (auto why = part->sampling_ended_because(); !why.empty())
      run.notes.push_back("session " + session.settings().name + " sampled past its window: " + why);
    if (auto how_long = part->watching_summary(); !how_long.empty())
      run.notes.push_back("session " + session.settings().name + " watched the writer's threads for " + how_long);
  }

  // A process context carrying threadlocal.* keys (TCTXR-02; in its
  // resource too, where they are judged misplaced: TCTX-06, 07); under
  // another schema (TCTXR-03) announced, not read.
  conform::Published published(pid_t pid) const override {
    auto snapshot = process_context::take_contents_snapshot(pid);
    if (!snapshot) return {};
    auto data = reference_data_of(*snapshot);
    if (!data || !data->announces_thread_context()) return {};
    LibraryCache cache;
    if (auto other = other_schema(pid, *data, cache)) return {conform::Published::Kind::Unread, *other};
    return {conform::Published::Kind::Readable, ""};
  }

  std::string not_applicable(const conform::SessionSet& sessions) const override {
    for (const auto& name : session_names())
      if (const auto* f = facts(sessions, name); f && !f->other_schema.empty()) return f->other_schema;
    return {};
  }
};

}  // namespace

const conform::Suite& suite() {
  static const ThreadContextSuite s;
  return s;
}

}  // namespace tracecorr::otel_thread_context

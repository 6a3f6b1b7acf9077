// The Node.js thread context's conformance suite (conform::Suite): two
// sessions of the same command. "looked" looks at every thread, stopped,
// again and again (looks.hpp); it is also what an attached target runs.
// "watched" (launch mode) follows each thread's struct store by store under
// hardware watchpoints from the thread's start to its end (gate_watch.hpp).
// The writer is not driven: its threads publish, start and end as they run.
#include <algorithm>
#include <thread>

#include "gate_watch.hpp"
#include "looks.hpp"
#include "otel_nodejs_thread_context/registry.hpp"
#include "probes.hpp"
#include "tracecorr/process_context.hpp"
#include "tracecorr/watch/update_wait.hpp"

namespace tracecorr::otel_nodejs_thread_context {
namespace {

using namespace std::chrono_literals;

// At least this long: a writer whose spans last tens of milliseconds opens,
// attaches and detaches many times meanwhile. Past it, while no gate opened
// (workers starting seconds into a loaded run): kQuiet of the writer's own
// time, never past kCeiling.
constexpr auto kWindow = 1500ms;
constexpr auto kQuiet = 5000ms;
constexpr auto kCeiling = 20000ms;
constexpr auto kWindowMargin = 5s;
// The records against the spans (NJS-13, 14, 15) are judged on no fewer
// valid records naming an exported span, when the writer exports any.
constexpr std::size_t kRecordsAgainstSpans = 10;
// The watched session: long enough for a writer whose threads come and go
// every few hundred milliseconds to start and end several.
constexpr auto kWatchWindow = 3000ms;

std::chrono::milliseconds scaled(std::chrono::milliseconds d, const conform::ScenarioOptions& o) {
  return std::chrono::milliseconds(static_cast<long long>(static_cast<double>(d.count()) * o.time_scale));
}

class NodeSuite final : public conform::Suite {
 public:
  const ProtocolSpec& protocol() const override { return spec::kProtocol; }

  const std::vector<std::unique_ptr<conform::Probe>>& probes() const override {
    static const auto probes = make_probes();
    return probes;
  }

  std::vector<std::string> session_names() const override { return {kLookedSession, kWatchedSession}; }
  std::string attach_session() const override { return kLookedSession; }

  Expected<std::unique_ptr<conform::Session>> open_session(const conform::TargetSpec& target, const std::string& name,
                                                           const conform::ScenarioOptions& options) const override {
    conform::SessionSettings settings;
    settings.name = name;  // no library to discover by name: the part chooses the process
    const auto ceiling = std::max(kCeiling, scaled(kCeiling, options));
    if (name == kWatchedSession)
      return conform::Session::open(target, settings, std::make_unique<NodeGateWatch>(name, ceiling + kWindowMargin));
    NodeLooks::Lengths lengths;
    lengths.window = scaled(kWindow, options);
    lengths.quiet = scaled(kQuiet, options);
    lengths.ceiling = ceiling;
    if (options.judges("NJS-13") || options.judges("NJS-14") || options.judges("NJS-15"))
      lengths.records_against_spans = kRecordsAgainstSpans;
    return conform::Session::open(target, settings, std::make_unique<NodeLooks>(name, lengths));
  }

  Status run_scenario(conform::Session& session, const conform::ScenarioOptions& options) const override {
    if (auto* watched = session.part<NodeGateWatch>()) return watch_gates(session, *watched, options);
    auto* part = session.part<NodeLooks>();
    if (!part || !part->looking()) return Ok{};
    const auto until = std::chrono::steady_clock::now() + std::max(kCeiling, scaled(kCeiling, options)) + kWindowMargin;
    while (!part->done() && std::chrono::steady_clock::now() < until && session.target().alive())
      std::this_thread::sleep_for(10ms);
    return Ok{};
  }

  // At least the window; past it, until a gate was seen opening and one
  // closing (threads that start late, or end only every few seconds), for at
  // most kQuiet of the writer's own time and never past the ceiling.
  static Status watch_gates(conform::Session& session, const NodeGateWatch& watched, const conform::ScenarioOptions& o) {
    if (!watched.watching()) return Ok{};
    const auto began = std::chrono::steady_clock::now();
    const auto window = scaled(kWatchWindow, o), quiet = scaled(kQuiet, o);
    const auto ceiling = std::max(kCeiling, scaled(kCeiling, o));
    watch::TargetProgress progress(watched.judged_pid());
    for (;;) {
      std::this_thread::sleep_for(10ms);
      const auto elapsed = std::chrono::steady_clock::now() - began;
      if (!session.target().alive() || elapsed >= ceiling) break;
      if (elapsed < window) continue;
      if (watched.openings() > 0 && watched.closings() > 0) break;
      auto writer_time = progress.since_mark();
      if (!writer_time || writer_time->available() >= quiet) break;
    }
    return Ok{};
  }

  void session_closed(const conform::Session& session, const conform::ScenarioOptions&, conform::RunResult& run) const override {
    if (const auto* watched = session.part<NodeGateWatch>()) {
      auto evidence = std::dynamic_pointer_cast<const NodeFacts>(watched->evidence());
      if (evidence && evidence->gate_watch)
        run.notes.push_back("session " + session.settings().name + " watched every thread's struct: " +
                            evidence->gate_watch->describe());
      return;
    }
    const auto* part = session.part<NodeLooks>();
    if (!part) return;
    auto evidence = std::dynamic_pointer_cast<const NodeFacts>(part->evidence());
    if (!evidence || evidence->judged_pid == 0) return;
    run.notes.push_back("session " + session.settings().name + " looked at " + std::to_string(evidence->looks) +
                        " time(s) at every thread of pid " + std::to_string(evidence->judged_pid) + " (" +
                        std::to_string(evidence->threads.size() + evidence->threads_dropped) +
                        " thread looks); it stopped: " + evidence->ended_because);
  }

  // The schema declared in the process context (NJSR-01), or the struct's
  // module mapped: this suite reads it. Another schema is another suite's.
  conform::Published published(pid_t pid) const override {
    InspectOptions o;
    o.read_threads = false;
    auto look = inspect_process(pid, o);
    if (!look || !look->found()) return {};
    return {conform::Published::Kind::Readable, ""};
  }

  std::string published_nothing(const conform::SessionSet& sessions) const override {
    const auto* f = facts(sessions, kLookedSession);
    if (!f || !f->not_found) return {};
    return f->not_found->message();
  }

  bool reads_thread_pointers() const override { return true; }
};

}  // namespace

const conform::Suite& suite() {
  static const NodeSuite s;
  return s;
}

}  // namespace tracecorr::otel_nodejs_thread_context

// OTEP 4719's conformance suite (conform::Suite): two sessions of the same
// command. "watched" follows the launch with the mapping watch (every store
// into the header, the naming and madvise calls, the forks); "read" only
// reads (back to back while the writer publishes), so the writer runs at full
// speed against the seqlock (the torture), and it is what an attached target
// runs.
#include <algorithm>
#include <thread>

#include "context_watch.hpp"
#include "otel_process_context/registry.hpp"
#include "probes.hpp"

namespace tracecorr::otel_process_context {
namespace {

using namespace std::chrono_literals;

// How long each session watches a running target: long enough for a writer
// that updates every few hundred milliseconds to update several times.
constexpr auto kWatchedWindow = 2500ms;
constexpr auto kReadWindow = 1500ms;
// When the rules of updating are judged, the watched session goes on past its
// window until the writer updates (watch::UpdateWait): an SDK republishes
// as each worker's tracer starts, seconds into a loaded run. After the first
// update, long enough for its naming call (Publication::kNamingGrace); without
// one, this much of the writer's own time after its last publication; never
// past the ceiling.
constexpr auto kUpdateSettle = 600ms;
constexpr auto kUpdateQuiet = 5000ms;
constexpr auto kUpdateCeiling = 20000ms;
// The rules judged on updates.
constexpr const char* kUpdateRules[] = {"PCTX-08", "PCTX-09", "PCTX-14"};

std::chrono::milliseconds scaled(std::chrono::milliseconds d, const conform::ScenarioOptions& o) {
  return std::chrono::milliseconds(static_cast<long long>(static_cast<double>(d.count()) * o.time_scale));
}

bool judges_updates(const conform::ScenarioOptions& options) {
  for (const char* id : kUpdateRules)
    if (options.judges(id)) return true;
  return false;
}

class ProcessContextSuite final : public conform::Suite {
 public:
  const ProtocolSpec& protocol() const override { return spec::kProtocol; }

  const std::vector<std::unique_ptr<conform::Probe>>& probes() const override {
    static const auto probes = make_probes();
    return probes;
  }

  std::vector<std::string> session_names() const override { return {kWatchedSession, kReadSession}; }
  std::string attach_session() const override { return kReadSession; }

  Expected<std::unique_ptr<conform::Session>> open_session(const conform::TargetSpec& target, const std::string& name,
                                                           const conform::ScenarioOptions& options) const override {
    conform::SessionSettings settings;
    settings.name = name;  // no library to discover: the context watch chooses the process
    std::optional<watch::UpdateWaitBounds> wait;
    if (name == kWatchedSession && judges_updates(options))
      wait = watch::UpdateWaitBounds{scaled(kWatchedWindow, options), scaled(kUpdateSettle, options),
                                       scaled(kUpdateQuiet, options), std::max(kUpdateCeiling, scaled(kUpdateCeiling, options))};
    return conform::Session::open(target, settings, std::make_unique<ContextWatch>(name, name == kWatchedSession, wait));
  }

  Status run_scenario(conform::Session& session, const conform::ScenarioOptions& options) const override {
    // Nothing to drive: a writer publishes and updates on its own. The
    // session watches it for a while (to its end, if it ends first).
    const auto& watch = context_watch(session);
    if (!watch.found()) return Ok{};
    if (auto* wait = watch.update_wait()) {
      wait->start();
      while (wait->keep_going() && session.target().alive()) std::this_thread::sleep_for(10ms);
      return Ok{};
    }
    const auto window = scaled(session.settings().name == kWatchedSession ? kWatchedWindow : kReadWindow, options);
    const auto until = std::chrono::steady_clock::now() + window;
    while (std::chrono::steady_clock::now() < until && session.target().alive()) std::this_thread::sleep_for(10ms);
    return Ok{};
  }

  // The report says how long the watched session waited for an update, and why it stopped.
  void session_closed(const conform::Session& session, const conform::ScenarioOptions&, conform::RunResult& run) const override {
    const auto* watch = session.part<ContextWatch>();
    const auto* wait = watch ? watch->update_wait() : nullptr;
    if (!wait || wait->why_ended().empty()) return;
    run.notes.push_back("session " + session.settings().name + " watched the process context for " +
                        std::to_string(wait->watched().count()) + " ms: " + wait->why_ended());
  }

  conform::Published published(pid_t pid) const override {
    auto mappings = process_context::discover(pid);
    return {mappings && !mappings->empty() ? conform::Published::Kind::Readable : conform::Published::Kind::No, ""};
  }
};

}  // namespace

const conform::Suite& suite() {
  static const ProcessContextSuite s;
  return s;
}

}  // namespace tracecorr::otel_process_context

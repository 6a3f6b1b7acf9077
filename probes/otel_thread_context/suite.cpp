// OTEP 4947's conformance suite (conform::Suite): two sessions of the same
// command. "sampled" stops the threads now and then with the ptrace sampler
// and reads their records with the process context's timestamp, as a
// profiler does; it is what an attached target runs. "watched" follows each
// thread's stores to its pointer and record with hardware watchpoints.
#include <thread>

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
    const auto window = scaled(name == kSampledSession ? kSampledWindow : kWatchedWindow, options);
    return conform::Session::open(target, settings, std::make_unique<ThreadContextWatch>(name, window));
  }

  Status run_scenario(conform::Session& session, const conform::ScenarioOptions& options) const override {
    // Nothing to drive: the writer's threads publish on their own. The
    // session lasts until its readers are done (or the target ends).
    const auto* part = session.part<ThreadContextWatch>();
    if (!part || !part->reading()) return Ok{};
    const auto until = std::chrono::steady_clock::now() + scaled(kSampledWindow, options) + kWindowMargin;
    while (!part->done() && std::chrono::steady_clock::now() < until && session.target().alive())
      std::this_thread::sleep_for(10ms);
    return Ok{};
  }

  bool judged_by_sending(std::string_view) const override { return false; }

  // A process context carrying threadlocal.* keys (TCTXR-02); under another
  // schema (TCTXR-03) announced, not read.
  conform::Published published(pid_t pid) const override {
    auto snapshot = process_context::take_snapshot(pid);
    if (!snapshot) return {};
    auto data = reference_data_of(*snapshot);
    if (!data || !(data->schema_version_value || data->key_map_value)) return {};
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

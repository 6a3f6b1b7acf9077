// See gate_watch.hpp.
#include "gate_watch.hpp"

#include "looks.hpp"
#include "probes.hpp"
#include "otel_nodejs_thread_context/record.hpp"
#include "otel_nodejs_thread_context/registry.hpp"

namespace tracecorr::otel_nodejs_thread_context {

NodeGateWatch::NodeGateWatch(std::string session, std::chrono::milliseconds ceiling) : ceiling_(ceiling) {
  facts_.session = std::move(session);
}

NodeGateWatch::~NodeGateWatch() { stop_watching(); }

void NodeGateWatch::prepare_launch(conform::LaunchSpec& launch) {
  launch.before_exec = [this](pid_t pid) {
    watch::SlotWatch::Settings settings;
    settings.watched_bytes = spec::kDiscoverySize;
    settings.every_store = true;
    // The session, not the watch's own rules, says when it ends.
    settings.until_located = settings.after_located = settings.quiet = settings.ceiling = ceiling_;
    settings.on_publication = [this](const watch::SlotPublication& p) { count(p); };
    auto cache = std::make_shared<LibraryCache>();
    auto w = watch::SlotWatch::follow_launch(
        pid, thread_context_record_layout(),
        [cache](pid_t p, std::uint64_t tp) {
          return conform::locate_tls_slot(*cache, discovery_options(), thread_context_record_layout(), p, tp);
        },
        settings);
    std::lock_guard lock(mutex_);
    if (w) watch_ = std::move(*w);
    else facts_.gate_watch_unavailable = w.error().message();  // e.g. a host without hardware watchpoints
  };
}

void NodeGateWatch::opened(conform::Session& session, conform::DiscoveryWait& wait) {
  {
    std::lock_guard lock(mutex_);
    facts_.launched = session.target().launched();
    if (!facts_.launched) facts_.gate_watch_unavailable = "attach mode: the threads had started before tracecorr attached";
  }
  (void)find_judged_process(session, wait, cache_, mutex_, facts_);
}

void NodeGateWatch::count(const watch::SlotPublication& p) {
  auto d = decode_discovery_struct(p.slot_bytes);
  if (!d) return;
  auto [it, first] = last_state_.try_emplace(p.tid, *d);
  if (first) return;
  const auto step = gate_step(it->second, *d);
  if (step == GateStep::kOpening) ++openings_;
  if (step == GateStep::kClosing) ++closings_;
  it->second = *d;
}

pid_t NodeGateWatch::judged_pid() const {
  std::lock_guard lock(mutex_);
  return facts_.judged_pid;
}

bool NodeGateWatch::watching() const {
  std::lock_guard lock(mutex_);
  return watch_ != nullptr && facts_.judged_pid != 0;
}

void NodeGateWatch::stop_watching() {
  std::unique_ptr<watch::SlotWatch> w;
  {
    std::lock_guard lock(mutex_);
    w = std::move(watch_);
  }
  if (!w) return;
  auto report = w->finish(std::chrono::steady_clock::now());
  std::lock_guard lock(mutex_);
  facts_.gate_watch = std::move(report);
}

std::shared_ptr<const conform::ProtocolEvidence> NodeGateWatch::evidence() const {
  std::lock_guard lock(mutex_);
  return std::make_shared<NodeFacts>(facts_);
}

}  // namespace tracecorr::otel_nodejs_thread_context

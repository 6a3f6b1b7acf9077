// See looks.hpp.
#include "looks.hpp"

#include <algorithm>
#include <ctime>
#include <mutex>
#include <sstream>

#include "otel_nodejs_thread_context/registry.hpp"
#include "tracecorr/clock_offset.hpp"
#include "tracecorr/procfs.hpp"

namespace tracecorr::otel_nodejs_thread_context {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

constexpr auto kFindInterval = 20ms;

std::uint64_t monotonic_ns() { return static_cast<std::uint64_t>(read_clock_ns(CLOCK_MONOTONIC)); }

std::string ms(std::chrono::milliseconds d) { return std::to_string(d.count()) + " ms"; }

ThreadLookFacts facts_of(const ThreadInspection& t, std::uint64_t time_ns) {
  ThreadLookFacts f;
  f.tid = t.tid;
  f.time_ns = time_ns;
  f.stopped_by_ns = t.stopped_at_ns ? t.stopped_at_ns : monotonic_ns();
  f.run_queue_wait_ns = t.run_queue_wait_ns;
  if (t.walk) {
    f.gate_open = t.walk->discovery.gate_open();
    f.end = t.walk->end;
    f.failed_step = t.walk->failed_step;
  }
  f.record = t.record;
  f.violations = t.findings;
  f.error = t.error;
  return f;
}

// Why `pid` is the process to judge, from a look that found something.
std::string found_because(const conform::TreeProcess& p, const Inspection& look) {
  const std::string who = "pid " + std::to_string(p.pid) + " (" + p.comm + ") ";
  if (look.module) return who + "maps " + look.module->path + ", which defines " + std::string(spec::kTlsSymbol);
  if (look.reference && look.reference->known_schema())
    return who + "declares threadlocal.schema_version " + look.reference->schema_version.value_or("");
  return who + "publishes a process context and runs with --no-async-context-frame";
}

// Node's flag, as an argument or a word of NODE_OPTIONS: where it was seen.
std::optional<std::string> async_context_frame_off(pid_t pid) {
  const std::string flag = "--no-async-context-frame";
  for (const auto& arg : process_strings(pid, "cmdline"))
    if (arg == flag) return "its command line";
  const std::string node_options = "NODE_OPTIONS=";
  for (const auto& variable : process_strings(pid, "environ")) {
    if (variable.rfind(node_options, 0) != 0) continue;
    std::istringstream words(variable.substr(node_options.size()));
    for (std::string word; words >> word;)
      if (word == flag) return "NODE_OPTIONS";
  }
  return std::nullopt;
}

}  // namespace

bool find_judged_process(conform::Session& session, conform::DiscoveryWait& wait, LibraryCache& cache,
                         std::mutex& mutex, NodeFacts& facts) {
  std::size_t looked_at = 0;
  for (;;) {
    auto tree = session.target().processes();
    looked_at = std::max(looked_at, tree.size());
    for (const auto& p : tree) {
      InspectOptions o;
      o.read_threads = false;
      o.cache = &cache;
      auto look = inspect_process(p.pid, o);
      if (!look) continue;
      // Told to run without AsyncContextFrame and publishing a process context: judged for NJS-10 alone.
      auto acf_off = async_context_frame_off(p.pid);
      if (!look->found() && !(acf_off && look->reference)) continue;
      auto why = found_because(p, *look);
      if (!session.target().judge(p, why)) continue;  // a run before the writer that stays
      std::lock_guard lock(mutex);
      facts.judged_pid = p.pid;
      facts.judged_because = std::move(why);
      facts.async_context_frame_off = std::move(acf_off);
      return true;
    }
    if (wait.over() || tree.empty()) break;
    std::this_thread::sleep_for(kFindInterval);
  }
  std::lock_guard lock(mutex);
  facts.not_found = make_error("no process of the target declared nodejs_v1_dev or nodejs_v1 in its process context or "
                               "mapped a module defining " + std::string(spec::kTlsSymbol) + " (" +
                                   std::to_string(looked_at) + " processes looked at): discovery waited until " +
                                   wait.figures(),
                               "pid " + std::to_string(session.pid()));
  return false;
}

NodeLooks::NodeLooks(std::string session, Lengths lengths) : lengths_(lengths) { facts_.session = std::move(session); }

NodeLooks::~NodeLooks() { stop_watching(); }

void NodeLooks::opened(conform::Session& session, conform::DiscoveryWait& wait) {
  facts_.launched = session.target().launched();
  if (!find_judged_process(session, wait, cache_, mutex_, facts_)) {
    done_ = true;
    return;
  }
  receiver_ = &session.receiver();
  looking_ = true;
  looker_ = std::thread([this] { look_until_done(); });
}

void NodeLooks::look_until_done() {
  const pid_t pid = facts_.judged_pid;
  watch::TargetProgress progress(pid);
  const auto began = Clock::now();
  const auto at_start = wall_minus_monotonic();
  std::string why;
  for (std::size_t n = 1;; ++n) {
    const auto time_ns = monotonic_ns();
    InspectOptions o;
    o.cache = &cache_;
    if (auto look = inspect_process(pid, o)) add_look(*look, time_ns);
    if (stop_) why = "the session ended";
    else if (!read_process_stat(pid)) why = "the process exited";
    else if (n >= kMaxLooks) why = std::to_string(kMaxLooks) + " looks taken";
    else why = why_stop(Clock::now() - began, progress);
    if (!why.empty()) break;
    std::this_thread::sleep_for(lengths_.interval);
  }
  const auto at_end = wall_minus_monotonic();
  std::lock_guard lock(mutex_);
  facts_.read_clock = conform::ReadClock{at_start.wall_minus_monotonic_ns, at_end.wall_minus_monotonic_ns,
                                         at_start.uncertainty_ns + at_end.uncertainty_ns};
  facts_.ended_because = why;
  done_ = true;
}

std::pair<std::size_t, std::size_t> NodeLooks::records_read() {
  if (receiver_)  // the spans received since the last look, read under the receiver's lock without copying them
    (void)receiver_->wait_for(
        [&](const std::vector<otlp::ReceivedSpan>& spans) {
          for (; received_scanned_ < spans.size() && received_.size() < kMaxSpansFollowed; ++received_scanned_)
            received_.insert(spans[received_scanned_].span_id);
          return true;
        },
        std::chrono::milliseconds(0));
  std::size_t valid = 0, against = 0;
  std::lock_guard lock(mutex_);
  for (const auto& t : facts_.threads)
    if (t.record && t.record->readable()) {
      ++valid;
      if (received_.count(t.record->span_id)) ++against;
    }
  return {valid, against};
}

bool NodeLooks::publishes_nothing() const {
  std::lock_guard lock(mutex_);
  return !facts_.module && !(facts_.reference && facts_.reference->schema_version_value);
}

std::string NodeLooks::why_stop(Clock::duration elapsed, const watch::TargetProgress& progress) {
  if (elapsed < lengths_.window) return {};
  const auto [valid, against] = records_read();
  const std::string counted = std::to_string(valid) + " valid record(s) read, " + std::to_string(against) +
                              " naming a span the writer exported (" + std::to_string(received_.size()) + " received)";
  // A writer handed an endpoint may take seconds of a loaded start to export its first span: waited
  // for as for a record, up to `quiet` of its own time.
  const bool enough = valid > 0 && (lengths_.records_against_spans == 0 || against >= lengths_.records_against_spans);
  if (enough) return "its window of " + ms(lengths_.window) + " passed: " + counted;
  if (publishes_nothing()) return "its window of " + ms(lengths_.window) + " passed: no module and no schema to read";
  auto reading = progress.since_mark();
  if (!reading) return "the process is gone: " + counted;
  if (reading->available() >= lengths_.quiet) return counted + " in " + reading->describe();
  if (elapsed >= lengths_.ceiling) return "the ceiling of " + ms(lengths_.ceiling) + ": " + counted + " (" + reading->describe() + ")";
  return {};
}

void NodeLooks::add_look(const Inspection& look, std::uint64_t time_ns) {
  std::lock_guard lock(mutex_);
  ++facts_.looks;
  if (look.module && !facts_.module) facts_.module = look.module;
  if (!look.module_error.empty()) facts_.module_error = look.module_error;
  if (look.reference) facts_.reference = look.reference;
  else if (!look.context_error.empty()) facts_.context_error = look.context_error;
  std::string error = !look.threads_error.empty() ? look.threads_error : look.access_error;
  if (!error.empty() && look.threads.empty() && facts_.look_errors.size() < NodeFacts::kMaxLookErrors)
    facts_.look_errors.push_back(std::move(error));
  for (const auto& t : look.threads) {
    if (facts_.threads.size() >= NodeFacts::kMaxThreadLooks) {
      ++facts_.threads_dropped;
      continue;
    }
    facts_.threads.push_back(facts_of(t, time_ns));
  }
}

void NodeLooks::stop_watching() {
  stop_ = true;
  if (looker_.joinable()) looker_.join();
}

std::shared_ptr<const conform::ProtocolEvidence> NodeLooks::evidence() const {
  std::lock_guard lock(mutex_);
  return std::make_shared<NodeFacts>(facts_);
}

}  // namespace tracecorr::otel_nodejs_thread_context

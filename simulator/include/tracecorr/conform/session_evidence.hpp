// What one session observed, as plain data: the judges' only input.
//
// A Session fills it when it closes (Session::evidence()); the judges read
// nothing else, so a test can build one by hand and judge it without
// launching anything (tests/unit/<package>/judges_test.cpp). Fields are copies, never
// views into a live session.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tracecorr/watch/record_watcher.hpp"
#include "tracecorr/conform/session_part.hpp"
#include "tracecorr/watch/slot_watch.hpp"
#include "tracecorr/conform/target.hpp"
#include "tracecorr/watch/update_order.hpp"
#include "tracecorr/discovery.hpp"
#include "tracecorr/otlp.hpp"
#include "tracecorr/tls.hpp"

namespace tracecorr::conform {

using Clock = std::chrono::steady_clock;
using Millis = std::chrono::milliseconds;

// How long the target's threads waited in the run queue for a CPU during
// the session (/proc/PID/task/TID/schedstat, second field), from the end of
// opening to the stop request: the environment's share of any lateness the
// timing judges see, named in their error figures.
struct RunQueueWait {
  std::size_t threads = 0;
  double total_ms = 0;       // summed over the threads
  double max_thread_ms = 0;  // the thread that waited longest
  double wall_ms = 0;        // the interval measured
  std::string describe() const;  // "3 threads waited 12 ms in total (at most 9 ms) over 5200 ms"
  // The average thread spent at least half the session runnable but not
  // running: the machine, not the agent, decides when anything happens. (The
  // reference alone on two cores averages a few percent.)
  bool starved() const { return threads > 0 && wall_ms > 0 && total_ms >= 0.5 * wall_ms * static_cast<double>(threads); }
};

// Stacks of the target sampled during a scenario (the HTML report's flame
// graphs), symbolised while the target was alive.
struct StackSample {
  pid_t tid = 0;
  std::uint64_t time_ns = 0;  // CLOCK_MONOTONIC (steady_clock)
  // The context (trace id, context id) the thread's record named when it was
  // sampled (the protocol's ActiveTraceOf); nullopt: none.
  std::optional<std::pair<TraceId, SpanId>> context;
  std::vector<std::string> frames;  // innermost first
};
struct StackSamples {
  std::string source;  // "tracecorr's ptrace sampler, 99 Hz, ..."
  std::vector<StackSample> samples;
};

// The record watcher's findings.
struct RecordEvidence {
  std::vector<watch::RecordObservation> observations;
  std::vector<watch::SeenContext> contexts;
  std::map<pid_t, std::uint64_t> record_pointers;  // the last seen per thread
  watch::WatcherStats stats;
  std::set<pid_t> seen_before_publication;  // watch::RecordWatcher::seen_before_publication()
  std::map<pid_t, std::vector<RunQueueMark>> run_queue_marks;  // watch::RecordWatcher::run_queue_marks()
};

struct SessionEvidence {
  std::string name;                          // "enabled", "disabled", ...
  bool launched = true;                      // false: attach mode
  std::chrono::steady_clock::time_point opened_at{};

  // Discovery.
  std::optional<AgentLibrary> library;
  std::optional<Error> discovery_error;

  // TLS: the descriptor, how the records are reached, the slot watch, the
  // records and the update-order watches.
  std::optional<TlsDescriptor> tls_descriptor;
  std::optional<TlsVariableAccess> tls_access;  // nullopt: no access model could be read (tls_error says why)
  std::optional<Error> tls_error;
  std::optional<watch::SlotWatchReport> slot_watch;
  std::string slot_watch_unavailable;        // why there is no slot watch
  std::optional<RecordEvidence> records;     // nullopt: records could not be read
  std::vector<Expected<watch::UpdateOrderReport>> update_order_reports;

  // Time.
  std::optional<std::chrono::system_clock::time_point> timing_boundary;   // timing not judged past it
  std::optional<std::chrono::system_clock::time_point> stop_requested_at; // later spans: the shutdown's
  std::optional<RunQueueWait> run_queue_wait;

  // The target and its export.
  std::string target_output;
  std::vector<OutputLine> target_output_lines;
  std::optional<std::string> target_exit;
  std::vector<otlp::ReceivedSpan> spans;
  // Exports the receiver can show did not arrive whole (otlp::ExportLosses):
  // a span missing from `spans` that ended before the last of them may have
  // been exported all the same.
  otlp::ExportLosses export_losses;
  std::optional<StackSamples> stack_samples;

  // What the protocol's SessionPart observed (nullptr: it had none).
  std::shared_ptr<const ProtocolEvidence> protocol;
  // That evidence as the protocol's own type, or nullptr.
  template <class Facts>
  const Facts* protocol_as() const { return dynamic_cast<const Facts*>(protocol.get()); }
};

}  // namespace tracecorr::conform

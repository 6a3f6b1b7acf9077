// What one session observed, as plain data: the judges' only input.
//
// A Session fills it when it closes (Session::evidence()); the judges read
// nothing else, so a test can build one by hand and judge it without
// launching anything (tests/unit/*_judge_test.cpp). Fields are copies, never
// views into a live session.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "tracecorr/conform/record_watcher.hpp"
#include "tracecorr/conform/slot_watch.hpp"
#include "tracecorr/conform/target.hpp"
#include "tracecorr/conform/update_order.hpp"
#include "tracecorr/discovery.hpp"
#include "tracecorr/otlp.hpp"
#include "tracecorr/socket.hpp"
#include "tracecorr/tls.hpp"
#include "elastic_v1/wire.hpp"

namespace tracecorr::conform {

using Clock = std::chrono::steady_clock;
using Millis = std::chrono::milliseconds;

// The process storage pointer, each time it (or what it points to) changed.
struct StorageSighting {
  Clock::time_point at;
  std::uint64_t pointer = 0;
  std::vector<std::uint8_t> raw;                 // the encoded bytes read (bounded), for evidence
  std::optional<elastic_v1::ProcessStorage> decoded;
  std::optional<Error> error;                    // decoding failed
  // The socket the storage names, examined at the moment of the sighting (PROC-04).
  std::optional<SocketFacts> socket;
  std::optional<Error> socket_error;
};

// A datagram sent to the agent, with what the scenario expects of it.
struct SentMessage {
  Clock::time_point at;
  std::chrono::system_clock::time_point at_system;
  std::string requirement;     // why it was sent ("MSG-04", "ATTR-04", ...)
  std::string label;           // "correlation truncated to 45 of 46 bytes"
  std::vector<std::uint8_t> bytes;
  SendOutcome outcome = SendOutcome::Refused;
  int send_errno = 0;
  unsigned would_block_retries = 0;
  // For correlations: the transaction and stack id carried (when decodable),
  // and how many times the id must appear in that transaction's attribute.
  // nullopt: the scenario accepts either (e.g. an oversized datagram).
  std::optional<std::pair<TraceId, SpanId>> transaction;
  std::optional<StackTraceId> stack_trace_id;
  std::optional<unsigned> expected_count;
  std::uint64_t sequence = 0;  // TakeUpClock's number for it; 0: not sent
  // Filled by Session::sent_messages(): when the agent had read it at the latest.
  std::optional<std::chrono::system_clock::time_point> taken_up_by;
};

// A registration sent, and what it should change (DEFER-02, HOST-01, MSG-02/03).
struct SentRegistration {
  Clock::time_point at;
  std::chrono::system_clock::time_point at_system;
  elastic_v1::Registration message;
  bool judged = true;   // false for boundary values whose effect is not specified
  std::uint64_t sequence = 0;  // TakeUpClock's number for it; 0: not sent
  bool sent() const { return sequence != 0; }
  // When the agent had read it at the latest (TakeUpClock): its socket's
  // queue held none of tracecorr's bytes any more. nullopt: never seen read
  // while the session ran (a stuck reader), or not sent.
  std::optional<std::chrono::system_clock::time_point> taken_up_at;
  // From when the registration has surely taken effect: taken up, or never
  // (a far future that stays safe to add margins to) when it was not seen read.
  std::chrono::system_clock::time_point effective_from() const { return taken_up_at.value_or(kNeverRead); }
  static constexpr std::chrono::system_clock::time_point kNeverRead =
      std::chrono::system_clock::time_point::max() - std::chrono::hours(24 * 365);
};

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
  // The transaction current in the thread's record when it was sampled
  // (valid and trace present); nullopt otherwise.
  std::optional<std::pair<TraceId, SpanId>> transaction;
  std::vector<std::string> frames;  // innermost first
};
struct StackSamples {
  std::string source;  // "tracecorr's ptrace sampler, 99 Hz, ..."
  std::vector<StackSample> samples;
};

// The record watcher's findings.
struct RecordEvidence {
  std::vector<RecordObservation> observations;
  std::vector<SeenTransaction> transactions;
  std::map<pid_t, std::uint64_t> record_pointers;  // the last seen per thread
  WatcherStats stats;
};

struct SessionEvidence {
  std::string name;                          // "enabled", "disabled", ...
  bool launched = true;                      // false: attach mode
  std::chrono::steady_clock::time_point opened_at{};
  std::string socket_dir;                    // launch mode: the directory the agent was told to use

  // Discovery and the process storage.
  std::optional<AgentLibrary> library;
  std::optional<Error> discovery_error;
  std::vector<StorageSighting> storage_sightings;

  // TLS: the descriptor, the slot watch (TLS-01), the records and the
  // update-order watches (TLS-04).
  std::optional<TlsDescriptor> tls_descriptor;
  std::optional<Error> tls_error;
  std::optional<SlotWatchReport> slot_watch;
  std::string slot_watch_unavailable;        // why there is no slot watch
  std::optional<RecordEvidence> records;     // nullopt: records could not be read
  std::vector<Expected<UpdateOrderReport>> update_order_reports;

  // The socket and what tracecorr sent through it.
  std::optional<SocketFacts> socket_facts;
  std::optional<Error> socket_error;
  bool could_send = false;
  std::vector<SentMessage> sent_messages;
  std::vector<SentRegistration> registrations;
  std::uint64_t messages_lost = 0;

  // Time.
  std::optional<std::chrono::system_clock::time_point> timing_boundary;   // deferral not judged past it
  std::optional<std::chrono::system_clock::time_point> stop_requested_at; // later spans: the shutdown's
  std::optional<RunQueueWait> run_queue_wait;

  // The target and its export.
  std::string target_output;
  std::vector<OutputLine> target_output_lines;
  std::optional<std::string> target_exit;
  std::vector<otlp::ReceivedSpan> spans;
  std::optional<StackSamples> stack_samples;

  // Derived.
  // The last process storage that decoded.
  std::optional<elastic_v1::ProcessStorage> storage() const;
  // The deferral delay that governs a transaction ended at `t`: the delay of
  // the last registration the agent had read before it (1 s before any).
  // nullopt when a registration (or the timing boundary) falls between
  // t - margin and t + delay + margin: then the agent may have released the
  // transaction by another delay, or not processed the registration yet.
  std::optional<std::uint32_t> delay_in_force(std::chrono::system_clock::time_point t, std::chrono::milliseconds margin) const;
};

}  // namespace tracecorr::conform

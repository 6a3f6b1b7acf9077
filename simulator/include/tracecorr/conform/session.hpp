// One run of the agent under test, and everything observed during it.
//
// A session launches (or attaches to) the target, finds its library, watches
// its process storage from the first moment it can, reads its TLS descriptor,
// watches every thread's record, connects to its socket and receives its
// spans. Scenarios (probes/scenarios.cpp) drive it; judges read its evidence.
// Nothing here decides a verdict.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "tracecorr/conform/slot_watch.hpp"
#include "tracecorr/conform/take_up_clock.hpp"
#include "tracecorr/conform/record_watcher.hpp"
#include "tracecorr/conform/target.hpp"
#include "tracecorr/conform/update_order.hpp"
#include "tracecorr/discovery.hpp"
#include "tracecorr/otlp.hpp"
#include "tracecorr/socket.hpp"
#include "tracecorr/tls.hpp"
#include "tracecorr/wire.hpp"

namespace tracecorr::conform {

using Clock = std::chrono::steady_clock;
using Millis = std::chrono::milliseconds;

// How the target is started for one session (launch mode), or what an
// attached target is assumed to be running with.
struct SessionSettings {
  std::string name;                         // "enabled", "disabled", "auto", "small-queue", "own-host-id"
  std::map<std::string, std::string> env;   // on top of the standard environment
  std::vector<std::string> unset_env;       // e.g. the ENABLED option, to see the default
  // How long opening waits for the process storage. Short where the settings
  // say the agent publishes none (correlation disabled).
  std::chrono::milliseconds storage_wait{5000};
  // Launch mode: follow every thread from before the exec and watch each
  // one's TLS slot with a hardware watchpoint until it publishes (TLS-01).
  bool watch_tls_slots = false;
};

// What the runner was asked to test.
struct TargetSpec {
  std::vector<std::string> command;         // launch mode
  std::optional<pid_t> pid;                 // attach mode
  std::string gdbstub;                      // "HOST:PORT": thread pointers from qemu-user's gdbstub
  std::uint16_t otlp_port = 0;              // 0: ephemeral (launch mode); attach mode needs a fixed one
  std::chrono::milliseconds discovery_timeout{10000};
};

// The process storage pointer, each time it (or what it points to) changed.
struct StorageSighting {
  Clock::time_point at;
  std::uint64_t pointer = 0;
  std::vector<std::uint8_t> raw;                 // the encoded bytes read (bounded), for evidence
  std::optional<wire::ProcessStorage> decoded;
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

// How many datagrams the agent's socket absorbs (informational, for agent
// teams): a burst until the first EAGAIN, then a rate while tracecorr sends
// each time the socket accepts (POLLOUT). The datagrams are correlations for
// transactions the agent never had (MSG-07: ignored).
struct SocketCapacity {
  std::uint64_t burst = 0;          // accepted before the first EAGAIN (the kernel queue's depth)
  std::uint64_t sent = 0;           // accepted during the window
  double window_s = 0;
  bool capped = false;              // stopped at the send cap: the agent absorbs at least this rate
  double per_second() const { return window_s > 0 ? static_cast<double>(sent) / window_s : 0; }
};

// A registration sent, and what it should change (DEFER-02, HOST-01, MSG-02/03).
struct SentRegistration {
  Clock::time_point at;
  std::chrono::system_clock::time_point at_system;
  wire::Registration message;
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
// How long register_profiler() waits to see a judged registration taken up
// (and, before sending it, for the agent to read what is queued ahead of it).
inline constexpr std::chrono::milliseconds kTakeUpPatience{1000};

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
// Run-queue wait so far of every thread of `pid` (tid -> ns); empty when unreadable.
std::map<pid_t, std::uint64_t> read_run_queue_wait(pid_t pid);

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

class Session {
 public:
  static Expected<std::unique_ptr<Session>> open(const TargetSpec& target, const SessionSettings& settings);
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  const SessionSettings& settings() const { return settings_; }
  Target& target() { return *target_; }
  pid_t pid() const { return target_->pid(); }
  bool launched() const { return target_->launched(); }
  // Which process of the launched tree is judged, and why ("" until discovery chose one).
  const std::string& judged_process() const { return target_->judged_reason(); }
  Clock::time_point opened_at() const { return opened_at_; }
  otlp::OtlpReceiver& receiver() { return *receiver_; }
  const otlp::OtlpReceiver& receiver() const { return *receiver_; }
  std::string socket_dir() const { return socket_dir_; }

  // Discovery. nullopt: no library (yet); see discovery_error().
  const std::optional<AgentLibrary>& library() const { return library_; }
  const std::optional<Error>& discovery_error() const { return discovery_error_; }

  // Process storage, watched from the moment the library was mapped.
  std::vector<StorageSighting> storage_sightings() const;
  std::optional<wire::ProcessStorage> storage() const;  // last decoded
  // Waits until the storage is published and decodes (or the timeout passes).
  bool wait_for_storage(Millis timeout);

  // The TLS slot watch (TLS-01), finished before the record watcher starts.
  // nullopt: it did not run; slot_watch_unavailable() says why.
  const std::optional<SlotWatchReport>& slot_watch() const { return slot_watch_report_; }
  const std::string& slot_watch_unavailable() const { return slot_watch_unavailable_; }

  // TLS descriptor (read once relocated) and the record watcher.
  const std::optional<TlsDescriptor>& tls_descriptor() const { return tls_descriptor_; }
  const std::optional<Error>& tls_error() const { return tls_error_; }
  RecordWatcher* records() { return watcher_.get(); }
  const RecordWatcher* records() const { return watcher_.get(); }
  bool wait_for_records(Millis timeout);  // at least one valid record with a trace

  // The agent's socket: facts (examined when the session connected, while the
  // target was alive) and sending. Sends are non-blocking; on EAGAIN the
  // session retries for a bounded time and counts what it could not send.
  const std::optional<SocketFacts>& socket_facts() const { return socket_facts_; }
  const std::optional<Error>& socket_error() const { return socket_error_; }
  bool can_send() const { return socket_.has_value(); }
  const SentMessage& send(std::vector<std::uint8_t> datagram, std::string requirement, std::string label);
  // Records the transaction and stack id `m` carries with the count the
  // attribute must show. `bytes`: what to send instead of m's encoding (a
  // truncated or retyped message that still carries m's ids).
  const SentMessage& send_correlation(const wire::Correlation& m, std::string requirement, std::string label,
                                      std::optional<unsigned> expected_count,
                                      std::optional<std::vector<std::uint8_t>> bytes = std::nullopt);
  // Waits until the agent has read every datagram tracecorr queued on its
  // socket (SIOCOUTQ on the sending socket reaches 0); when, or nullopt if
  // the patience ran out first (or there is no socket).
  std::optional<std::chrono::system_clock::time_point> wait_until_read(Millis patience);
  void register_profiler(wire::Registration m, std::string requirement, bool judged = true);
  std::vector<SentMessage> sent_messages() const;
  std::vector<SentRegistration> registrations() const;
  std::uint64_t messages_lost() const { return messages_lost_; }
  // A profiler restart: drop the connection and connect anew.
  void reconnect_socket();
  // Measures SocketCapacity over `window` (at most `max_sends` datagrams) and keeps it.
  Expected<SocketCapacity> measure_socket_capacity(Millis window, std::uint64_t max_sends);
  std::optional<SocketCapacity> socket_capacity() const;

  // TLS-04 evidence, from the scenario's watchpoint runs.
  void add_update_order_report(Expected<UpdateOrderReport> report);
  std::vector<Expected<UpdateOrderReport>> update_order_reports() const;

  // The deferral delay that governs a transaction ended at `t`: the delay of
  // the last registration before it (1 s before any). nullopt when a
  // registration (or the timing boundary) falls between t - margin and
  // t + delay + margin: then the agent may have released the transaction by
  // another delay, or not processed the registration yet.
  std::optional<std::uint32_t> delay_in_force(std::chrono::system_clock::time_point t, Millis margin) const;
  // From now on, export timing is disturbed on purpose (a huge attribute):
  // deferral is not judged past this point.
  void mark_timing_boundary();
  std::optional<std::chrono::system_clock::time_point> timing_boundary() const;
  // When close() asked a live launched target to stop: spans received later
  // were released by its shutdown, not by its deferral rules.
  std::optional<std::chrono::system_clock::time_point> stop_requested_at() const;
  // Measured at close(); nullopt before, or when schedstat is unreadable.
  std::optional<RunQueueWait> run_queue_wait() const;

  // Stack samples (one set per session; a later call replaces it).
  void set_stack_samples(StackSamples samples);
  std::optional<StackSamples> stack_samples() const;

  void sleep(Millis d) const { std::this_thread::sleep_for(d); }
  // Stops the target (launch mode) and the watchers; evidence stays readable.
  void close();
  std::string target_output() const { return closed_output_.empty() ? target_->output() : closed_output_; }
  std::vector<OutputLine> target_output_lines() const { return target_->output_lines(); }
  std::optional<std::string> target_exit() const { return exit_description_; }
  bool target_alive();

 private:
  Session() = default;
  Status discover(Clock::time_point deadline);
  void watch_storage();
  void sight_storage(std::uint64_t pointer);
  Status connect_gdbstub(Clock::time_point deadline);
  Status attach_tls(Clock::time_point deadline);
  void prepare_slot_watch(LaunchSpec& launch);
  void connect_socket();
  SentMessage transmit(std::vector<std::uint8_t> datagram, std::string requirement, std::string label,
                       Millis patience);
  const SentMessage& store(SentMessage m);

  SessionSettings settings_;
  TargetSpec target_spec_;
  std::string socket_dir_;
  bool socket_dir_removed_ = false;
  Clock::time_point opened_at_;
  std::unique_ptr<otlp::OtlpReceiver> receiver_;
  std::unique_ptr<Target> target_;
  std::unique_ptr<LiveProcessMemory> memory_;
  std::optional<AgentLibrary> library_;
  std::optional<Error> discovery_error_;
  std::optional<TlsDescriptor> tls_descriptor_;
  std::optional<Error> tls_error_;
  // qemu-user's gdbstub, connected at launch; handed to the record watcher.
  std::unique_ptr<ThreadPointerSource> gdbstub_;
  std::unique_ptr<RecordWatcher> watcher_;
  std::unique_ptr<SlotWatch> slot_watch_;
  std::optional<SlotWatchReport> slot_watch_report_;
  std::string slot_watch_unavailable_;
  std::optional<AgentSocket> socket_;
  TakeUpClock take_up_;
  bool pacing_abandoned_ = false;  // see kPaceEvery (session.cpp)
  std::optional<Error> socket_error_;
  std::optional<SocketFacts> socket_facts_;
  std::optional<std::string> exit_description_;
  std::string closed_output_;

  mutable std::mutex mutex_;
  std::vector<StorageSighting> storage_sightings_;
  std::deque<SentMessage> sent_;  // deque: send() hands out references that must stay valid
  std::vector<SentRegistration> registrations_;
  std::vector<Expected<UpdateOrderReport>> update_order_reports_;
  std::optional<std::chrono::system_clock::time_point> timing_boundary_;
  std::optional<std::chrono::system_clock::time_point> stop_requested_at_;
  std::atomic<std::uint64_t> messages_lost_{0};
  std::optional<StackSamples> stack_samples_;
  std::map<pid_t, std::uint64_t> run_queue_at_open_;
  Clock::time_point run_queue_since_;
  std::optional<RunQueueWait> run_queue_wait_;
  std::optional<SocketCapacity> socket_capacity_;

  std::atomic<bool> storage_watch_running_{false};
  std::thread storage_thread_;
};

}  // namespace tracecorr::conform

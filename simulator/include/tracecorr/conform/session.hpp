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

#include "tracecorr/conform/session_evidence.hpp"
#include "tracecorr/conform/slot_watch.hpp"
#include "tracecorr/conform/take_up_clock.hpp"
#include "tracecorr/conform/record_watcher.hpp"
#include "tracecorr/conform/target.hpp"
#include "tracecorr/conform/update_order.hpp"
#include "tracecorr/discovery.hpp"
#include "tracecorr/otlp.hpp"
#include "tracecorr/socket.hpp"
#include "tracecorr/tls.hpp"
#include "elastic_v1/wire.hpp"

namespace tracecorr::conform {

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

// How long register_profiler() waits to see a judged registration taken up
// (and, before sending it, for the agent to read what is queued ahead of it).
inline constexpr std::chrono::milliseconds kTakeUpPatience{1000};

// Run-queue wait so far of every thread of `pid` (tid -> ns); empty when unreadable.
std::map<pid_t, std::uint64_t> read_run_queue_wait(pid_t pid);

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
  std::optional<elastic_v1::ProcessStorage> storage() const;  // last decoded
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
  const SentMessage& send_correlation(const elastic_v1::Correlation& m, std::string requirement, std::string label,
                                      std::optional<unsigned> expected_count,
                                      std::optional<std::vector<std::uint8_t>> bytes = std::nullopt);
  // Waits until the agent has read every datagram tracecorr queued on its
  // socket (SIOCOUTQ on the sending socket reaches 0); when, or nullopt if
  // the patience ran out first (or there is no socket).
  std::optional<std::chrono::system_clock::time_point> wait_until_read(Millis patience);
  void register_profiler(elastic_v1::Registration m, std::string requirement, bool judged = true);
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
  // Everything observed, as plain data for the judges (after close()).
  SessionEvidence evidence() const;
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

// One run of the agent under test, and everything observed during it.
//
// A session launches (or attaches to) the target, finds its library, reads
// its TLS descriptor, watches every thread's record and receives its spans.
// What the protocol adds (a process-wide structure, a channel to the agent)
// is its SessionPart's (session_part.hpp). A protocol's scenarios drive the
// session; its judges read the evidence. Nothing here decides a verdict.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "tracecorr/conform/export_admission.hpp"
#include "tracecorr/conform/discovery_wait.hpp"
#include "tracecorr/conform/session_evidence.hpp"
#include "tracecorr/conform/session_part.hpp"
#include "tracecorr/watch/slot_watch.hpp"
#include "tracecorr/watch/record_watcher.hpp"
#include "tracecorr/conform/target.hpp"
#include "tracecorr/watch/update_order.hpp"
#include "tracecorr/discovery.hpp"
#include "tracecorr/otlp.hpp"
#include "tracecorr/tls.hpp"

namespace tracecorr::conform {

// How the target is started for one session (launch mode), or what an
// attached target is assumed to be running with.
struct SessionSettings {
  std::string name;                         // the protocol's name for it ("enabled", ...)
  std::map<std::string, std::string> env;   // on top of the standard environment
  std::vector<std::string> unset_env;       // e.g. an option, to see its default
  // The library to look for (the protocol's name pattern and symbols). Empty
  // (no name pattern): the protocol has no library; its SessionPart chooses
  // the judged process (Target::judge) when the session has opened.
  DiscoveryOptions discovery;
  // The per-thread record (reached through the library's TLS slot) and which
  // trace a record's bytes name: the protocol's, as data and one function.
  RecordLayout record_layout;
  watch::ActiveTraceOf active_trace;
  // Launch mode: follow every thread from before the exec and watch each
  // one's TLS slot with a hardware watchpoint until it publishes.
  bool watch_tls_slots = false;
};

// What the runner was asked to test.
struct TargetSpec {
  std::vector<std::string> command;         // launch mode
  std::optional<pid_t> pid;                 // attach mode
  std::string gdbstub;                      // "HOST:PORT": thread pointers from qemu-user's gdbstub
  std::uint16_t otlp_port = 0;              // 0: ephemeral (launch mode); attach mode needs a fixed one
  // How long discovery waits, by the target's own progress (discovery_wait.hpp).
  DiscoveryLimits discovery;
  // Launch mode: processes to pass over (Target::pass_over, by signature):
  // runs of the agent before the one that stays, learned from an earlier launch.
  std::vector<PassOver> pass_over;
  // Launch mode: at close, a judged process other than the launched one is
  // stopped alone first and the tree watched for a run of its program after
  // it (run_after_stop.hpp). Off once a run passed over was seen to stay.
  bool watch_after_stop = true;
  // Whether a process publishes the protocol under test (the suite's answer):
  // tells a run that exited before the agent that stays (preflight_run()).
  std::function<bool(pid_t)> publishes;
};

// Run-queue wait so far of every thread of `pid` (tid -> ns); empty when unreadable.
std::map<pid_t, std::uint64_t> read_run_queue_wait(pid_t pid);

// Where a thread's TLS slot (the variable `options` discovers, reached as
// `layout` says) is in process `pid`, found as a session finds it: the
// library, then how its TLS variable is reached, at the thread pointer given
// (0: whether the process's slots can be located at all). An error names why
// not yet (the library not loaded, TLS not relocated, a dynamic block not
// allocated); never an address. What a slot watch's locator calls.
Expected<std::uint64_t> locate_tls_slot(LibraryCache& cache, const DiscoveryOptions& options, const RecordLayout& layout,
                                        pid_t pid, std::uint64_t thread_pointer);

class Session {
 public:
  // `part` is the protocol's share (nullptr: none); the session owns it.
  static Expected<std::unique_ptr<Session>> open(const TargetSpec& target, const SessionSettings& settings,
                                                 std::unique_ptr<SessionPart> part);
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
  // The target's network namespace ("net:[4026532301]") when the receiver
  // listens in it rather than tracecorr's own (an attached agent in a
  // container); empty otherwise.
  const std::string& receiver_namespace() const { return receiver_namespace_; }
  // The protocol's share, as its own type (nullptr: another type or none).
  template <class Part>
  Part* part() { return dynamic_cast<Part*>(part_.get()); }
  template <class Part>
  const Part* part() const { return dynamic_cast<const Part*>(part_.get()); }
  // The judged process's memory (the launched process until discovery chose).
  const ProcessMemory& memory() const { return *memory_; }

  // Discovery. nullopt: no library (yet); see discovery_error().
  const std::optional<AgentLibrary>& library() const { return library_; }
  const std::optional<Error>& discovery_error() const { return discovery_error_; }

  // The TLS slot watch, finished before the record watcher starts.
  // nullopt: it did not run; slot_watch_unavailable() says why.
  const std::optional<watch::SlotWatchReport>& slot_watch() const { return slot_watch_report_; }
  const std::string& slot_watch_unavailable() const { return slot_watch_unavailable_; }

  // TLS descriptor (read once relocated) and the record watcher.
  const std::optional<TlsDescriptor>& tls_descriptor() const { return tls_descriptor_; }
  // How the records are reached (set once attach found a readable model).
  const std::optional<TlsVariableAccess>& tls_access() const { return tls_access_; }
  const std::optional<Error>& tls_error() const { return tls_error_; }
  watch::RecordWatcher* records() { return watcher_.get(); }
  const watch::RecordWatcher* records() const { return watcher_.get(); }
  bool wait_for_records(Millis timeout);  // at least one valid record with a trace

  // Update-order evidence, from the scenario's watchpoint runs.
  void add_update_order_report(Expected<watch::UpdateOrderReport> report);
  std::vector<Expected<watch::UpdateOrderReport>> update_order_reports() const;

  // From now on, export timing is disturbed on purpose (a huge attribute):
  // export timing is not judged past this point.
  void mark_timing_boundary();
  std::optional<std::chrono::system_clock::time_point> timing_boundary() const;
  // When close() asked a live launched target to stop: spans received later
  // were released by its shutdown, not by its own timing rules.
  std::optional<std::chrono::system_clock::time_point> stop_requested_at() const;
  // Measured at close(); nullopt before, or when schedstat is unreadable.
  std::optional<RunQueueWait> run_queue_wait() const;

  // Stack samples (one set per session; a later call replaces it).
  void set_stack_samples(StackSamples samples);
  std::optional<StackSamples> stack_samples() const;

  // How discovery's wait went (the target's progress while it waited).
  const DiscoveryWait* discovery_wait() const { return discovery_wait_.get(); }
  // Launch mode: the process judged exited on its own before the session
  // ended while another process of the launched tree publishes the protocol
  // (a pre-flight run, `timeout 5 agent --check; exec agent`), or, still
  // running then, was stopped by tracecorr and the tree ran its program again
  // at another place (run_after_stop.hpp): what was seen. The session judged
  // the wrong process; the runner launches it again, passing over that one
  // (TargetSpec::pass_over).
  struct PreflightRun {
    std::string description;  // what was seen, for the notes
    PassOver pass_over;       // the process judged, by Target::signature(): pass it over next time
  };
  const std::optional<PreflightRun>& preflight_run() const { return preflight_run_; }
  // What the tree did once the judged process was stopped, when that is no
  // reason to launch again (a restart at the same place): for the notes.
  const std::string& run_after_stop() const { return run_after_stop_; }
  // A process passed over (TargetSpec::pass_over) still ran when the wait for
  // what the target publishes ended, and nothing was judged: it did not exit
  // by itself, so it is the agent that stays ("" otherwise). The runner
  // launches again, passing over nothing.
  const std::string& passed_over_stayed() const { return passed_over_stayed_; }

  void sleep(Millis d) const { std::this_thread::sleep_for(d); }
  // Stops the target (launch mode) and the watchers; evidence stays readable.
  void close();
  // Everything observed, as plain data for the judges (after close()).
  // Its spans are the judged process's and its descendants' only
  // (ExportAdmission::exported_by): see other_exporters().
  SessionEvidence evidence() const;
  // Spans received from processes of the launched tree other than the judged
  // one and its descendants (a run of the agent before the one that stays),
  // which no verdict counts: how many, from whom.
  struct OtherExporters {
    std::size_t spans = 0;
    std::map<pid_t, std::size_t> spans_by_pid;
    std::string describe() const;  // "93 spans from pid 4242, 12 from pid 4250"
  };
  OtherExporters other_exporters() const;
  std::string target_output() const { return closed_output_.empty() ? target_->output() : closed_output_; }
  std::vector<OutputLine> target_output_lines() const { return target_->output_lines(); }
  std::optional<std::string> target_exit() const { return exit_description_; }
  bool target_alive();

 private:
  Session() = default;
  Status start_receiver(const TargetSpec& spec);
  Status discover(DiscoveryWait& wait);
  Status connect_gdbstub(DiscoveryWait& wait);
  Status attach_tls(DiscoveryWait& wait);
  // execs_only: the watch only follows the launch for LaunchSpec::on_exec (no slot is armed, no report kept).
  void prepare_slot_watch(LaunchSpec& launch, bool execs_only);
  void look_for_preflight_run();
  void look_after_stopping_judged();

  SessionSettings settings_;
  TargetSpec target_spec_;
  Clock::time_point opened_at_;
  std::unique_ptr<Target> target_;
  std::unique_ptr<LiveProcessMemory> memory_;
  std::optional<AgentLibrary> library_;
  std::optional<Error> discovery_error_;
  std::optional<TlsDescriptor> tls_descriptor_;
  std::optional<TlsVariableAccess> tls_access_;
  std::optional<Error> tls_error_;
  // qemu-user's gdbstub, connected at launch; handed to the record watcher.
  std::unique_ptr<ThreadPointerSource> gdbstub_;
  std::unique_ptr<watch::RecordWatcher> watcher_;
  std::unique_ptr<watch::SlotWatch> slot_watch_;
  std::optional<watch::SlotWatchReport> slot_watch_report_;
  bool following_execs_only_ = false;
  std::string slot_watch_unavailable_;
  std::unique_ptr<SessionPart> part_;
  std::optional<std::string> exit_description_;
  std::string closed_output_;
  std::unique_ptr<DiscoveryWait> discovery_wait_;
  std::optional<PreflightRun> preflight_run_;
  std::string run_after_stop_;
  std::string passed_over_stayed_;

  mutable std::mutex mutex_;
  std::vector<Expected<watch::UpdateOrderReport>> update_order_reports_;
  std::optional<std::chrono::system_clock::time_point> timing_boundary_;
  std::optional<std::chrono::system_clock::time_point> stop_requested_at_;
  std::optional<StackSamples> stack_samples_;
  std::map<pid_t, std::uint64_t> run_queue_at_open_;
  Clock::time_point run_queue_since_;
  std::optional<RunQueueWait> run_queue_wait_;
  // Only the target's exports count (export_admission.hpp); the receiver is
  // declared last so that it (and its thread) ends before anything above.
  std::shared_ptr<ExportAdmission> admission_;
  std::string session_token_;     // launch mode: handed to the agent, sent back with its exports
  std::string receiver_namespace_;
  std::unique_ptr<otlp::OtlpReceiver> receiver_;
};

}  // namespace tracecorr::conform

// The host agent (`tracecorr agent`): the engine's loop that finds the
// processes publishing a protocol it samples, tracks them with one sampler,
// follows their OTel process context, hands every sample to the protocol that
// holds its process, and sums up what each protocol did.
//
// Two kinds of plug-in say what a protocol is to the agent:
//  - a SampledProtocol (sampled_protocol.hpp): records located and decoded,
//    listed per thread by SampledProcesses; nothing is sent (OTEP 4947);
//  - an AgentHook (here): the protocol's own part of a run, for a protocol
//    that does something with its samples (Elastic v1: its discovery, its
//    socket, correlation messages aggregated and delivered).
// A process may publish several protocols (a JVM with Elastic's agent and an
// OTel SDK): each part tracks its layout in a layout slot of its own
// (AgentRun::slot; SampledProcesses the last), the sampler reads every
// thread's record by each, and the loop routes each sample by its slot. A
// process a hook holds is still examined by SampledProcesses for the sampled
// protocols, and is listed under each protocol with its own counts.
// Packages register theirs before main, like their inspectors; the engine
// names none of them.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "tracecorr/conform/figures.hpp"
#include "tracecorr/watch/record_watcher.hpp"
#include "tracecorr/error.hpp"
#include "tracecorr/process_context_resolver.hpp"
#include "tracecorr/reader_defects.hpp"
#include "tracecorr/sampled_protocol.hpp"
#include "tracecorr/sampler.hpp"

namespace tracecorr {

class FollowedContext;  // sampled_processes.hpp

// What a protocol's part of one run is handed by the loop.
struct AgentRun {
  Sampler& sampler;
  process_context::PublicationResolver& contexts;  // refreshed by the loop before each poll
  std::function<void(const std::string&)> notice;  // "pid N: ...", for people (escaped by the loop)
  // The layout slot the part tracks its processes in (Sampler::track): its
  // samples carry it, and untrack() forgets only it.
  LayoutSlot slot = 0;
  // The reader defects in force (reader_defects.hpp): empty for the
  // conforming reader. A part shows those its hook declares, nothing else.
  ReaderDefects defects;
};

// A protocol's part of one agent run: the processes that publish it.
class AgentPart {
 public:
  virtual ~AgentPart() = default;
  // A rescan begins: retire the processes that exited or exec'd (a later
  // examine looks at the new image afresh).
  virtual void retire_gone() = 0;
  // pid is a candidate of the rescan: true when this part holds it (it did,
  // and looked again at what is missing, or it adopts it now).
  virtual bool examine(pid_t pid, bool explicit_pid) = 0;
  // A sample of one of its processes: true when it held pid and the sample
  // was read by its layout (sample.slot is its run's slot).
  virtual bool on_sample(const Sample& sample) = 0;
  // What the record of a sample on_sample() took says, for the exported
  // observation (its protocol's reading: link, flags, attributes). The
  // default: no context (the sample is exported without a link).
  virtual RecordContext context_of(const Sample& sample) {
    (void)sample;
    return {};
  }
  // The run ends at `end` (a duration was given): what waits beyond it is pointless.
  virtual void ends_at(std::chrono::steady_clock::time_point end) { (void)end; }
  // How long what it has pending may still wait once sampling ended (its
  // peers' reads); the loop waits the longest any part asks, at most
  // HostAgent::kFinalPatience.
  virtual std::chrono::milliseconds final_patience() const { return std::chrono::milliseconds(0); }
  // Sampling ended and every sample was handed on: what is pending may wait at most `patience`.
  virtual void finish(std::chrono::milliseconds patience) { (void)patience; }

  // The live line: its processes (retired included), those sampled now, and its own figures.
  virtual std::size_t processes() const = 0;
  virtual std::size_t sampling() const = 0;
  virtual std::string live_text() const = 0;
  // Its processes' followed contexts (the loop sums them up for people).
  virtual void each_context(const std::function<void(pid_t, const FollowedContext&)>& visit) const = 0;

  // Adds its settings at the summary's top, its processes to "processes",
  // its counts to "totals" (numbers are added to those already there) and
  // its own figures to "timeline" when there is one.
  virtual void summarize(nlohmann::json& summary) const = 0;
  // For a process the user named: ever held, and why it gave nothing (nullopt: it gave something).
  virtual bool ever_held(pid_t pid) const = 0;
  virtual std::optional<std::string> nothing_readable(pid_t pid) const = 0;
  // What publishing the protocol means, for "publishes none of the protocols ..." ("<id>: no library ...").
  virtual std::string not_published() const = 0;
  // For the HTML page's flame graphs (per trace): what trace a record of
  // pid's names; nullptr: pid is not this part's, or its samples are not drawn.
  virtual const watch::ActiveTraceOf* trace_of(pid_t pid) const {
    (void)pid;
    return nullptr;
  }
  // The words of those flame graphs (the protocol's word for what trace_of() names).
  virtual conform::StacksCaption stacks_caption() const { return {}; }
};

// The package's plug-in: its settings (the CLI's options, by name) and its part of a run.
struct AgentSetting {
  std::string name;  // "samples-delay-ms": the option --samples-delay-ms
  std::string help;
  std::string default_value;
  std::vector<std::string> choices;  // empty: any value (the hook checks it)
  std::string type_name;             // for --help ("UINT"); empty: TEXT
};
using AgentSettings = std::map<std::string, std::string>;  // name -> value (defaults filled in)

class AgentHook {
 public:
  virtual ~AgentHook() = default;
  virtual std::string_view id() const = 0;  // the registry's protocol id
  virtual std::vector<AgentSetting> settings() const = 0;
  // The defects its part's reading code can be told to show (--reader-defect).
  virtual std::vector<ReaderDefect> reader_defects() const { return {}; }
  // An error: a setting it refuses (the user's mistake, said plainly).
  virtual Expected<std::unique_ptr<AgentPart>> start(const AgentSettings& settings, AgentRun run) const = 0;
};

// Adding the same hook twice is a no-op (plugin_registry.hpp).
void register_agent_hook(const AgentHook& hook);
std::vector<const AgentHook*> agent_hooks();  // in registration order

// One sample of a process a protocol holds, as the agent hands it on for
// export (an OTLP profiles observation): the sample itself (pid, tid, time,
// frames), what its record said in its protocol's reading, and the process's
// resource: `process.pid` as the sampler saw it, with the resource attributes
// of the OTel process context publication current when the thread was
// sampled (OTEP 4719; none when it publishes none, or that publication was
// never read: never guessed).
struct AgentObservation {
  const Sample& sample;
  RecordContext context;
  std::shared_ptr<const otlp::Attributes> resource;
};
// Called on the agent's loop thread for every such sample: it must not block.
using ObservationSink = std::function<void(const AgentObservation&)>;

struct HostAgentOptions {
  std::vector<pid_t> pids;  // processes named by the user
  bool all = false;         // every process on the host (rescanned)
  unsigned frequency_hz = 99;  // for the summary; the sampler is configured by its maker
  std::chrono::milliseconds rescan_interval{500};
  std::chrono::milliseconds summary_interval{1000};
  // How long the processes are sampled (nullopt: until stopped). With --pid,
  // its clock starts once each named process has been examined: on a starved
  // machine that can take longer than the duration.
  std::optional<std::chrono::milliseconds> duration;
  std::FILE* log = stderr;  // live summary and notices; nullptr: silent
  ObservationSink observe;  // unset: samples are not handed on
  // For conformance kill matrices only: the reader defects every part and
  // SampledProcesses read by (empty: the conforming reader). Listed in the summary.
  ReaderDefects reader_defects;
};

class HostAgent {
 public:
  static constexpr std::chrono::milliseconds kFinalPatience{2000};
  // SampledProcesses' layout slot; the hooks' parts get the slots before it.
  static constexpr LayoutSlot kSampledProcessesSlot = kLayoutsPerProcess - 1;
  // `parts` are made by their hooks with the run this agent hands them
  // (make_run()); samples read in kSampledProcessesSlot go to SampledProcesses.
  HostAgent(HostAgentOptions options, Sampler& sampler);
  ~HostAgent();
  HostAgent(const HostAgent&) = delete;
  HostAgent& operator=(const HostAgent&) = delete;

  // What a part is handed (the sampler, the loop's context resolver, its
  // notices, a layout slot of its own). An error: every slot a hook may have
  // (kSampledProcessesSlot of them) was handed out.
  Expected<AgentRun> make_run();
  void add_part(std::unique_ptr<AgentPart> part);
  // Starts every registered hook's part with `settings` (each hook's own by
  // name, defaults filled in); an error names the hook's refusal.
  Status add_registered_parts(const AgentSettings& settings);

  // Runs until `stop` or the duration ends (counted from when every named
  // process was examined once); a sampler failure is an Error.
  Status run(const std::atomic<bool>& stop);
  // The final summary (also valid mid-run): the run's settings, totals,
  // sampler counters, every process of every protocol, and its timeline.
  nlohmann::json summary() const;
  // What trace the sample's record names (the HTML page's flame graphs): the
  // part's that read it in its slot, or nullptr (SampledProcesses' records
  // are not drawn).
  const watch::ActiveTraceOf* trace_of(const Sample& sample) const;
  // The words of that part's flame graphs (a neutral caption when no part's record named it).
  conform::StacksCaption stacks_caption(const Sample& sample) const;
  // The processes named in `pids` that published nothing this agent could
  // read, each with why ("pid 42: ..."). Valid after run().
  std::vector<std::string> nothing_readable() const;

  struct Impl;

 private:
  void notice(const std::string& text) const;
  void live_summary(bool final_line) const;
  void notice_several_protocols() const;
  std::string not_published_text() const;
  nlohmann::json timeline_json() const;
  HostAgentOptions options_;
  Sampler& sampler_;
  LayoutSlot next_part_slot_ = 0;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tracecorr

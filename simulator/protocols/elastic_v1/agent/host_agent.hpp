// The reference host agent: finds agent processes, reads their process
// storage and TLS descriptor, connects to their socket, samples their
// threads (a Sampler: BPF or ptrace), and reports correlations. When a
// sampled process also publishes an OpenTelemetry process context (OTEP
// 4719), the sampler reads its header with each sample and the summary says
// which resource (publication) each sample belongs to. A process without an
// Elastic library that publishes a protocol whose records a sampler reads
// (tracecorr/sampled_protocol.hpp: OTEP 4947's thread context) is handed to
// the engine's SampledProcesses: sampled in every TLS model, dynamic TLS
// included, and listed per thread in the summary (nothing is sent to it).
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "elastic_v1/agent/correlation.hpp"
#include "tracecorr/error.hpp"
#include "tracecorr/sampler.hpp"

namespace tracecorr::elastic_v1::agent {

struct AgentOptions {
  std::vector<pid_t> pids;  // processes to correlate
  bool all = false;         // every agent process on the host (rescanned)
  std::uint32_t samples_delay_ms = 1000;
  std::string host_id;
  Personality personality = Personality::Spec;
  unsigned frequency_hz = 99;  // for the summary; the sampler is configured by its maker
  // Spec: how long a transaction goes unsampled before its counts are taken
  // as complete and sent (a thread seen moving on to another record settles
  // its transaction at once). 0: derived from samples_delay_ms (a fifth of
  // it, at most 1 s), so counts are sent well before the agent may export
  // their transaction. One that is not below samples_delay_ms is halved.
  std::chrono::milliseconds flush_interval{0};
  // Bound on the spec personality's pending (trace, transaction, stack) keys per process.
  std::size_t delivery_queue_capacity = 4096;
  std::chrono::milliseconds rescan_interval{500};
  std::chrono::milliseconds summary_interval{1000};
  // How long the processes are sampled (nullopt: until stopped). With --pid,
  // its clock starts once each named process has been examined: on a starved
  // machine that can take longer than the duration.
  std::optional<std::chrono::milliseconds> duration;
  std::FILE* log = stderr;                            // live summary and notices; nullptr: silent
};

class HostAgent {
 public:
  HostAgent(AgentOptions options, Sampler& sampler);
  ~HostAgent();
  HostAgent(const HostAgent&) = delete;
  HostAgent& operator=(const HostAgent&) = delete;

  // Runs until `stop` or the duration ends (counted from when every named
  // process was examined once); a sampler failure is an Error.
  Status run(const std::atomic<bool>& stop);

  // The final summary (also valid mid-run): per process and per transaction the
  // stack trace ids (base64url, no padding) and the counts actually sent.
  nlohmann::json summary() const;

  // The processes named in `pids` that published nothing this agent could
  // read, each with why ("pid 42: no agent library mapped ..."). Valid after run().
  std::vector<std::string> nothing_readable() const;

  struct Process;  // per-process state (host_agent.cpp)

  // The flush interval in force (options or derived from samples_delay_ms).
  static std::chrono::milliseconds effective_flush_interval(const AgentOptions& o);

 private:
  void rescan();  // retires what exited, lists the candidates; continue_rescan() examines them
  bool continue_rescan(std::chrono::steady_clock::time_point until);
  void examine(pid_t pid, bool explicit_pid);
  void refresh(Process& p);
  void follow_process_context(Process& p);
  void untrack(Process& p);
  void on_sample(const Sample& s);
  void retire(pid_t pid, const std::string& why);
  void notice(const std::string& text);
  void live_summary(bool final_line);

  AgentOptions options_;
  Sampler& sampler_;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tracecorr::elastic_v1::agent

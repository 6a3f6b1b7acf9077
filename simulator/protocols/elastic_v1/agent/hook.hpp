// Elastic v1 in the engine's host agent (tracecorr/host_agent.hpp): its
// AgentHook. Its part of a run finds the processes that map an Elastic agent
// library, reads their process storage and TLS descriptor, connects to their
// socket and registers, has the engine's sampler track their threads (static
// TLS only: TLS-07), and turns each sample into a correlation: aggregated
// until its transaction settles and delivered at the agent's own moments
// (deliverer.hpp), or sent at once as the OTel eBPF profiler does. When a
// process also publishes an OpenTelemetry process context (OTEP 4719), the
// summary says which resource each sample belongs to.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "elastic_v1/agent/correlation.hpp"
#include "tracecorr/host_agent.hpp"

namespace tracecorr::elastic_v1::agent {

// Elastic's settings of a run (the CLI's --samples-delay-ms, --host-id,
// --personality, --flush-interval).
struct AgentOptions {
  std::uint32_t samples_delay_ms = 1000;
  std::string host_id;
  Personality personality = Personality::Spec;
  // Spec: how long a transaction goes unsampled before its counts are taken
  // as complete and sent (a thread seen moving on to another record settles
  // its transaction at once). 0: derived from samples_delay_ms (a fifth of
  // it, at most 1 s), so counts are sent well before the agent may export
  // their transaction. One that is not below samples_delay_ms is halved.
  std::chrono::milliseconds flush_interval{0};
  // Bound on the spec personality's pending (trace, transaction, stack) keys per process.
  std::size_t delivery_queue_capacity = 4096;
};

// The flush interval in force (options or derived from samples_delay_ms).
std::chrono::milliseconds effective_flush_interval(const AgentOptions& o);

// Elastic v1's part of one host agent run.
std::unique_ptr<AgentPart> make_agent_part(const AgentOptions& options, AgentRun run);

// Registered with the package (probes/elastic_v1/register.cpp).
const AgentHook& agent_hook();

}  // namespace tracecorr::elastic_v1::agent

// The part of a host agent that knows no protocol: processes that publish a
// sampled protocol (sampled_protocol.hpp), tracked with the agent's sampler
// in whatever TLS model their records live (dynamic TLS included: the BPF
// program walks the DTV), their samples tallied per thread, and their OTel
// process context (OTEP 4719) followed so each sample names its resource.
// The engine's host agent (host_agent.hpp) hosts it beside the protocols'
// hooks, in a layout slot of its own, so a process a hook holds is sampled
// for its sampled protocol too; `sample_records` runs it alone (Python:
// RecordReader.sample()).
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tracecorr/discovery.hpp"
#include "tracecorr/error.hpp"
#include "tracecorr/process_context_resolver.hpp"
#include "tracecorr/sampled_protocol.hpp"
#include "tracecorr/sampler.hpp"

namespace tracecorr {

// How a host agent finds and reads process contexts: the OTEP's reading by
// default; the reader defects one-mapping-name (only "[anon_shmem:OTEL_CTX]"
// is looked for), any-signature (signature and version not checked) and
// ignores-seqlock (the payload taken while the timestamp is 0, not re-checked
// after the copy) break it, for conformance kill matrices only.
struct ContextReading {
  bool anon_shmem_only = false;
  process_context::ReadOptions read;
};
ContextReading context_reading(const ReaderDefects& defects);
// The resolver's options under that reading.
process_context::ResolverOptions resolver_options(const ReaderDefects& defects);

// One sampled process's OTel process context as a host agent follows it: the
// sampler reads the first context mapping's header with each sample, and the
// samples taken since are tallied by the publication (resource) they belong to.
class FollowedContext {
 public:
  // Looks at pid's context mappings; when the first one changed (appeared,
  // moved, went away) tells the sampler and the resolver. pid must be
  // tracked. Returns what changed, for people ("" when nothing did).
  std::string follow(pid_t pid, Sampler& sampler, process_context::PublicationResolver& resolver,
                     const ContextReading& reading = {});
  // Counts a sample of pid by its context timestamp (samples taken before the
  // sampler had the header carry none and are not counted).
  void count(const Sample& sample, process_context::PublicationResolver& resolver);
  // The sampler forgot the header (untrack): so does the resolver.
  void forget(pid_t pid, process_context::PublicationResolver& resolver);
  std::uint64_t header() const { return header_; }
  const process_context::PublicationTally& tally() const { return tally_; }
  // The tally with `header_address` and `mappings`; null when no context was
  // ever followed nor a sample counted.
  nlohmann::json to_json() const;

 private:
  std::uint64_t header_ = 0;   // 0: none followed
  std::size_t mappings_ = 0;   // as last discovered (the OTEP allows one)
  std::uint64_t since_ns_ = 0;  // CLOCK_MONOTONIC when the sampler was given the header
  process_context::PublicationTally tally_;
};

class SampledProcesses {
 public:
  using Notice = std::function<void(const std::string&)>;  // "pid N: ...", for people
  // `resolver` maps context timestamps to publications; its owner refreshes
  // it before each poll (publications are readable only while current).
  // `slot`: the sampler's layout slot it tracks its processes in (another
  // protocol's part may hold the same process in another slot); samples of
  // other slots are not its.
  // `defects`: the reader defects its protocols' records are read by (empty: conforming).
  SampledProcesses(Sampler& sampler, process_context::PublicationResolver& resolver, Notice notice = {},
                   LayoutSlot slot = 0, ReaderDefects defects = {});
  ~SampledProcesses();
  SampledProcesses(const SampledProcesses&) = delete;
  SampledProcesses& operator=(const SampledProcesses&) = delete;

  // Asks each registered protocol whether pid (not followed yet) publishes
  // it; true when one does: pid is followed from now on and tracked as soon
  // as its records can be read. A process that publishes none but an OTel
  // process context is followed too, listed with its resource (nothing to
  // sample until a protocol's records appear: each rescan asks again), unless
  // `context_alone` is false (another part holds the process and follows its
  // context). `explicit_pid`: the user named it.
  bool examine(pid_t pid, bool explicit_pid, bool context_alone = true);
  bool follows(pid_t pid) const;
  // Retires followed processes that exited or exec'd (a later examine looks
  // at the new image afresh), locates again those not tracked yet, and
  // follows each tracked process's context.
  void rescan();
  // Tallies a sample of a followed process read in its slot; false when it is not one.
  bool on_sample(const Sample& sample);
  // What the record of a sample on_sample() took says in its protocol's
  // reading (SampledRecords::context), cached per process by the record's
  // bytes within a bound; no context for a sample without a record.
  RecordContext context_of(const Sample& sample);

  std::size_t followed() const;  // followed now
  std::size_t tracked() const;
  std::uint64_t samples() const;       // of every process, retired included
  std::uint64_t records_read() const;  // samples that carried a record
  // Every process ever followed, retired included, in the order first followed.
  nlohmann::json to_json() const;
  // For a process the user named: why it gave nothing (never sampled, or no
  // thread ever had a record, or a process context alone); nullopt when it
  // did, or was never followed.
  std::optional<std::string> nothing_readable(pid_t pid) const;
  bool ever_followed(pid_t pid) const;
  // Followed for its process context alone (no protocol's records yet).
  bool context_only(pid_t pid) const;

  struct Process;  // sampled_processes.cpp

 private:
  void refresh(Process& p);
  // Asks each registered protocol for p's records; true when one publishes them.
  bool adopt(Process& p);
  bool adopt_as(Process& p, const SampledProtocol& protocol, Expected<std::unique_ptr<SampledRecords>> located);
  void retire(Process& p, const std::string& why);

  Sampler& sampler_;
  process_context::PublicationResolver& resolver_;
  Notice notice_;
  LayoutSlot slot_;
  ReaderDefects defects_;
  LibraryCache cache_;
  std::vector<std::unique_ptr<Process>> processes_;  // retired ones stay, marked exited
};

// Runs SampledProcesses alone over `pids` for `duration` (or until `stop`):
// the loop of a host agent that only reads records. Returns its to_json()
// under "processes", with the sampler's name and counters; a sampler failure
// is an Error.
Expected<nlohmann::json> sample_records(Sampler& sampler, const std::vector<pid_t>& pids,
                                        std::chrono::milliseconds duration, const std::atomic<bool>& stop);

}  // namespace tracecorr

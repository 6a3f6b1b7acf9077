// tracecorr agent's OTLP profiles export (issue 27): where to (the flags, else
// the standard OTEL_EXPORTER_OTLP_* variables), and the exporter fed with the
// host agent's observations (HostAgentOptions::observe). The sampling loop
// only offers to the exporter's bounded queue: a full queue drops and counts,
// a refusing or slow endpoint costs the loop nothing.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "tracecorr/error.hpp"
#include "tracecorr/host_agent.hpp"

namespace tracecorr::cli {

struct OtlpExportArgs {
  std::string endpoint;  // --otlp-endpoint (empty: the environment's, else no export)
  std::string protocol;  // --otlp-protocol (empty: the environment's, else grpc)
};

// Where observations go: the endpoint as the exporter takes it (http://host:port)
// and the protocol ("grpc" or "http/protobuf"), and where each came from.
struct OtlpExportTarget {
  std::string endpoint;
  std::string protocol;
  std::string endpoint_from;  // "--otlp-endpoint", "OTEL_EXPORTER_OTLP_PROFILES_ENDPOINT", ...
  std::string protocol_from;  // "--otlp-protocol", "OTEL_EXPORTER_OTLP_PROTOCOL", "default"
  // What each profile says of its samples: the sampler's period (1 s / frequency) and whether it
  // counts CPU time (bpf: on-CPU samples) or wall time (ptrace: every thread, running or not).
  unsigned frequency_hz = 99;
  bool wall_clock = false;
};

using Environment = std::function<std::optional<std::string>(const std::string& name)>;
Environment process_environment();

// The flags win over the variables; the profiles-specific variables over the
// general ones. nullopt: no export asked for. An error: a protocol tracecorr
// does not speak (http/json), or a profiles endpoint whose path is not
// /v1development/profiles (the only one the exporter posts to).
Expected<std::optional<OtlpExportTarget>> otlp_export_target(const OtlpExportArgs& args, const Environment& env);

// The exporter and the observations it was offered.
class AgentExport {
 public:
  static Expected<std::unique_ptr<AgentExport>> start(const OtlpExportTarget& target);
  ~AgentExport();
  // For HostAgentOptions::observe: never blocks.
  void offer(const AgentObservation& observation);
  // Sends what is queued (each export bounded by the exporter's timeout).
  void flush();
  // {"endpoint", "protocol", "offered", "dropped", "exports", "exports_failed",
  //  "samples_exported", "samples_failed", "last_error"}.
  nlohmann::json summary() const;
  std::string final_line() const;  // for people (stderr)

  struct Impl;

 private:
  explicit AgentExport(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace tracecorr::cli

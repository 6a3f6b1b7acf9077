// The agent's OTLP profiles exporter: samples offered by a sampler, batched,
// encoded (encode.hpp) and sent over gRPC (ProfilesService/Export) or
// HTTP/protobuf (POST /v1development/profiles) from a thread of its own. The
// sampler never waits for the network: offer() takes a lock held only to push
// or swap a bounded queue, and a full queue drops the sample and counts it.
//
// Wiring into a host agent is a few lines (the agent's sample loop):
//
//   auto exporter = profiles::ProfilesExporter::start({.endpoint = "http://127.0.0.1:4317",
//                                                      .protocol = profiles::ExportProtocol::Grpc});
//   ...
//   profiles::ProfileSample s;
//   s.time = profiles::SampleTime{sample.time_ns, profiles::Clock::Monotonic};
//   s.pid = sample.pid; s.tid = sample.tid;
//   s.link = profiles::SampleLink{trace_id, span_id};          // from the record read
//   s.attributes = attributes;                                  // shared, from the record's key map
//   s.resource = resources.at(sample.pid);   // process_resource(pid, its process context's resource), once per publication
//   s.stack = std::make_shared<const profiles::Stack>(sample.frames);
//   (*exporter)->offer(std::move(s));
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tracecorr/error.hpp"
#include "tracecorr/profiles/sample.hpp"

namespace tracecorr::profiles {

enum class ExportProtocol { Grpc, HttpProtobuf };

struct ExporterOptions {
  // http://host:port, as OTEL_EXPORTER_OTLP_ENDPOINT (https is not spoken).
  // HTTP posts to endpoint + /v1development/profiles.
  std::string endpoint = "http://127.0.0.1:4318";
  ExportProtocol protocol = ExportProtocol::HttpProtobuf;
  std::size_t queue_capacity = 65'536;     // samples waiting; beyond, dropped and counted
  std::size_t max_batch_samples = 16'384;  // per export
  std::chrono::milliseconds interval{1000};  // a batch leaves at least this often
  std::chrono::milliseconds timeout{5000};   // per export, connection included
  // Sent with every export (gRPC metadata or HTTP headers), as
  // OTEL_EXPORTER_OTLP_HEADERS: a session token, an API key.
  std::vector<std::pair<std::string, std::string>> headers;
  // Given to samples that come without a profile; each batch's time range is
  // filled in. The defaults are the OTel eBPF profiler's for CPU sampling.
  ProfileInfo profile{"samples", "count", "cpu", "nanoseconds", 0, 0, 0, "tracecorr", TRACECORR_VERSION};
};

struct ExporterCounters {
  std::uint64_t offered = 0;
  std::uint64_t dropped = 0;          // the queue was full
  std::uint64_t exports = 0;          // export calls made
  std::uint64_t exports_failed = 0;
  std::uint64_t samples_exported = 0;  // in exports the receiver accepted
  std::uint64_t samples_failed = 0;    // in exports that failed (not retried)
  std::string last_error;              // the last failure, for people
};

// A sampled process's resource: its OTel process context's resource
// attributes (OTEP 4719; empty when it publishes none) with `process.pid`,
// which the resource names a process by. Made once per process and
// publication, shared by its samples.
std::shared_ptr<const otlp::Attributes> process_resource(std::int64_t pid, const otlp::Attributes& context_resource = {});

class ProfilesExporter {
 public:
  // Checks the endpoint and starts the exporting thread (nothing is sent
  // before a sample is offered).
  static Expected<std::unique_ptr<ProfilesExporter>> start(ExporterOptions options);
  ~ProfilesExporter();  // sends what is queued (each export bounded by the timeout), then stops
  ProfilesExporter(const ProfilesExporter&) = delete;
  ProfilesExporter& operator=(const ProfilesExporter&) = delete;

  // Never blocks on the network; false when the queue was full (counted).
  bool offer(ProfileSample sample);
  // Exports everything offered so far and returns when that is done.
  void flush();
  ExporterCounters counters() const;

  struct Impl;

 private:
  explicit ProfilesExporter(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace tracecorr::profiles

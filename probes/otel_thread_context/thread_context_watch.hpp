// The OTEP 4947 suite's share of a session (conform::SessionPart). A reader
// first needs the process context's threadlocal.* keys (TCTXR-02): the part
// waits for a process of the target to publish them, then follows that
// context (every publication, for the key map's history) and finds the
// module defining otel_thread_ctx_v1 and how threads reach it. Then, by
// session: "sampled" runs the ptrace sampler (each thread stopped while its
// record and the context's timestamp are read, TCTXR-06); "watched" puts the
// engine's published-record watch on every thread.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "evidence.hpp"
#include "tracecorr/conform/session.hpp"
#include "tracecorr/tls.hpp"

namespace tracecorr::otel_thread_context {

class ThreadContextWatch final : public conform::SessionPart {
 public:
  // `window`: how long the sampler or the watches run once the module is found.
  ThreadContextWatch(std::string session, std::chrono::milliseconds window);
  ~ThreadContextWatch() override;

  void opened(conform::Session& session, conform::DiscoveryWait& wait) override;
  void stop_watching() override;
  std::shared_ptr<const conform::ProtocolEvidence> evidence() const override;

  // The judged process and its module are known and the readers run.
  bool reading() const { return reading_.load(); }
  // The readers are done (their window passed, or the target ended).
  bool done() const { return done_.load(); }

 private:
  bool find_publisher(conform::Session& session, conform::DiscoveryWait& wait);
  void follow_context(std::uint64_t header);
  void sample(std::uint64_t header);
  void watch_threads();
  void add_publication(Publication p);

  bool sampled_;
  std::chrono::milliseconds window_;
  ThreadContextFacts facts_;
  std::optional<TlsVariableAccess> access_;
  std::uint64_t context_header_ = 0;  // the judged context's header, which the samples read
  std::thread context_reader_, readers_;
  std::atomic<bool> stop_{false}, reading_{false}, done_{false};
  mutable std::mutex mutex_;  // guards facts_ while the readers run
};

}  // namespace tracecorr::otel_thread_context

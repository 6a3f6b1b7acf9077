// The OTEP 4719 suite's share of a session (conform::SessionPart): finds the
// process that publishes a context (a launch script's child, say), snapshots
// it when the session opens and closes, follows a launched target with the
// mapping watch, and keeps a reader thread doing the OTEP's seqlock read while
// the target runs (back to back while the timestamp moves, a thousand times a
// second while it stands), tallying what each read saw.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <thread>

#include "evidence.hpp"
#include "tracecorr/conform/session.hpp"
#include "tracecorr/watch/update_wait.hpp"

namespace tracecorr::otel_process_context {

class ContextWatch final : public conform::SessionPart {
 public:
  // `watch`: follow a launched target with the mapping watch (x86-64 and arm64 hosts).
  // `wait_for_update`: the session lasts until the context is updated (watch::UpdateWait).
  ContextWatch(std::string session, bool watch, std::optional<watch::UpdateWaitBounds> wait_for_update = std::nullopt);
  ~ContextWatch() override;

  void prepare_launch(conform::LaunchSpec& launch) override;
  void opened(conform::Session& session, conform::DiscoveryWait& wait) override;
  void stop_watching() override;
  void closed() override {}
  std::shared_ptr<const conform::ProtocolEvidence> evidence() const override;

  // The context was found and is being read.
  bool found() const { return facts_.judged_pid != 0; }
  // Consistent reads so far (the scenario may wait for enough of them).
  std::uint64_t consistent_reads() const { return consistent_.load(); }
  // How long the session waits for an update (nullptr: its window only); the
  // reader tells it each timestamp it reads.
  watch::UpdateWait* update_wait() const { return update_wait_.get(); }

 private:
  void read_until_stopped(pid_t pid, std::uint64_t address);

  bool wants_watch_;
  std::optional<watch::UpdateWaitBounds> wait_bounds_;
  std::unique_ptr<watch::UpdateWait> update_wait_;
  ContextFacts facts_;
  std::unique_ptr<watch::MappingWatch> watch_;
  std::thread reader_;
  std::atomic<bool> stop_{false};
  std::atomic<std::uint64_t> consistent_{0};
  mutable std::mutex mutex_;  // guards facts_.reads while the reader runs
};

// The ContextWatch of a session this suite opened.
const ContextWatch& context_watch(const conform::Session& session);

}  // namespace tracecorr::otel_process_context

// The Node.js suite's watched session (conform::SessionPart, launch mode):
// the engine's TLS slot watch over each thread's 32-byte struct, from the
// thread's first stop to its end, with every store reported (the gate's
// order at a thread's start and end: NJS-04, 05). It follows the launch from
// before the exec, so that the threads of a writer that loads its module
// late, or of a process a launch script forks, are held and armed as they
// start; the process judged is found as the looked session finds it.
#pragma once

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "evidence.hpp"
#include "tracecorr/conform/session.hpp"
#include "tracecorr/watch/slot_watch.hpp"

namespace tracecorr::otel_nodejs_thread_context {

class NodeGateWatch final : public conform::SessionPart {
 public:
  // `ceiling`: how long the watch may follow the target (the session ends it sooner).
  NodeGateWatch(std::string session, std::chrono::milliseconds ceiling);
  ~NodeGateWatch() override;

 private:
  void count(const watch::SlotPublication& p);

 public:

  void prepare_launch(conform::LaunchSpec& launch) override;
  void opened(conform::Session& session, conform::DiscoveryWait& wait) override;
  void stop_watching() override;
  std::shared_ptr<const conform::ProtocolEvidence> evidence() const override;

  // The judged process is known and the watch runs.
  bool watching() const;
  // Gate openings and closings seen so far (any process of the launch): how
  // the scenario knows the watch has seen what NJS-04 and 05 are judged on.
  std::size_t openings() const { return openings_.load(); }
  std::size_t closings() const { return closings_.load(); }
  pid_t judged_pid() const;

 private:
  std::chrono::milliseconds ceiling_;
  NodeFacts facts_;
  LibraryCache cache_;  // the opening thread's
  std::unique_ptr<watch::SlotWatch> watch_;
  std::map<pid_t, DiscoveryStruct> last_state_;  // by thread: the watch's thread only
  std::atomic<std::size_t> openings_{0}, closings_{0};
  mutable std::mutex mutex_;  // guards facts_
};

}  // namespace tracecorr::otel_nodejs_thread_context

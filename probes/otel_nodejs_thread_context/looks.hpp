// The Node.js suite's share of a session (conform::SessionPart): finds the
// process of the target that declares the schema in its process context or
// maps the module defining `otel_thread_ctx_nodejs_v1` (a launch script's
// child, say), then looks at every thread of it again and again, each
// stopped while its struct, walk and record are read (the package's
// inspector, NJSR-03), until the session has seen enough or its time is up.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <set>
#include <utility>
#include <string>
#include <thread>

#include "evidence.hpp"
#include "otel_nodejs_thread_context/inspect/inspect.hpp"
#include "tracecorr/conform/session.hpp"
#include "tracecorr/otlp.hpp"
#include "tracecorr/watch/update_wait.hpp"

namespace tracecorr::otel_nodejs_thread_context {

// Finds the process of the target to judge (the schema declared, or the
// module mapped; Target::judge), waiting while `wait` allows; fills `facts`
// (judged_pid, or not_found) under `mutex`. Both sessions' parts start here.
bool find_judged_process(conform::Session& session, conform::DiscoveryWait& wait, LibraryCache& cache,
                         std::mutex& mutex, NodeFacts& facts);

class NodeLooks final : public conform::SessionPart {
 public:
  struct Lengths {
    std::chrono::milliseconds window{0};  // the looks last at least this long
    // Past the window, while no look has read a record (a tracer whose spans
    // begin seconds into a loaded start), or, once the writer exports spans,
    // fewer than `records_against_spans` valid records named one of them:
    // this much of the writer's own time since the looks began (its wall time
    // less its longest wait for a CPU), and never past the ceiling.
    std::chrono::milliseconds quiet{0}, ceiling{0};
    std::size_t records_against_spans = 0;
    std::chrono::milliseconds interval{50};  // between looks
  };
  NodeLooks(std::string session, Lengths lengths);
  ~NodeLooks() override;

  void opened(conform::Session& session, conform::DiscoveryWait& wait) override;
  void stop_watching() override;
  std::shared_ptr<const conform::ProtocolEvidence> evidence() const override;

  // The judged process is known and the looks run.
  bool looking() const { return looking_.load(); }
  // The looks are over (enough seen, time up, or the target ended).
  bool done() const { return done_.load(); }

  static constexpr std::size_t kMaxLooks = 400;
  static constexpr std::size_t kMaxSpansFollowed = 100000;

 private:
  void look_until_done();
  void add_look(const Inspection& look, std::uint64_t time_ns);
  std::string why_stop(std::chrono::steady_clock::duration elapsed, const watch::TargetProgress& progress);
  // Valid records read so far, and those naming a span the session's receiver has.
  std::pair<std::size_t, std::size_t> records_read();
  // No module mapped and no schema declared (AsyncContextFrame off): no record to wait for.
  bool publishes_nothing() const;

  Lengths lengths_;
  NodeFacts facts_;
  LibraryCache cache_;  // the looks' thread only, once it runs
  const otlp::OtlpReceiver* receiver_ = nullptr;  // the session's, which outlives the looks
  std::set<SpanId> received_;                     // span ids the receiver had at the last look (the looks' thread)
  std::size_t received_scanned_ = 0;
  std::thread looker_;
  std::atomic<bool> stop_{false}, looking_{false}, done_{false};
  mutable std::mutex mutex_;  // guards facts_ while the looks run
};

}  // namespace tracecorr::otel_nodejs_thread_context

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
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "evidence.hpp"
#include "tracecorr/conform/session.hpp"
#include "tracecorr/watch/activity_clock.hpp"
#include "tracecorr/otlp.hpp"
#include "tracecorr/tls.hpp"

namespace tracecorr::otel_thread_context {

using Clock = std::chrono::steady_clock;

class ThreadContextWatch final : public conform::SessionPart {
 public:
  // How long the readers run once the module is found.
  struct Lengths {
    std::chrono::milliseconds window{0};  // at least
    // The watched session, past its window: the writer's own time without a
    // store that ends it, and the ceiling (watch_threads() says when else).
    std::chrono::milliseconds quiet{0}, ceiling{0};
    // The sampled session: the sampler runs until the scenario ends, which
    // waits for the key map to be republished (watch::UpdateWait, told each
    // publication follow_context() reads). nullopt: the window only.
    std::optional<watch::UpdateWaitBounds> wait_for_update;
    // The sampled session, past its window: until this many valid records
    // naming a span were read (0: the window only), or `quiet` of the
    // writer's own time, or the ceiling.
    std::size_t want_named_records = 0;
    // The sampled session, past its window, when the writer exports spans:
    // until this many sampled records named a span the session's receiver
    // has (0: the window only), or `quiet` of the writer's own time, or the
    // ceiling. TCTX-14 and 27 judge no fewer (kMinReadsAgainstSpans): an
    // emulated writer's window held 16 records, half naming spans not yet
    // exported, and both rules were inconclusive.
    std::size_t want_records_against_spans = 0;
  };
  ThreadContextWatch(std::string session, Lengths lengths);
  ~ThreadContextWatch() override;

  void opened(conform::Session& session, conform::DiscoveryWait& wait) override;
  void stop_watching() override;
  std::shared_ptr<const conform::ProtocolEvidence> evidence() const override;

  // The judged process and its module are known and the readers run.
  bool reading() const { return reading_.load(); }
  // The readers are done (their window passed, or the target ended).
  bool done() const { return done_.load(); }
  // How long the session waits for a publication of the key map (nullptr: the window only).
  watch::UpdateWait* update_wait() const { return update_wait_.get(); }
  // The sampled session decides its own length (an update or records to wait for).
  bool session_decides() const { return update_wait_ || want_named_records_ > 0 || want_against_spans_ > 0; }
  // Whether the sampled session still wants records (its window, then
  // want_named_records); records why it stopped wanting them. The scenario's thread.
  bool wants_more_samples();
  // The same for records to judge against exported spans: its window, then, once
  // spans came, want_records_against_spans. The scenario's thread.
  bool wants_records_against_spans(const otlp::OtlpReceiver& receiver);
  // Why the sampled session stopped wanting records ("" : it did not wait past its window).
  std::string sampling_ended_because() const;
  // "1534 ms (4 watch(es)): <why it ended>" ("" : no watch ran).
  std::string watching_summary() const;

  struct WatchProgress;  // one published-record watch's, as the watched session counts it

 private:
  bool find_publisher(conform::Session& session, conform::DiscoveryWait& wait);
  void follow_context(std::uint64_t header);
  void sample(std::uint64_t header);
  void watch_threads();
  void add_publication(Publication p);
  std::string why_watching_ends(std::chrono::steady_clock::duration elapsed, const std::vector<const WatchProgress*>& running,
                                std::size_t changes, const watch::ActivityClock& activity) const;

  bool sampled_;
  std::chrono::milliseconds window_, watch_quiet_, watch_ceiling_;
  std::size_t want_named_records_ = 0;
  std::atomic<std::size_t> named_records_{0};  // valid records naming a span, sampled so far
  std::set<std::pair<TraceId, SpanId>> named_spans_;  // the spans they named (up to the judges' need; mutex_)
  std::atomic<std::size_t> named_span_count_{0};
  std::size_t want_against_spans_ = 0;
  std::map<SpanId, std::size_t> records_by_span_;  // valid sampled records by the span named (bounded; mutex_)
  std::set<SpanId> received_span_ids_;             // the receiver's spans read so far (the scenario's thread)
  std::size_t received_scanned_ = 0;
  Clock::time_point next_span_look_{};
  bool waited_for_spans_ = false;
  std::optional<Clock::time_point> sampling_began_;
  std::unique_ptr<watch::TargetProgress> sampling_progress_;
  std::string sampling_ended_because_;  // guarded by mutex_
  std::optional<watch::UpdateWaitBounds> wait_bounds_;
  std::unique_ptr<watch::UpdateWait> update_wait_;
  ThreadContextFacts facts_;
  std::optional<TlsVariableAccess> access_;
  std::uint64_t context_header_ = 0;  // the judged context's header, which the samples read
  std::thread context_reader_, readers_;
  std::atomic<bool> stop_{false}, reading_{false}, done_{false};
  mutable std::mutex mutex_;  // guards facts_ while the readers run
};

}  // namespace tracecorr::otel_thread_context

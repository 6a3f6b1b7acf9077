// DEFER: when ended transactions reach the exporter, measured as the time
// between a span's end and its arrival at tracecorr's receiver.
#include <algorithm>
#include <cctype>
#include <set>

#include "tracecorr/stats.hpp"
#include "judging.hpp"
#include "probes.hpp"
#include "scenarios.hpp"
#include "elastic_v1/registry.hpp"

namespace tracecorr::elastic_v1 {

using namespace tracecorr::conform;
namespace {

// Scheduling of the agent's deferral thread on a busy machine (on top of the
// baseline's p95); export batching no longer counts (holds are by export order).
constexpr double kLateSlackMs = 600;
// A hold is a lower bound, short of the truth by the gap to the previous
// span's end (tens of ms with a few working threads).
constexpr double kEarlySlackMs = 100;
// Held at least this long with the feature off: deferred (the default delay is 1000 ms).
constexpr double kImmediateMs = 400;
// A warning must follow the first overflow within this (one scheduling hiccup
// and a buffered stderr flush, not the agent's shutdown).
constexpr std::chrono::milliseconds kWarningWithin{2000};

// ---- DEFER-05, unsampled transactions: the frozen queue ---------------------
//
// Unsampled transactions are never exported: only the places they take in
// the deferral queue can show. A queue frozen by a delay longer than the
// session holds as many transactions as it has places, and a conforming
// agent fills it with sampled ones only. How many places that is cannot be
// taken from BUFFER_SIZE: what an agent makes of the size is its own (EDOT
// Java rounds it up to a power of two and holds one more outside its ring;
// another may keep a slot free), and an agent that lets unsampled
// transactions take one place holds exactly as many sampled ones as a
// conforming agent whose queue is one smaller. Several freezes in one launch
// cannot tell them apart either (that agent is the smaller queue in each),
// and timing (a sampled transaction passing because a freed place went to an
// unsampled one) depends on which transaction happens to end first: luck.
// So the kit launches the same configuration twice, differing only in the
// sampler (scenarios.cpp, run_queue_freeze): the all-sampled launch's frozen
// queue measures the agent's own capacity, and the unsampled launch's must
// hold as many sampled transactions. An unsampled transaction had the chance
// to take a place when it ended under the freeze before the last sampled one
// the queue took in (the queue had room then: nothing leaves a frozen queue);
// the records say when each ended. With one in four sampled and a queue of 8,
// dozens do, and an agent of either kind (one place, or every place) holds
// fewer on every run; a conforming agent holds the same number in both. A
// pass needs such a chance; a fail needs unsampled transactions that ended
// before the queue was full, to have taken the places sampled ones lack.

// Held at least this long (export order) and exported only when the agent
// stopped: it was in the frozen queue. The scenario holds the full queue
// 1.5 s on; a transaction that passed it is handed over at once.
constexpr double kFrozenHoldMs = 800;
// A record is last seen this close before its transaction ends.
constexpr auto kRecordSlack = std::chrono::milliseconds(50);
// Transactions that ended this long before the freeze was read may still
// have been queued under the flush delay when it applied (a slow poller).
constexpr auto kFlushMargin = std::chrono::milliseconds(500);

// What a launch's frozen queue held when the agent stopped.
struct QueueFreeze {
  std::string unjudgeable;  // why it could not be counted ("" when it could)
  bool late = false;        // ...because it filled too close to the stop: inconclusive
  std::size_t held = 0;     // sampled spans in it when the agent stopped
  std::size_t passed = 0;   // sampled transactions that ended under the freeze and passed it
  std::chrono::system_clock::time_point frozen_from{};  // the freeze was read, plus a margin
  // The latest end of a held span that ended under the freeze
  // (frozen_from when none did): the queue still had room until then.
  std::chrono::system_clock::time_point filled_by{};
  // The end of the first sampled transaction that passed it: full from then on.
  std::chrono::system_clock::time_point full_from{};
  std::string describe() const {
    auto ms_after = [&](std::chrono::system_clock::time_point t) {
      return ms(std::chrono::duration<double, std::milli>(t - frozen_from).count());
    };
    return "the frozen queue held " + std::to_string(held) + " sampled spans when the agent stopped, the last "
           "taken in " + ms_after(filled_by) + " after the freeze applied; " + std::to_string(passed) +
           " passed it at once";
  }
};

// The registration that froze the queue (the latest with the freeze's delay).
const SentRegistration* freeze_registration(const SessionEvidence& s) {
  const SentRegistration* out = nullptr;
  for (const auto& r : facts(s).registrations)
    if (r.sent() && r.message.samples_delay_ms == scenario::kFreezeDelayMs) out = &r;
  return out;
}

// A steady-clock instant of the session on the system clock, by the pair of
// times the registration was sent at.
std::chrono::system_clock::time_point system_time(const SentRegistration& r, Clock::time_point t) {
  return r.at_system + std::chrono::duration_cast<std::chrono::system_clock::duration>(t - r.at);
}

QueueFreeze measure_freeze(const SessionEvidence& s) {
  QueueFreeze q;
  const SentRegistration* freeze = freeze_registration(s);
  if (!freeze || !freeze->taken_up_at || !s.stop_requested_at) {
    q.unjudgeable = !freeze ? "the registration that freezes the queue could not be sent"
                    : !freeze->taken_up_at ? "the agent was never seen reading the registration that freezes its queue"
                                           : "the agent was not stopped by the session";
    return q;
  }
  const auto stop = *s.stop_requested_at;
  q.frozen_from = q.filled_by = *freeze->taken_up_at + kMargin;
  // Target::stop's words for an agent that outlived its grace after SIGTERM:
  // killed, it never exported what its queue held (a starved machine).
  if (s.target_exit && s.target_exit->find("of SIGTERM; killed") != std::string::npos) {
    q.late = true;
    q.unjudgeable = "the agent was killed before it could export what its queue held (" + *s.target_exit + ")";
    return q;
  }
  // Spans held or passed under the freeze may be in an export the receiver
  // shows lost (otlp::ExportLosses): a place would look empty, or taken.
  if (s.export_losses.lost_after(q.frozen_from)) {
    q.late = true;
    q.unjudgeable = "exports of the agent were lost on the way to the receiver after the freeze applied (" +
                    s.export_losses.describe() + "), so its spans cannot all be counted";
    return q;
  }
  SpanIndex spans(s);
  std::optional<std::chrono::system_clock::time_point> first_passed;
  std::vector<std::chrono::system_clock::time_point> unclear;  // ends of those it cannot tell
  const otlp::ReceivedSpan* departed = nullptr;
  // Spans of every kind: a conforming agent holds transactions only, but one
  // that defers child spans too (DEFER-05's other half) gives them places
  // alike in both launches. Only a transaction passing shows the queue full.
  for (const auto& t : spans.spans()) {
    auto end = SpanIndex::end_time(t);
    if (!spans.sampled(t) || end + kMargin >= stop) continue;  // ended as the agent was stopped
    const double hold = spans.held_at_least_ms(t);
    const bool at_stop = t.received_at_system >= stop, under_freeze = end > q.frozen_from;
    if (hold >= kFrozenHoldMs && at_stop) {
      ++q.held;
      if (under_freeze) q.filled_by = std::max(q.filled_by, end);
    } else if (hold >= kFrozenHoldMs && under_freeze) {
      if (!departed) departed = &t;
    } else if (under_freeze && !at_stop) {
      if (!spans.is_transaction(t)) continue;
      ++q.passed;
      first_passed = first_passed ? std::min(*first_passed, end) : end;
    } else if (under_freeze) {
      unclear.push_back(end);
    }
  }
  if (departed) {
    q.unjudgeable = "the queue did not stay frozen: a span that ended under the freeze was exported before "
                    "the agent stopped, held at least " + ms(spans.held_at_least_ms(*departed)) +
                    ", although samples-delay-ms was " + std::to_string(scenario::kFreezeDelayMs) + " (DEFER-02)";
    return q;
  }
  if (first_passed) q.full_from = *first_passed;
  if (!first_passed) {
    q.unjudgeable = "the queue never filled: no sampled transaction that ended under the freeze was exported before "
                    "the agent stopped (" + std::to_string(q.held + unclear.size()) + " ended under it; BUFFER_SIZE=" +
                    std::to_string(scenario::kFreezeQueueSize) + ", see CONF-05)";
    return q;
  }
  // Once one passed, the frozen queue was full for good: only those that
  // ended before then could have been in it.
  auto before_full = std::count_if(unclear.begin(), unclear.end(), [&](auto end) { return end < *first_passed; });
  if (before_full) {
    q.late = true;
    q.unjudgeable = "the queue filled too close to the stop to count: " + std::to_string(before_full) +
                    " sampled spans that ended before it was full were exported only when the agent stopped, "
                    "witnessed held less than " + ms(kFrozenHoldMs) + " (" + q.describe() + ")";
  }
  return q;
}

class DeferProbe final : public Probe {
 public:
  std::string name() const override { return "defer"; }
  std::vector<std::string> requirements() const override {
    return {"DEFER-01", "DEFER-02", "DEFER-03", "DEFER-04", "DEFER-05", "DEFER-06", "DEFER-07"};
  }
  // DEFER-04: a handful of witnessed transactions, not one.
  std::size_t minimum_evidence(const std::string& requirement) const override {
    return requirement == "DEFER-04" ? 5 : 1;
  }
  std::vector<std::string> sessions() const override {
    return {kEnabledSession, kDisabledSession, kSmallQueueSession, kUnsampledSession, kAllSampledSession};
  }
  // The enabled session's holds against the disabled session's baseline;
  // DEFER-05 adds the unsampled and all-sampled sessions' frozen queues.
  std::vector<std::string> sessions_for(const std::string& requirement) const override {
    if (requirement == "DEFER-04") return {kDisabledSession};
    if (requirement == "DEFER-06" || requirement == "DEFER-07") return {kSmallQueueSession};
    if (requirement == "DEFER-05")
      return {kEnabledSession, kDisabledSession, kUnsampledSession, kAllSampledSession};
    return {kEnabledSession, kDisabledSession};
  }

  std::vector<Finding> judge(const SessionSet& sessions) const override {
    std::vector<Finding> out;
    if (const SessionEvidence* s = sessions.find(kEnabledSession)) {
      judge_enabled(*s, sessions.find(kDisabledSession), out);
    } else {
      for (auto& f : not_run({"DEFER-01", "DEFER-02", "DEFER-03", "DEFER-05"})) out.push_back(f);
    }
    if (const SessionEvidence* u = sessions.find(kUnsampledSession))
      merge_unsampled(judge_unsampled(*u, sessions.find(kAllSampledSession)), out);
    if (const SessionEvidence* s = sessions.find(kDisabledSession))
      out.push_back(judge_disabled(*s));
    else
      out.push_back(not_run({"DEFER-04"}, "needs a launch with the feature disabled").front());
    if (const SessionEvidence* s = sessions.find(kSmallQueueSession)) {
      out.push_back(judge_full_queue(*s));
      out.push_back(judge_warning(*s));
    } else {
      for (auto& f : not_run({"DEFER-06", "DEFER-07"}, "needs a launch with a small queue")) out.push_back(f);
    }
    return out;
  }

 private:
  // What the enabled session's spans showed, span by span (tally_enabled).
  struct EnabledHolds {
    // A hold is a lower bound (a starved process ends few spans to witness
    // it), the arrival an upper bound: "not deferred" is certain only when the
    // span arrived within half its delay; otherwise it is merely unproven.
    std::size_t judged = 0, immediate = 0, certainly_immediate = 0;
    const otlp::ReceivedSpan* immediate_example = nullptr;
    std::vector<double> unregistered, unregistered_arrivals;
    std::size_t children = 0, deferred_children = 0;
    double shortest_child_delay = 1e9;
    std::vector<double> child_arrivals, long_delay_txn_holds;
    const otlp::ReceivedSpan* child_example = nullptr;
  };

  // Children and transactions are judged by how long the agent held them
  // (SpanIndex::held_at_least_ms: export order, not arrival time, so an
  // exporter batching every 5 s or a starved receiver looks like no deferral).
  // Counts that a conforming agent could produce through noise alone are
  // measured against the session's baseline and answered with an error.
  static void judge_enabled(const SessionEvidence& s, const SessionEvidence* disabled, std::vector<Finding>& out) {
    SpanIndex spans(s);
    const EnabledHolds holds = tally_enabled(s, spans);
    // The baseline of never-deferred spans: the disabled session's (nothing is
    // deferred there), else this session's children (DEFER-05 judges those).
    SpanIndex off_spans = disabled ? SpanIndex(*disabled) : SpanIndex(std::vector<otlp::ReceivedSpan>{});
    auto baseline = disabled ? baseline_of(*disabled, off_spans, true) : baseline_of(s, spans, false);
    baseline.run_queue = s.run_queue_wait;
    out.push_back(judge_transactions_deferred(holds, spans, baseline));
    out.push_back(judge_registered_delays(s, spans, baseline));
    out.push_back(judge_default_delay(holds, spans, baseline));
    out.push_back(judge_children_prompt(holds, spans, baseline, disabled != nullptr));
  }

  // Each span of the enabled session that ended while a delay was in force:
  // children under a long delay, sampled transactions, and those that ended
  // before the first registration.
  static EnabledHolds tally_enabled(const SessionEvidence& s, const SpanIndex& spans) {
    EnabledHolds h;
    auto regs = facts(s).registrations;
    auto first_registration = regs.empty() ? std::chrono::system_clock::time_point::max() : regs.front().at_system;
    for (const auto& sp : spans.spans()) {
      auto end = SpanIndex::end_time(sp);
      auto delay = delay_in_force(s, end, kMargin);
      if (!delay) continue;
      double d = spans.held_at_least_ms(sp);
      if (spans.is_child(sp)) {
        if (*delay >= 600) {
          ++h.children;
          h.child_arrivals.push_back(SpanIndex::export_delay_ms(sp));
          h.shortest_child_delay = std::min(h.shortest_child_delay, *delay / 2.0);
          if (d >= *delay / 2.0) {
            ++h.deferred_children;
            if (!h.child_example) h.child_example = &sp;
          }
        }
        continue;
      }
      if (!spans.is_transaction(sp) || !spans.sampled(sp)) continue;  // neither: its parent may be in a lost export
      if (*delay >= 600) h.long_delay_txn_holds.push_back(d);
      if (*delay >= scenario::kFirstDelayMs) tally_transaction_hold(sp, d, *delay, spans, h);
      if (end + kMargin < first_registration) {
        h.unregistered.push_back(d);
        h.unregistered_arrivals.push_back(SpanIndex::export_delay_ms(sp));
      }
    }
    return h;
  }

  // A sampled transaction held at least `held` ms under a delay of `delay` ms.
  static void tally_transaction_hold(const otlp::ReceivedSpan& sp, double held, double delay, const SpanIndex& spans,
                                     EnabledHolds& h) {
    // Held short by export order, but too few spans ended meanwhile to
    // show a longer hold, and not certain by arrival: no evidence.
    const bool certain_by_arrival = SpanIndex::export_delay_ms(sp) < delay / 2.0;
    if (held < delay / 2.0 && !certain_by_arrival &&
        !spans.hold_witnessed(sp, std::chrono::milliseconds(static_cast<long long>(held)),
                              std::chrono::milliseconds(static_cast<long long>(delay / 2.0))))
      return;
    ++h.judged;
    if (held < delay / 2.0) {
      ++h.immediate;
      bool certain = SpanIndex::export_delay_ms(sp) < delay / 2.0;
      h.certainly_immediate += certain;
      if (!h.immediate_example || (certain && SpanIndex::export_delay_ms(*h.immediate_example) >= delay / 2.0))
        h.immediate_example = &sp;
    }
  }

  // DEFER-01: sampled transactions are held, most certainly so.
  static Finding judge_transactions_deferred(const EnabledHolds& h, const SpanIndex& spans, const TimingBaseline& baseline) {
    if (!h.judged) return not_seen("DEFER-01", "no sampled transaction was exported while a delay tracecorr knows was in force");
    if (h.certainly_immediate * 2 >= h.judged)
      return violated("DEFER-01", std::to_string(h.certainly_immediate) + " of " + std::to_string(h.judged) +
                                      " transactions were exported without deferral",
                      {span_evidence(*h.immediate_example, "held for the delay after it ended",
                                     "arrived " + ms(SpanIndex::export_delay_ms(*h.immediate_example)) + " after it ended")});
    if (h.immediate)
      return kit_error("DEFER-01", std::to_string(h.immediate) + " of " + std::to_string(h.judged) +
                                       " transactions look held less than half their delay (" +
                                       std::to_string(h.certainly_immediate) + " certainly, by their arrival): "
                                       "too few to call the agent non-deferring, too many to pass: " +
                                       baseline.describe(),
                       {span_evidence(*h.immediate_example, "held for the delay after it ended",
                                      "held " + ms(spans.held_at_least_ms(*h.immediate_example)) + ", arrived " +
                                          ms(SpanIndex::export_delay_ms(*h.immediate_example)) + " after it ended")});
    return met("DEFER-01", h.judged, std::to_string(h.judged) + " transactions, all deferred" + spans.flags_note());
  }

  // DEFER-02: each judged registration's delay, by the median of its window.
  static Finding judge_registered_delays(const SessionEvidence& s, const SpanIndex& spans, const TimingBaseline& baseline) {
    std::size_t windows = 0;
    std::optional<Finding> bad;
    for (const auto& w : registration_windows(s, kMargin)) {
      auto e = effect_of(w, spans);
      if (e.transaction_delays_ms.empty()) continue;
      ++windows;
      if (!bad) bad = judge_registration_window(w, e, baseline);
    }
    if (bad) return *bad;
    return windows ? met("DEFER-02", windows, std::to_string(windows) + " registrations' delays honoured" + spans.flags_note())
                   : not_seen("DEFER-02", "no transaction ended while a registration was in force");
  }

  // One registration's window: its transactions' median hold against its
  // samples-delay-ms; nothing when honoured.
  static std::optional<Finding> judge_registration_window(const RegistrationWindow& w, const RegistrationEffect& e,
                                                          const TimingBaseline& baseline) {
    double m = median(e.transaction_delays_ms);
    double want = w.registration.message.samples_delay_ms;
    double late = want + kLateSlackMs + baseline.quantile(0.95);
    const std::string after = "after a registration with samples-delay-ms " + std::to_string(w.registration.message.samples_delay_ms);
    // Held too long while never-deferred spans were held half as long: the
    // machine, not the agent, may have held them. Too short is never noise.
    if (m > late && baseline.too_noisy_for(want))
      return kit_error("DEFER-02", after + " transactions were held " + ms(m) +
                                       " (median), but the session is too noisy to tell: " + baseline.describe());
    // Too short: holds are lower bounds (a starved agent ends few spans to
    // witness them); certain only when the arrivals, upper bounds, say so too.
    if (m < want - kEarlySlackMs && median(e.transaction_arrivals_ms) >= want - kEarlySlackMs)
      return kit_error("DEFER-02", after + " transactions were held at least " + ms(m) + " (median) but arrived " +
                                       ms(median(e.transaction_arrivals_ms)) + " after their end (median): "
                                       "too few spans ended meanwhile to tell; " + baseline.describe());
    if (m < want - kEarlySlackMs || m > late)
      return violated("DEFER-02", after + ", transactions were held " + ms(m) + " (median)",
                      {text_evidence("median hold of " + std::to_string(e.transaction_delays_ms.size()) + " transactions",
                                     ms(want - kEarlySlackMs) + " .. " + ms(late), ms(m) + "; " + baseline.describe())});
    return std::nullopt;
  }

  // DEFER-03: before any registration, the default delay.
  static Finding judge_default_delay(const EnabledHolds& h, const SpanIndex& spans, const TimingBaseline& baseline) {
    if (h.unregistered.empty()) return not_applicable("DEFER-03", "no transaction ended before the first registration");
    double m = median(h.unregistered);
    double want = static_cast<double>(elastic_v1::spec::kDefaultDelayMs);
    double late = want + kLateSlackMs + baseline.quantile(0.95);
    if (m > late && baseline.too_noisy_for(want))
      return kit_error("DEFER-03", "before any registration transactions were held " + ms(m) +
                                       " (median), but the session is too noisy to tell: " + baseline.describe());
    if (m < want - kEarlySlackMs && median(h.unregistered_arrivals) >= want - kEarlySlackMs)
      return kit_error("DEFER-03", "before any registration transactions were held at least " + ms(m) +
                                       " (median) but arrived " + ms(median(h.unregistered_arrivals)) +
                                       " after their end (median): too few spans ended meanwhile to tell; " +
                                       baseline.describe());
    if (m < want - kEarlySlackMs || m > late)
      return violated("DEFER-03", "before any registration transactions were held " + ms(m) + " (median)",
                      {text_evidence("median hold of " + std::to_string(h.unregistered.size()) +
                                         " transactions before registration",
                                     ms(want - kEarlySlackMs) + " .. " + ms(late), ms(m) + "; " + baseline.describe())});
    return met("DEFER-03", h.unregistered.size(),
               "median hold " + ms(m) + " over " + std::to_string(h.unregistered.size()) + " transactions" + spans.flags_note());
  }

  // DEFER-05, children. Export order shows children held behind others; a
  // delay applied to every span alike only shows in arrival times, against
  // the disabled session's (nothing deferred there, same exporter).
  // Unsampled transactions are never exported: judge_unsampled sees that
  // half through the places they take in a frozen queue.
  static Finding judge_children_prompt(const EnabledHolds& h, const SpanIndex& spans, const TimingBaseline& baseline,
                                       bool against_disabled) {
    if (!h.children) return not_applicable("DEFER-05", "no child span ended while a long delay was in force");
    if (against_disabled && !baseline.arrival_ms.empty())
      if (auto absolute = judge_children_arrival(h, baseline)) return *absolute;
    if (h.deferred_children * 2 >= h.children)
      return violated("DEFER-05", std::to_string(h.deferred_children) + " of " + std::to_string(h.children) + " child spans were deferred",
                      {span_evidence(*h.child_example, "exported promptly (not deferred)",
                                     "held " + ms(spans.held_at_least_ms(*h.child_example)) + "; " + baseline.describe())});
    if (h.deferred_children && baseline.share_at_least(h.shortest_child_delay) * static_cast<double>(h.children) <
                                   static_cast<double>(h.deferred_children))
      return kit_error("DEFER-05", std::to_string(h.deferred_children) + " of " + std::to_string(h.children) +
                                       " child spans look held, more than the baseline explains but too few to "
                                       "call them deferred: " + baseline.describe());
    return met("DEFER-05", h.children, std::to_string(h.children) + " child spans exported promptly" +
                                           (h.deferred_children ? " (" + std::to_string(h.deferred_children) +
                                                                      " late ones within the baseline: " +
                                                                      baseline.describe() + ")"
                                                                : std::string()));
  }

  // DEFER-05 by arrival: the children's arrivals shifted against the disabled
  // session's baseline; nothing when the shift does not tell.
  static std::optional<Finding> judge_children_arrival(const EnabledHolds& h, const TimingBaseline& baseline) {
    double shift = median(h.child_arrivals) - baseline.arrival_quantile(0.5);
    double spread = baseline.arrival_quantile(0.9) - baseline.arrival_quantile(0.1);
    std::string figures = "child spans arrived " + ms(median(h.child_arrivals)) + " (median, n=" +
                          std::to_string(h.children) + ") after their end; " + baseline.describe();
    // Transactions held well behind the children that ended with them show
    // the children did not wait in the same queue.
    bool children_ahead = !h.long_delay_txn_holds.empty() && median(h.long_delay_txn_holds) >= h.shortest_child_delay;
    // The baseline comes from another session: a target starved of CPU in
    // this one delays everything, and cannot be told from deferral.
    const bool starved = baseline.run_queue && baseline.run_queue->starved();
    if (shift >= h.shortest_child_delay && spread < h.shortest_child_delay && !starved)
      return violated("DEFER-05", "child spans arrived " + ms(shift) + " later (median) than spans with the "
                                  "feature off: they were deferred",
                      {text_evidence("child spans' arrival after their end, against the disabled session's",
                                     "no later than the baseline", figures)});
    if (shift >= h.shortest_child_delay && (!children_ahead || starved))
      return kit_error("DEFER-05", "child spans arrived " + ms(shift) + " later than the baseline, which is too "
                                   "noisy to tell (p10..p90 spread " + ms(spread) + "): " + figures);
    return std::nullopt;
  }

  // DEFER-05, unsampled transactions: the all-sampled launch's frozen queue
  // against the unsampled launch's (see QueueFreeze above for why).
  static Finding judge_unsampled(const SessionEvidence& u, const SessionEvidence* all) {
    const SentRegistration* freeze = freeze_registration(u);
    if (!freeze) return not_applicable("DEFER-05", "");  // no socket: the other DEFER findings say so
    if (!u.records)
      return not_applicable("DEFER-05", "its unsampled half cannot be observed: the records could not be read, so "
                                        "which transactions were unsampled is unknown");
    std::size_t unsampled = 0;
    for (const auto& t : u.records->contexts) unsampled += !t.sampled();
    if (!unsampled)
      return not_applicable("DEFER-05", std::string("its unsampled half cannot be observed: the agent published no "
                                                    "unsampled transaction with OTEL_TRACES_SAMPLER=traceidratio ") +
                                            scenario::kUnsampledRatio);
    if (!all) return not_applicable("DEFER-05", "its unsampled half needs the all-sampled launch, which did not run");
    auto capacity = measure_freeze(*all);
    if (!capacity.unjudgeable.empty()) return unjudged("the all-sampled launch", capacity, *all);
    if (!capacity.held)
      return not_applicable("DEFER-05", "its unsampled half cannot be observed: in the all-sampled launch no "
                                        "transaction held by the frozen queue was exported when the agent stopped, "
                                        "so what a queue holds cannot be counted (" + capacity.describe() + ")");
    auto q = measure_freeze(u);
    if (!q.unjudgeable.empty()) return unjudged("the unsampled launch", q, u);
    // Unsampled transactions that ended while the unsampled launch's queue
    // had room (under the freeze, before the last sampled one it took in):
    // an agent that lets them in took them. And those that could be in it
    // when it was full: ended from shortly before the freeze was read (the
    // flush delay may not have let them out yet) until the queue was full.
    std::size_t chances = 0, candidates = 0;
    const auto taken_up = *freeze->taken_up_at;
    for (const auto& t : u.records->contexts) {
      if (t.sampled()) continue;
      auto ended = system_time(*freeze, t.last_seen);
      chances += ended > q.frozen_from && ended + kRecordSlack < q.filled_by;
      candidates += ended > taken_up - kFlushMargin && ended < q.full_from;
    }
    const std::string figures = "all-sampled launch: " + capacity.describe() + "; unsampled launch: " + q.describe() +
                                ", " + std::to_string(chances) + " unsampled transactions ended while it had room, " +
                                std::to_string(candidates) + " before it was full";
    const std::string label = "sampled spans in the frozen queue when the agent stopped (BUFFER_SIZE=" +
                              std::to_string(scenario::kFreezeQueueSize) + ", samples-delay-ms " +
                              std::to_string(scenario::kFreezeDelayMs) + ")";
    if (q.held > capacity.held)
      return kit_error("DEFER-05", "its unsampled half could not be judged: the unsampled launch's frozen queue held "
                                   "more sampled spans than the all-sampled launch's, so the queue's size "
                                   "differs between launches of the same configuration; " + figures);
    // Fewer: the places the sampled ones lack were taken by transactions
    // never exported, which ended before the queue was full.
    if (q.held < capacity.held && !candidates)
      return kit_error("DEFER-05", "its unsampled half could not be judged: the unsampled launch's frozen queue held "
                                   "fewer sampled spans than the all-sampled launch's, but no unsampled "
                                   "transaction ended before it was full to have taken the other places; " + figures);
    if (q.held < capacity.held)
      return violated("DEFER-05", std::to_string(capacity.held - q.held) + " of the " +
                                      std::to_string(capacity.held) + " places of the frozen queue held no sampled "
                                      "span with unsampled transactions about: unsampled transactions were queued",
                      {text_evidence(label, std::to_string(capacity.held) + ", as with every transaction sampled",
                                     std::to_string(q.held) + "; " + figures)});
    // As many: only a pass when unsampled ones had the chance to take a place.
    if (!chances)
      return kit_error("DEFER-05", "its unsampled half could not be judged: no unsampled transaction ended while "
                                   "the unsampled launch's frozen queue had room, so none had the chance to take a "
                                   "place; " + figures);
    return met("DEFER-05", q.held, "unsampled transactions took no place in the deferral queue (its " +
                                       std::to_string(q.held) + " places held sampled spans, as with every "
                                       "transaction sampled, though " + std::to_string(chances) +
                                       " unsampled ones ended while it had room)" + SpanIndex(u).flags_note());
  }

  // A launch whose frozen queue could not be counted: when time was short (a
  // starved or slow target) the answer is inconclusive, with the run queue's
  // figures; when the agent did not freeze or fill it, the half is not
  // observable on this agent.
  static Finding unjudged(const std::string& launch, const QueueFreeze& q, const SessionEvidence& s) {
    const bool starved = s.run_queue_wait && s.run_queue_wait->starved();
    if (q.late || starved)
      return kit_error("DEFER-05", "its unsampled half could not be judged: in " + launch + " " + q.unjudgeable +
                                       (s.run_queue_wait ? "; " + s.run_queue_wait->describe() : std::string()));
    return not_applicable("DEFER-05", "its unsampled half cannot be observed: in " + launch + " " + q.unjudgeable);
  }

  // The children's finding and the unsampled half's, as one DEFER-05.
  static void merge_unsampled(Finding unsampled, std::vector<Finding>& out) {
    auto it = std::find_if(out.begin(), out.end(), [](const Finding& f) { return f.requirement == "DEFER-05"; });
    if (it == out.end()) {
      out.push_back(std::move(unsampled));
      return;
    }
    Finding& children = *it;
    // A half that could not be judged leaves DEFER-05 inconclusive: an agent
    // that breaks only that half would otherwise pass on the other.
    if (unsampled.outcome == Finding::Outcome::KitError && children.outcome == Finding::Outcome::Met) {
      unsampled.reason = "inconclusive: " + children.reason + "; but " + unsampled.reason;
      children = std::move(unsampled);
      return;
    }
    if (unsampled.outcome == Finding::Outcome::Violated || children.outcome == Finding::Outcome::NotApplicable) {
      if (unsampled.outcome != Finding::Outcome::NotApplicable || !unsampled.reason.empty()) children = unsampled;
      return;
    }
    if (children.outcome == Finding::Outcome::Met) {
      if (unsampled.outcome == Finding::Outcome::Met) {
        children.evidence_count += unsampled.evidence_count;
        children.reason += "; " + unsampled.reason;
      } else if (!unsampled.reason.empty()) {
        children.reason += " (" + unsampled.reason + ")";
      }
    }
  }

  // DEFER-04: with the feature off, transactions are handed over as soon as
  // they end, like the session's child spans (the baseline).
  static Finding judge_disabled(const SessionEvidence& s) {
    SpanIndex spans(s);
    auto baseline = baseline_of(s, spans, false);
    auto stop = s.stop_requested_at;
    // A hold is measured by the spans that ended after the transaction and
    // were exported before it: with none ending in the second after it (a
    // starved target), "handed over at once" is unwitnessed, not proven.
    auto witnessed = [&](const otlp::ReceivedSpan& t) {
      return spans.hold_witnessed(t, std::chrono::milliseconds(static_cast<long long>(kImmediateMs)),
                                  std::chrono::milliseconds(elastic_v1::spec::kDefaultDelayMs) - kMargin);
    };
    std::size_t n = 0, late = 0, unwitnessed = 0;
    const otlp::ReceivedSpan* example = nullptr;
    for (const auto* t : spans.transactions()) {
      if (stop && t->received_at_system >= *stop) continue;  // flushed by the shutdown: no evidence either way
      const bool held = spans.held_at_least_ms(*t) >= kImmediateMs;
      if (!held && !witnessed(*t)) {
        ++unwitnessed;
        continue;
      }
      ++n;
      if (held) {
        ++late;
        if (!example) example = t;
      }
    }
    if (!n && unwitnessed)
      return kit_error("DEFER-04", "inconclusive: " + std::to_string(unwitnessed) +
                                       " transactions exported, but too few spans ended in the second after any of "
                                       "them to witness how long it was held: " + baseline.describe());
    if (!n) return not_applicable("DEFER-04", "no transaction was exported with the feature disabled");
    if (late * 2 >= n)
      return violated("DEFER-04", std::to_string(late) + " of " + std::to_string(n) +
                                      " transactions were held back with the feature disabled",
                      {span_evidence(*example, "handed over at once",
                                     "held " + ms(spans.held_at_least_ms(*example)) + "; " + baseline.describe())});
    if (late && baseline.share_at_least(kImmediateMs) * static_cast<double>(n) < static_cast<double>(late))
      return kit_error("DEFER-04", std::to_string(late) + " of " + std::to_string(n) +
                                       " transactions look held with the feature off, more than the baseline explains "
                                       "but too few to call them deferred: " + baseline.describe());
    return met("DEFER-04", n, std::to_string(n) + " transactions exported at once" +
                                  (unwitnessed ? " (" + std::to_string(unwitnessed) + " more not witnessed)" : std::string()) +
                                  (late ? " (" + std::to_string(late) + " late ones within the baseline: " +
                                              baseline.describe() + ")"
                                        : std::string()));
  }

  // DEFER-06: with BUFFER_SIZE=2 and a 4 s delay, every transaction after the
  // first two must still reach the exporter at once.
  static Finding judge_full_queue(const SessionEvidence& s) {
    const RecordEvidence* records = s.records ? &*s.records : nullptr;
    auto regs = facts(s).registrations;
    if (!records || regs.empty()) return not_applicable("DEFER-06", "no registration or no readable records in the small-queue session");
    SpanIndex spans(s);
    auto seen = records->contexts;
    if (seen.empty()) return not_applicable("DEFER-06", "no transaction seen");
    auto latest = seen.front().last_seen;
    for (const auto& t : seen) latest = std::max(latest, t.last_seen);
    auto from = regs.front().at + std::chrono::milliseconds(300);
    auto stopped = s.stop_requested_at.value_or(std::chrono::system_clock::time_point::max());
    // A transaction missing from what arrived may have been in an export the
    // receiver shows lost after it was last seen (otlp::ExportLosses): not
    // evidence that the agent dropped it.
    std::size_t ended = 0, exported = 0, prompt = 0, maybe_lost = 0;
    const watch::SeenContext* missing_example = nullptr;
    for (const auto& t : seen) {
      if (!t.sampled() || t.last_seen < from || t.last_seen + std::chrono::milliseconds(600) > latest) continue;
      ++ended;
      if (const auto* sp = spans.transaction(t.trace_id, t.context_id)) {
        ++exported;
        if (spans.held_at_least_ms(*sp) < 1500 && sp->received_at_system < stopped) ++prompt;
      } else if (s.export_losses.lost_after(t.last_seen)) {
        ++maybe_lost;
      } else if (!missing_example) {
        missing_example = &t;
      }
    }
    if (ended < scenario::kSmallQueueSize + 2) return not_seen("DEFER-06", "too few transactions ended to fill the queue");
    // Spans arriving when the session stopped the agent count too: an agent
    // forwards what it still holds when it shuts down. A transaction never
    // exported at all was dropped -- unless the agent exported nothing
    // whatsoever, which a queue that never filled and is not flushed on
    // shutdown would look like just as well.
    if (spans.transactions().empty())
      return not_applicable("DEFER-06", "the agent exported no transaction at all in the small-queue session, not even "
                                        "when it was stopped: dropped and still-held transactions cannot be told apart");
    std::size_t missing = ended - exported - maybe_lost;
    if (missing > scenario::kSmallQueueSize)
      return violated("DEFER-06", std::to_string(missing) + " of " + std::to_string(ended) +
                                      " transactions that ended with the queue full never reached the exporter, not "
                                      "even when the agent was stopped",
                      {text_evidence("transaction " + to_hex(missing_example->context_id) + " of trace " +
                                         to_hex(missing_example->trace_id),
                                     "exported at once (queue full)", "never exported")});
    if (missing + maybe_lost > scenario::kSmallQueueSize)
      return kit_error("DEFER-06", "inconclusive: " + std::to_string(missing + maybe_lost) + " of " +
                                       std::to_string(ended) + " transactions that ended with the queue full never "
                                       "arrived, more than the queue of " + std::to_string(scenario::kSmallQueueSize) +
                                       " could hold, but " + std::to_string(maybe_lost) + " of them may have been in "
                                       "exports the receiver shows lost (" + s.export_losses.describe() + ")");
    if (!prompt)
      return not_applicable("DEFER-06", "every transaction was held until the agent stopped: the queue never filled, "
                                        "so BUFFER_SIZE=2 was not honoured (CONF-05)");
    return met("DEFER-06", exported, std::to_string(exported) + " of " + std::to_string(ended) +
                               " transactions exported while the queue was full");
  }

  // DEFER-07: recognised by when it is printed, not by its words: a new line
  // on the agent's stdout or stderr within kWarningWithin of the first
  // overflow seen (the end of the first transaction handed over at once while
  // the small queue was full). New: not among the agent's routine output, the
  // lines it printed before any span of the session ended (before its queue
  // could fill). A warning repeated since counts (an agent warning once a
  // second while the queue stays full): the first overflow seen may come after
  // the first there was, its transaction's export lost or, on a starved
  // machine, its hand-over too slow to be seen as prompt.
  static Finding judge_warning(const SessionEvidence& s) {
    if (!s.launched) return not_applicable("DEFER-07", "the agent's output is only visible when tracecorr launches it");
    auto regs = facts(s).registrations;
    if (regs.empty()) return not_applicable("DEFER-07", "no registration could be sent, so the queue never filled");
    SpanIndex spans(s);
    auto overflow = first_overflow(spans, s.stop_requested_at.value_or(std::chrono::system_clock::time_point::max()));
    if (!overflow.at)
      return not_applicable("DEFER-07", "no transaction was handed over at once with the small queue full, so no "
                                        "overflow was seen to time a warning against");
    const auto window_ms = static_cast<double>(kWarningWithin.count());
    const auto routine = routine_output(s, spans);
    const OutputLine* first_new = nullptr;  // the first new line after the overflow, however late
    for (const auto& l : s.target_output_lines)
      if (l.at >= *overflow.at && !routine.count(l.text)) {
        first_new = &l;
        break;
      }
    const auto after = [&](const OutputLine& l) { return std::chrono::duration<double, std::milli>(l.at - *overflow.at).count(); };
    const std::string passed = std::to_string(overflow.prompt) + " transactions passed the full queue";
    if (first_new && after(*first_new) <= window_ms)
      return met("DEFER-07", 1, "a new line " + ms(after(*first_new)) + " after the first overflow (" + passed +
                                    "): \"" + first_new->text.substr(0, 160) + "\"" + spans.flags_note());
    // Late, by no more than the target's threads waited to run: the machine
    // may have held the warning back. Not a verdict on the agent.
    const double late_by = first_new ? after(*first_new) - window_ms : 0;
    if (first_new && s.run_queue_wait && s.run_queue_wait->max_thread_ms >= late_by)
      return kit_error("DEFER-07", "inconclusive: a new line came " + ms(after(*first_new)) + " after the first overflow (" +
                                       passed + "), " + ms(late_by) + " later than " + ms(window_ms) +
                                       ", and the target's threads waited up to that long to run: " +
                                       s.run_queue_wait->describe());
    std::string shown;
    for (const auto& l : s.target_output_lines)
      if (l.at >= *overflow.at && shown.size() < 300) shown += l.text.substr(0, 120) + " | ";
    return violated("DEFER-07", "the queue overflowed (" + std::to_string(overflow.prompt) +
                                    " transactions passed it at once) and no new line was printed within " +
                                    ms(window_ms) + " of the first overflow",
                    {text_evidence("agent output (stdout and stderr) after the first overflow",
                                   "a new line within " + ms(window_ms),
                                   shown.empty() ? "(nothing)" : shown)});
  }

  struct Overflow {
    std::optional<std::chrono::system_clock::time_point> at;  // the earliest end of a prompt transaction
    std::size_t prompt = 0;                                   // sampled transactions handed over at once
  };
  // The queue of 2 fills within the first transactions (the default delay
  // applies from the start), so the first overflow can come before the
  // registration: any sampled transaction handed over in well under the
  // shortest delay in force (1000 ms default, then 4000 ms) passed it.
  static Overflow first_overflow(const SpanIndex& spans, std::chrono::system_clock::time_point stopped) {
    Overflow o;
    for (const auto* t : spans.transactions()) {
      if (!spans.sampled(*t) || t->received_at_system >= stopped || spans.held_at_least_ms(*t) >= kImmediateMs) continue;
      ++o.prompt;
      const auto end = SpanIndex::end_time(*t);
      o.at = o.at ? std::min(*o.at, end) : end;
    }
    return o;
  }

  // The texts the agent printed before any span of the session ended.
  static std::set<std::string> routine_output(const SessionEvidence& s, const SpanIndex& spans) {
    auto first_end = std::chrono::system_clock::time_point::max();
    for (const auto& sp : spans.spans()) first_end = std::min(first_end, SpanIndex::end_time(sp));
    std::set<std::string> routine;
    for (const auto& l : s.target_output_lines)
      if (l.at < first_end) routine.insert(l.text);
    return routine;
  }
};

}  // namespace

std::unique_ptr<Probe> make_defer_probe() { return std::make_unique<DeferProbe>(); }

}  // namespace tracecorr::elastic_v1

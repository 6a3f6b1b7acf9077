// DEFER: when ended transactions reach the exporter, measured as the time
// between a span's end and its arrival at tracecorr's receiver.
#include <algorithm>
#include <cctype>

#include "judging.hpp"
#include "probes.hpp"
#include "scenarios.hpp"
#include "tracecorr/spec_registry.hpp"

namespace tracecorr::conform {
namespace {

constexpr auto kMargin = std::chrono::milliseconds(150);
// Batching (OTEL_BSP_SCHEDULE_DELAY=50) and scheduling on a busy machine.
constexpr double kLateSlackMs = 600;
constexpr double kEarlySlackMs = 60;
// Below this an export was not deferred (the smallest delay judged is 300 ms).
constexpr double kImmediateMs = 400;

double median(std::vector<double> v) {
  std::nth_element(v.begin(), v.begin() + static_cast<long>(v.size() / 2), v.end());
  return v[v.size() / 2];
}

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

class DeferProbe final : public Probe {
 public:
  std::string name() const override { return "defer"; }
  std::vector<std::string> requirements() const override {
    return {"DEFER-01", "DEFER-02", "DEFER-03", "DEFER-04", "DEFER-05", "DEFER-06", "DEFER-07"};
  }
  std::vector<std::string> sessions() const override {
    return {kEnabledSession, kDisabledSession, kSmallQueueSession};
  }

  std::vector<Finding> judge(const SessionSet& sessions) const override {
    std::vector<Finding> out;
    if (const Session* s = sessions.find(kEnabledSession)) {
      judge_enabled(*s, out);
    } else {
      for (auto& f : not_run({"DEFER-01", "DEFER-02", "DEFER-03", "DEFER-05"})) out.push_back(f);
    }
    if (const Session* s = sessions.find(kDisabledSession))
      out.push_back(judge_disabled(*s));
    else
      out.push_back(not_run({"DEFER-04"}, "needs a launch with the feature disabled").front());
    if (const Session* s = sessions.find(kSmallQueueSession)) {
      out.push_back(judge_full_queue(*s));
      out.push_back(judge_warning(*s));
    } else {
      for (auto& f : not_run({"DEFER-06", "DEFER-07"}, "needs a launch with a small queue")) out.push_back(f);
    }
    return out;
  }

 private:
  static void judge_enabled(const Session& s, std::vector<Finding>& out) {
    SpanIndex spans(s.receiver().spans());
    auto regs = s.registrations();
    auto first_registration = regs.empty() ? std::chrono::system_clock::time_point::max() : regs.front().at_system;

    std::size_t judged = 0, immediate = 0;
    const otlp::ReceivedSpan* immediate_example = nullptr;
    std::vector<double> unregistered;
    std::size_t children = 0, deferred_children = 0;
    const otlp::ReceivedSpan* child_example = nullptr;
    for (const auto& sp : spans.spans()) {
      auto end = SpanIndex::end_time(sp);
      auto delay = s.delay_in_force(end, kMargin);
      if (!delay) continue;
      double d = SpanIndex::export_delay_ms(sp);
      if (!spans.is_transaction(sp)) {
        if (*delay >= 600) {
          ++children;
          if (d >= *delay / 2.0) {
            ++deferred_children;
            if (!child_example) child_example = &sp;
          }
        }
        continue;
      }
      if (!sp.sampled()) continue;
      if (*delay >= scenario::kFirstDelayMs) {
        ++judged;
        if (d < *delay / 2.0) {
          ++immediate;
          if (!immediate_example) immediate_example = &sp;
        }
      }
      if (end + kMargin < first_registration) unregistered.push_back(d);
    }
    if (!judged)
      out.push_back(not_applicable("DEFER-01", "no sampled transaction was exported"));
    else if (immediate)
      out.push_back(violated("DEFER-01", std::to_string(immediate) + " of " + std::to_string(judged) +
                                             " transactions were exported without deferral",
                             {span_evidence(*immediate_example, "exported no earlier than the delay after it ended",
                                            "exported " + ms(SpanIndex::export_delay_ms(*immediate_example)) +
                                                " after it ended")}));
    else
      out.push_back(met("DEFER-01", judged, std::to_string(judged) + " transactions, all deferred"));

    // DEFER-02: each judged registration's delay, by the median of its window.
    std::size_t windows = 0;
    std::optional<Finding> bad;
    for (const auto& w : registration_windows(s, kMargin)) {
      auto e = effect_of(w, spans);
      if (e.transaction_delays_ms.empty()) continue;
      ++windows;
      double m = median(e.transaction_delays_ms);
      double want = w.registration.message.samples_delay_ms;
      if ((m < want - kEarlySlackMs || m > want + kLateSlackMs) && !bad)
        bad = violated("DEFER-02", "after a registration with samples-delay-ms " + std::to_string(w.registration.message.samples_delay_ms) +
                                       ", transactions were deferred by " + ms(m) + " (median)",
                       {text_evidence("median export delay of " + std::to_string(e.transaction_delays_ms.size()) +
                                          " transactions",
                                      ms(want) + " .. " + ms(want + kLateSlackMs), ms(m))});
    }
    out.push_back(bad ? *bad
                      : windows ? met("DEFER-02", windows, std::to_string(windows) + " registrations' delays honoured")
                                : not_applicable("DEFER-02", "no transaction ended while a registration was in force"));
    // DEFER-03
    if (unregistered.empty())
      out.push_back(not_applicable("DEFER-03", "no transaction ended before the first registration"));
    else {
      double m = median(unregistered);
      double want = static_cast<double>(spec::kDefaultDelayMs);
      if (m < want - kEarlySlackMs || m > want + kLateSlackMs)
        out.push_back(violated("DEFER-03", "before any registration transactions were deferred by " + ms(m) + " (median)",
                               {text_evidence("median export delay of " + std::to_string(unregistered.size()) +
                                                  " transactions before registration",
                                              "1000 ms .. " + ms(want + kLateSlackMs), ms(m))}));
      else
        out.push_back(met("DEFER-03", unregistered.size(), "median " + ms(m) + " over " + std::to_string(unregistered.size()) + " transactions"));
    }
    // DEFER-05 (children; unsampled transactions are never exported over OTLP)
    if (!children)
      out.push_back(not_applicable("DEFER-05", "no child span ended while a long delay was in force"));
    else if (deferred_children)
      out.push_back(violated("DEFER-05", std::to_string(deferred_children) + " of " + std::to_string(children) + " child spans were deferred",
                             {span_evidence(*child_example, "exported promptly (not deferred)",
                                            "exported " + ms(SpanIndex::export_delay_ms(*child_example)) + " after it ended")}));
    else
      out.push_back(met("DEFER-05", children, std::to_string(children) +
                                        " child spans exported promptly (unsampled transactions are not exported over "
                                        "OTLP, so only child spans can be judged)"));
  }

  static Finding judge_disabled(const Session& s) {
    SpanIndex spans(s.receiver().spans());
    std::size_t n = 0, late = 0;
    const otlp::ReceivedSpan* example = nullptr;
    for (const auto* t : spans.transactions()) {
      ++n;
      if (SpanIndex::export_delay_ms(*t) >= kImmediateMs) {
        ++late;
        if (!example) example = t;
      }
    }
    if (!n) return not_applicable("DEFER-04", "no transaction was exported with the feature disabled");
    if (late)
      return violated("DEFER-04", std::to_string(late) + " of " + std::to_string(n) +
                                      " transactions were held back with the feature disabled",
                      {span_evidence(*example, "exported at once", "exported " + ms(SpanIndex::export_delay_ms(*example)) + " after it ended")});
    return met("DEFER-04", n, std::to_string(n) + " transactions exported at once");
  }

  // DEFER-06: with BUFFER_SIZE=2 and a 4 s delay, every transaction after the
  // first two must still reach the exporter at once.
  static Finding judge_full_queue(const Session& s) {
    const auto* records = s.records();
    auto regs = s.registrations();
    if (!records || regs.empty()) return not_applicable("DEFER-06", "no registration or no readable records in the small-queue session");
    SpanIndex spans(s.receiver().spans());
    auto seen = records->transactions();
    if (seen.empty()) return not_applicable("DEFER-06", "no transaction seen");
    auto latest = seen.front().last_seen;
    for (const auto& t : seen) latest = std::max(latest, t.last_seen);
    auto from = regs.front().at + std::chrono::milliseconds(300);
    auto stopped = s.stop_requested_at().value_or(std::chrono::system_clock::time_point::max());
    std::size_t ended = 0, exported = 0, prompt = 0;
    const SeenTransaction* missing_example = nullptr;
    for (const auto& t : seen) {
      if (!t.sampled() || t.last_seen < from || t.last_seen + std::chrono::milliseconds(600) > latest) continue;
      ++ended;
      if (const auto* sp = spans.transaction(t.trace_id, t.transaction_id)) {
        ++exported;
        if (SpanIndex::export_delay_ms(*sp) < 1500 && sp->received_at_system < stopped) ++prompt;
      } else if (!missing_example) {
        missing_example = &t;
      }
    }
    if (ended < scenario::kSmallQueueSize + 2) return not_applicable("DEFER-06", "too few transactions ended to fill the queue");
    // Spans arriving when the session stopped the agent count too: an agent
    // forwards what it still holds when it shuts down. A transaction never
    // exported at all was dropped -- unless the agent exported nothing
    // whatsoever, which a queue that never filled and is not flushed on
    // shutdown would look like just as well.
    if (spans.transactions().empty())
      return not_applicable("DEFER-06", "the agent exported no transaction at all in the small-queue session, not even "
                                        "when it was stopped: dropped and still-held transactions cannot be told apart");
    std::size_t missing = ended - exported;
    if (missing > scenario::kSmallQueueSize)
      return violated("DEFER-06", std::to_string(missing) + " of " + std::to_string(ended) +
                                      " transactions that ended with the queue full never reached the exporter, not "
                                      "even when the agent was stopped",
                      {text_evidence("transaction " + to_hex(missing_example->transaction_id) + " of trace " +
                                         to_hex(missing_example->trace_id),
                                     "exported at once (queue full)", "never exported")});
    if (!prompt)
      return not_applicable("DEFER-06", "every transaction was held until the agent stopped: the queue never filled, "
                                        "so BUFFER_SIZE=2 was not honoured (CONF-05)");
    return met("DEFER-06", exported, std::to_string(exported) + " of " + std::to_string(ended) +
                               " transactions exported while the queue was full");
  }

  static Finding judge_warning(const Session& s) {
    auto out = lower(s.target_output());
    bool warned = out.find("incomplete") != std::string::npos ||
                  (out.find("queue") != std::string::npos && out.find("full") != std::string::npos);
    if (s.registrations().empty()) return not_applicable("DEFER-07", "the queue was never filled");
    if (warned) return met("DEFER-07", "the agent printed a warning about the full queue");
    return violated("DEFER-07", "the queue filled up and the agent printed no warning",
                    {text_evidence("agent output (stdout and stderr)",
                                   "a line mentioning the full queue or incomplete correlation",
                                   out.empty() ? "(nothing)" : out.substr(0, 300))});
  }
};

}  // namespace

std::unique_ptr<Probe> make_defer_probe() { return std::make_unique<DeferProbe>(); }

}  // namespace tracecorr::conform

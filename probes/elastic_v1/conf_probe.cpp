// CONF: the three options, each observed in a launch that sets it.
#include <filesystem>

#include "tracecorr/stats.hpp"
#include "judging.hpp"
#include "probes.hpp"
#include "scenarios.hpp"

namespace tracecorr::elastic_v1 {

using namespace tracecorr::conform;
namespace {

// The shortest delay these sessions register (or the default, 1000 ms): a
// median hold of half of it or more is deferral.
constexpr double kDeferredMs = scenario::kFirstDelayMs / 2.0;

// Median hold (export order, SpanIndex::held_at_least_ms) of sampled
// transactions that ended in [from, until).
// With the child spans that ended in the same interval as the baseline: they
// are never deferred, so when they look held as long, the machine (a starved
// process) and not the agent's deferral is what the hold measures.
struct Holds {
  std::size_t n = 0;
  double median = 0;
  TimingBaseline children;
  bool deferred() const { return n && median >= kDeferredMs; }
  // The children explain the hold: too noisy to call it deferral.
  bool noisy() const { return children.size() && children.quantile(0.9) >= kDeferredMs / 2; }
  std::string figures() const {
    return "transactions held " + ms(median) + " (median of " + std::to_string(n) + "); child spans of the same "
           "interval: " + children.describe();
  }
};
Holds holds_between(const SpanIndex& spans, std::chrono::system_clock::time_point from,
                    std::chrono::system_clock::time_point until) {
  std::vector<double> d;
  Holds h;
  for (const auto& sp : spans.spans()) {
    auto end = SpanIndex::end_time(sp);
    if (end < from || end + kMargin >= until) continue;
    if (spans.is_child(sp)) {
      h.children.held_ms.push_back(spans.held_at_least_ms(sp));
      h.children.arrival_ms.push_back(SpanIndex::export_delay_ms(sp));
    } else if (spans.is_transaction(sp) && spans.sampled(sp)) {
      d.push_back(spans.held_at_least_ms(sp));
    }
  }
  h.n = d.size();
  if (d.empty()) return h;
  h.median = median(std::move(d));
  return h;
}
// A deferral that the session's own baseline cannot explain is a violation;
// one it can is an error naming the figures.
std::optional<Finding> judge_deferred(const std::string& id, const Holds& h, const std::string& what) {
  if (!h.deferred()) return std::nullopt;
  if (h.noisy()) return kit_error(id, what + ", but never-deferred spans were held about as long: too noisy to tell (" +
                                          h.figures() + ")");
  return violated(id, what + " (" + h.figures() + ")");
}
Holds holds_before(const SpanIndex& spans, std::chrono::system_clock::time_point until) {
  return holds_between(spans, std::chrono::system_clock::time_point::min(), until);
}

std::chrono::system_clock::time_point until_stop(const SessionEvidence& s) {
  return s.stop_requested_at.value_or(std::chrono::system_clock::time_point::max());
}

// Correlations sent for `id` that must be ignored; the result's count is the
// (transaction, stack id) pairs judged.
Finding expect_ignored(const std::string& id, const SessionEvidence& s, const SpanIndex& spans, const std::string& when) {
  // The mismatches point into `sent`: it must outlive the evidence built from them.
  auto sent = facts(s).sent_messages;
  auto check = check_counts(sent, spans, [&](const SentMessage& m) {
    return m.requirement == id && m.expected_count && *m.expected_count == 0;
  });
  if (!check.mismatches.empty())
    return violated(id, "correlations sent " + when + " were attached", {mismatch_evidence(check.mismatches.front())});
  return met(id, check.checked, std::to_string(check.checked) + " (transaction, stack id) pairs ignored");
}

class ConfProbe final : public Probe {
 public:
  std::string name() const override { return "conf"; }
  std::vector<std::string> requirements() const override {
    return {"CONF-01", "CONF-02", "CONF-03", "CONF-04", "CONF-05"};
  }
  std::vector<std::string> sessions() const override {
    return {kEnabledSession, kDisabledSession, kAutoSession, kSmallQueueSession, kOwnHostIdSession};
  }
  // One launch per option; the default (CONF-03) is judged knowing whether auto is supported.
  std::vector<std::string> sessions_for(const std::string& requirement) const override {
    if (requirement == "CONF-01") return {kDisabledSession};
    if (requirement == "CONF-02") return {kAutoSession};
    if (requirement == "CONF-03") return {kOwnHostIdSession, kAutoSession};
    if (requirement == "CONF-04") return {kEnabledSession};
    return {kSmallQueueSession};
  }

  std::vector<Finding> judge(const SessionSet& sessions) const override {
    std::vector<Finding> out;
    out.push_back(judge_enabled_option(sessions));
    bool auto_supported = false;
    out.push_back(judge_auto(sessions, &auto_supported));
    out.push_back(judge_default(sessions, auto_supported));
    out.push_back(judge_socket_dir(sessions));
    out.push_back(judge_buffer_size(sessions));
    return out;
  }

 private:
  static Finding judge_enabled_option(const SessionSet& sessions) {
    const SessionEvidence* off = sessions.find(kDisabledSession);
    if (!off) return not_run({"CONF-01"}, "needs a launch with the feature disabled").front();
    SpanIndex spans(*off);
    auto ignored = expect_ignored("CONF-01", *off, spans, "with ENABLED=false");
    if (ignored.outcome == Finding::Outcome::Violated) return ignored;
    auto d = holds_before(spans, until_stop(*off));
    if (auto bad = judge_deferred("CONF-01", d, "with ENABLED=false transactions were still deferred")) return *bad;
    return met("CONF-01", ignored.evidence_count + d.n,
               "ENABLED=false: " + ignored.reason + (facts(*off).storage() ? "" : " (no socket opened)") +
                   ", nothing deferred (median hold " + ms(d.median) + " over " + std::to_string(d.n) +
                   " transactions)");
  }

  static Finding judge_auto(const SessionSet& sessions, bool* supported) {
    const SessionEvidence* s = sessions.find(kAutoSession);
    if (!s) return not_run({"CONF-02"}, "needs a launch with ENABLED=auto").front();
    if (!facts(*s).storage()) return not_applicable("CONF-02", "ENABLED=auto opened no socket: the agent does not implement auto");
    *supported = true;
    SpanIndex spans(*s);
    auto regs = facts(*s).registrations;
    auto first = regs.empty() ? std::chrono::system_clock::time_point::max() : regs.front().at_system;
    auto ignored = expect_ignored("CONF-02", *s, spans, "before any registration in auto mode");
    if (ignored.outcome == Finding::Outcome::Violated) return ignored;
    auto before = holds_before(spans, first);
    if (auto bad = judge_deferred("CONF-02", before, "in auto mode transactions were buffered before any registration"))
      return *bad;
    if (regs.empty()) return not_applicable("CONF-02", "no registration could be sent in auto mode");
    // After the agent took the registration up, auto mode must have started:
    // transactions deferred by the registered delay, as the never-deferred
    // ones before it (the baseline) were not.
    auto taken = regs.front().effective_from();
    auto delay = std::chrono::milliseconds(regs.front().message.samples_delay_ms);
    auto after_hold = holds_between(spans, taken + kMargin, until_stop(*s) - delay);
    auto baseline = baseline_of(*s, spans, false);
    // The hold is a lower bound: "not deferred" is certain only for
    // transactions that also arrived within kDeferredMs (their upper bound).
    std::size_t arrived_at_once = 0;
    for (const auto* t : spans.transactions())
      if (spans.sampled(*t) && SpanIndex::end_time(*t) >= taken + kMargin &&
          SpanIndex::end_time(*t) + kMargin < until_stop(*s) - delay && SpanIndex::export_delay_ms(*t) < kDeferredMs)
        ++arrived_at_once;
    if (after_hold.n >= 3 && after_hold.median < kDeferredMs && arrived_at_once * 2 < after_hold.n)
      return kit_error("CONF-02", "after the registration transactions were held only " + ms(after_hold.median) +
                                      " (median of " + std::to_string(after_hold.n) + ") by export order, but only " +
                                      std::to_string(arrived_at_once) + " arrived within " + ms(kDeferredMs) +
                                      ": cannot tell whether auto mode started (" + after_hold.figures() + ")");
    if (after_hold.n >= 3 && after_hold.median < kDeferredMs)
      return violated("CONF-02", "auto mode never started after the registration: " + std::to_string(after_hold.n) +
                                     " transactions that ended after it was taken up were held only " +
                                     ms(after_hold.median) + " (median), not " + std::to_string(delay.count()) + " ms",
                      {text_evidence("median hold after the registration", "about " + std::to_string(delay.count()) + " ms",
                                     ms(after_hold.median) + "; before it: " + ms(before.median) + " over " +
                                         std::to_string(before.n) + " transactions; " + baseline.describe())});
    // After the registration, only transactions that ended once the agent had
    // surely processed it (kMargin) are judged: one that ended in between was
    // rightly exported at once, undeferred, before its correlations arrived.
    auto sent = facts(*s).sent_messages;
    auto after = check_counts(sent, spans, [&](const SentMessage& m) {
      if (m.requirement != "CONF-02" || !m.expected_count || *m.expected_count == 0 || !m.transaction) return false;
      const auto* t = spans.transaction(m.transaction->first, m.transaction->second);
      return t && SpanIndex::end_time(*t) >= taken + kMargin;
    });
    if (!after.mismatches.empty())
      return violated("CONF-02", "after the registration, auto mode did not correlate", {mismatch_evidence(after.mismatches.front())});
    // Both halves need evidence: idle before (pairs ignored, transactions not
    // held) and active after (pairs counted, transactions held).
    std::size_t idle = ignored.evidence_count + before.n, active = after.checked + after_hold.n;
    return met("CONF-02", std::min(idle, active),
               "auto: idle until the registration (" + ignored.reason + ", median hold " + ms(before.median) + " over " +
                   std::to_string(before.n) + " transactions), correlating after it (" + std::to_string(after.checked) +
                   " (transaction, stack id) pairs judged, median hold " + ms(after_hold.median) + " over " +
                   std::to_string(after_hold.n) + " transactions)");
  }

  static Finding judge_default(const SessionSet& sessions, bool auto_supported) {
    const SessionEvidence* s = sessions.find(kOwnHostIdSession);
    if (!s) return not_run({"CONF-03"}, "needs a launch without the ENABLED option").front();
    SpanIndex spans(*s);
    if (!facts(*s).storage())
      return auto_supported ? violated("CONF-03", "auto is supported, but without the option the feature is off")
                            : met("CONF-03", 1, "without the option the feature is off (auto not supported)");
    auto regs = facts(*s).registrations;
    auto first = regs.empty() ? until_stop(*s) : regs.front().at_system;
    auto d = holds_before(spans, first);
    if (auto bad = judge_deferred("CONF-03", d, "without the option the agent defers before any registration: the "
                                                "default is 'true', not 'auto' or 'false'"))
      return *bad;
    return met("CONF-03", d.n, "without the option the agent behaves as 'auto' (median hold " + ms(d.median) +
                                   " over " + std::to_string(d.n) + " transactions before any registration)");
  }

  static Finding judge_socket_dir(const SessionSet& sessions) {
    const SessionEvidence* s = sessions.find(kEnabledSession);
    if (!s || sessions.attach_mode) return not_applicable("CONF-04", "needs a launch with SOCKET_DIR set");
    auto st = facts(*s).storage();
    if (!st) return not_applicable("CONF-04", "no process storage (see PROC)");
    auto dir = std::filesystem::path(st->socket_file_path).parent_path();
    auto want = std::filesystem::path(facts(*s).socket_dir);
    if (dir == want) return met("CONF-04", 1, "the socket is in " + want.string());
    return violated("CONF-04", "the socket is not in the configured directory",
                    {text_evidence("socket-file-path", "in " + want.string(), st->socket_file_path)});
  }

  static Finding judge_buffer_size(const SessionSet& sessions) {
    const SessionEvidence* s = sessions.find(kSmallQueueSession);
    if (!s) return not_run({"CONF-05"}, "needs a launch with a small BUFFER_SIZE").front();
    SpanIndex spans(*s);
    auto regs = facts(*s).registrations;
    if (regs.empty()) return not_applicable("CONF-05", "no registration could be sent");
    // Prompt: exported well within the 4 s delay and before the session
    // stopped the agent (whatever an agent flushes on shutdown arrives
    // promptly too, and says nothing about the queue's size).
    auto stopped = s->stop_requested_at.value_or(std::chrono::system_clock::time_point::max());
    std::size_t after = 0, prompt = 0;
    for (const auto* t : spans.transactions()) {
      if (!spans.sampled(*t) || SpanIndex::end_time(*t) < regs.front().effective_from() + std::chrono::milliseconds(300)) continue;
      ++after;
      if (spans.held_at_least_ms(*t) < 1500 && t->received_at_system < stopped) ++prompt;
    }
    if (prompt > 0)
      return met("CONF-05", prompt, std::to_string(prompt) + " transactions passed a full queue of " +
                                std::to_string(scenario::kSmallQueueSize) + " at once" + spans.flags_note());
    // Fewer than a full queue and two more: the queue may simply not have
    // filled (a starved target, or a registration read late).
    if (after < scenario::kSmallQueueSize + 2)
      return kit_error("CONF-05", "inconclusive: only " + std::to_string(after) +
                                      " sampled transactions ended after the agent read the registration; a queue of " +
                                      std::to_string(scenario::kSmallQueueSize) + " shows itself full from " +
                                      std::to_string(scenario::kSmallQueueSize + 2));
    // A prompt export the receiver shows lost (otlp::ExportLosses) would look
    // like none at all.
    if (s->export_losses.lost_after(regs.front().effective_from()))
      return kit_error("CONF-05", "inconclusive: no transaction arrived promptly, but exports of the agent were lost on "
                                  "the way to the receiver after the registration (" + s->export_losses.describe() + ")");
        return violated("CONF-05", "with BUFFER_SIZE=" + std::to_string(scenario::kSmallQueueSize) +
                                   " and a " + std::to_string(scenario::kLongDelayMs) +
                                   " ms delay no transaction was exported during the session: the size was not honoured");
  }
};

}  // namespace

std::unique_ptr<Probe> make_conf_probe() { return std::make_unique<ConfProbe>(); }

}  // namespace tracecorr::elastic_v1

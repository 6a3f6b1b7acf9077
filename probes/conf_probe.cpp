// CONF: the three options, each observed in a launch that sets it.
#include <filesystem>

#include "judging.hpp"
#include "probes.hpp"
#include "scenarios.hpp"

namespace tracecorr::conform {
namespace {

constexpr auto kMargin = std::chrono::milliseconds(150);
constexpr double kDeferredMs = 400;  // above: held back (the delays used are >= 300 ms + batching)

// Median export delay of sampled transactions that ended before `until`.
std::optional<double> median_delay_before(const SpanIndex& spans, std::chrono::system_clock::time_point until) {
  std::vector<double> d;
  for (const auto* t : spans.transactions())
    if (t->sampled() && SpanIndex::end_time(*t) + kMargin < until) d.push_back(SpanIndex::export_delay_ms(*t));
  if (d.empty()) return std::nullopt;
  std::nth_element(d.begin(), d.begin() + static_cast<long>(d.size() / 2), d.end());
  return d[d.size() / 2];
}

Finding expect_ignored(const std::string& id, const Session& s, const SpanIndex& spans, const std::string& when) {
  // The mismatches point into `sent`: it must outlive the evidence built from them.
  auto sent = s.sent_messages();
  auto check = check_counts(sent, spans, [&](const SentMessage& m) {
    return m.requirement == id && m.expected_count && *m.expected_count == 0;
  });
  if (!check.mismatches.empty())
    return violated(id, "correlations sent " + when + " were attached", {mismatch_evidence(check.mismatches.front())});
  return met(id, "");
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
    const Session* off = sessions.find(kDisabledSession);
    if (!off) return not_run({"CONF-01"}, "needs a launch with the feature disabled").front();
    SpanIndex spans(off->receiver().spans());
    auto ignored = expect_ignored("CONF-01", *off, spans, "with ENABLED=false");
    if (ignored.outcome == Finding::Outcome::Violated) return ignored;
    auto d = median_delay_before(spans, std::chrono::system_clock::time_point::max());
    if (d && *d >= kDeferredMs)
      return violated("CONF-01", "with ENABLED=false transactions were still deferred (median " + ms(*d) + ")");
    return met("CONF-01", "ENABLED=false: nothing correlated" +
                              std::string(off->storage() ? "" : " (no socket opened)") + ", nothing deferred");
  }

  static Finding judge_auto(const SessionSet& sessions, bool* supported) {
    const Session* s = sessions.find(kAutoSession);
    if (!s) return not_run({"CONF-02"}, "needs a launch with ENABLED=auto").front();
    if (!s->storage()) return not_applicable("CONF-02", "ENABLED=auto opened no socket: the agent does not implement auto");
    *supported = true;
    SpanIndex spans(s->receiver().spans());
    auto regs = s->registrations();
    auto first = regs.empty() ? std::chrono::system_clock::time_point::max() : regs.front().at_system;
    auto ignored = expect_ignored("CONF-02", *s, spans, "before any registration in auto mode");
    if (ignored.outcome == Finding::Outcome::Violated) return ignored;
    auto d = median_delay_before(spans, first);
    if (d && *d >= kDeferredMs)
      return violated("CONF-02", "in auto mode transactions were buffered before any registration (median delay " + ms(*d) + ")");
    // After the registration, only transactions that ended once the agent had
    // surely processed it (kMargin) are judged: one that ended in between was
    // rightly exported at once, undeferred, before its correlations arrived.
    auto sent = s->sent_messages();
    auto after = check_counts(sent, spans, [&](const SentMessage& m) {
      if (m.requirement != "CONF-02" || !m.expected_count || *m.expected_count == 0 || !m.transaction) return false;
      const auto* t = spans.transaction(m.transaction->first, m.transaction->second);
      return t && SpanIndex::end_time(*t) >= first + kMargin;
    });
    if (!after.mismatches.empty())
      return violated("CONF-02", "after the registration, auto mode did not correlate", {mismatch_evidence(after.mismatches.front())});
    return met("CONF-02", "auto: idle until the registration, correlating after it (" + std::to_string(after.checked) +
                              " (transaction, stack id) pairs judged after it)");
  }

  static Finding judge_default(const SessionSet& sessions, bool auto_supported) {
    const Session* s = sessions.find(kOwnHostIdSession);
    if (!s) return not_run({"CONF-03"}, "needs a launch without the ENABLED option").front();
    SpanIndex spans(s->receiver().spans());
    if (!s->storage())
      return auto_supported ? violated("CONF-03", "auto is supported, but without the option the feature is off")
                            : met("CONF-03", 1, "without the option the feature is off (auto not supported)");
    auto regs = s->registrations();
    auto first = regs.empty() ? std::chrono::system_clock::time_point::max() : regs.front().at_system;
    auto d = median_delay_before(spans, first);
    if (d && *d >= kDeferredMs)
      return violated("CONF-03", "without the option the agent defers before any registration (median " + ms(*d) +
                                     "): the default is 'true', not 'auto' or 'false'");
    return met("CONF-03", "without the option the agent behaves as 'auto'");
  }

  static Finding judge_socket_dir(const SessionSet& sessions) {
    const Session* s = sessions.find(kEnabledSession);
    if (!s || sessions.attach_mode) return not_applicable("CONF-04", "needs a launch with SOCKET_DIR set");
    auto st = s->storage();
    if (!st) return not_applicable("CONF-04", "no process storage (see PROC)");
    auto dir = std::filesystem::path(st->socket_file_path).parent_path();
    auto want = std::filesystem::path(s->socket_dir());
    if (dir == want) return met("CONF-04", 1, "the socket is in " + want.string());
    return violated("CONF-04", "the socket is not in the configured directory",
                    {text_evidence("socket-file-path", "in " + want.string(), st->socket_file_path)});
  }

  static Finding judge_buffer_size(const SessionSet& sessions) {
    const Session* s = sessions.find(kSmallQueueSession);
    if (!s) return not_run({"CONF-05"}, "needs a launch with a small BUFFER_SIZE").front();
    SpanIndex spans(s->receiver().spans());
    auto regs = s->registrations();
    if (regs.empty()) return not_applicable("CONF-05", "no registration could be sent");
    // Prompt: exported well within the 4 s delay and before the session
    // stopped the agent (whatever an agent flushes on shutdown arrives
    // promptly too, and says nothing about the queue's size).
    auto stopped = s->stop_requested_at().value_or(std::chrono::system_clock::time_point::max());
    std::size_t after = 0, prompt = 0;
    for (const auto* t : spans.transactions()) {
      if (!t->sampled() || SpanIndex::end_time(*t) < regs.front().at_system + std::chrono::milliseconds(300)) continue;
      ++after;
      if (SpanIndex::export_delay_ms(*t) < 1500 && t->received_at_system < stopped) ++prompt;
    }
    if (prompt > 0)
      return met("CONF-05", prompt, std::to_string(prompt) + " transactions passed a full queue of " +
                                std::to_string(scenario::kSmallQueueSize) + " at once");
    return violated("CONF-05", "with BUFFER_SIZE=" + std::to_string(scenario::kSmallQueueSize) +
                                   " and a " + std::to_string(scenario::kLongDelayMs) +
                                   " ms delay no transaction was exported during the session: the size was not honoured");
  }
};

}  // namespace

std::unique_ptr<Probe> make_conf_probe() { return std::make_unique<ConfProbe>(); }

}  // namespace tracecorr::conform

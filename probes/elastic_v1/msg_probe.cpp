// MSG: how the agent handles what arrives on its socket: registrations at
// both minor versions, a profiler restart, every truncation, unknown types,
// trailing bytes and boundary values. The message battery (scenarios.cpp)
// gives every message its own stack id, so each verdict points at one datagram.
#include <algorithm>

#include "judging.hpp"
#include "probes.hpp"
#include "scenarios.hpp"

namespace tracecorr::elastic_v1 {

using namespace tracecorr::conform;
namespace {


Evidence registration_evidence(const RegistrationWindow& w, const RegistrationEffect& e) {
  SentMessage m;
  m.label = describe(Message{w.registration.message});
  m.requirement = "MSG-02";
  m.bytes = encode(w.registration.message);
  return message_evidence(m,
                          "host.id \"" + w.registration.message.host_id.substr(0, 40) + "\" adopted or delay " +
                              std::to_string(w.registration.message.samples_delay_ms) + " ms applied",
                          e.describe());
}

// Whether the agent applied a registration: its host.id adopted, or the
// transactions in its window held for its delay rather than the previous one.
// Without either, a host.id not adopted counts against it only for an agent
// seen adopting some registration's host.id in the same session (one that
// ignores host.id altogether is HOST-01's business, not this one's).
// nullopt: nothing in its window to conclude from.
std::optional<bool> took_effect(const RegistrationWindow& w, const SpanIndex& spans, bool adopts_host_ids,
                                RegistrationEffect* effect) {
  *effect = effect_of(w, spans);
  if (effect->host_id_adopted()) return true;
  if (auto applied = effect->delay_applied()) return *applied;
  if (adopts_host_ids && effect->spans > 0) return false;
  return std::nullopt;
}

bool adopts_host_ids(const std::vector<RegistrationWindow>& windows, const SpanIndex& spans) {
  return std::any_of(windows.begin(), windows.end(),
                     [&](const RegistrationWindow& w) { return effect_of(w, spans).host_id_adopted(); });
}

Finding judge_counts(const std::string& id, const SessionEvidence& s, const SpanIndex& spans, const std::string& what) {
  auto sent = facts(s).sent_messages;
  // Each tested message must have reached the agent and been read: one that
  // was lost to a full queue, or never read, tests nothing, and an agent that
  // mishandles exactly that message would pass.
  std::size_t tested = 0, undelivered = 0;
  for (const auto& m : sent) {
    if (m.requirement != id) continue;
    ++tested;
    if (m.outcome != SendOutcome::Sent || !m.taken_up_by) ++undelivered;
  }
  auto check = check_counts(sent, spans, [&](const SentMessage& m) { return m.requirement == id; });
  if (!check.mismatches.empty()) {
    std::vector<Evidence> ev;
    for (std::size_t i = 0; i < check.mismatches.size() && i < kMaxExamples; ++i)
      ev.push_back(mismatch_evidence(check.mismatches[i]));
    return violated(id, std::to_string(check.mismatches.size()) + " of " + std::to_string(check.checked) + " " + what +
                            " were not counted as required", ev);
  }
  if (undelivered)
    return kit_error(id, "inconclusive: " + std::to_string(undelivered) + " of " + std::to_string(tested) + " " + what +
                             " never reached the agent or were never read (its queue stayed full; " +
                             std::to_string(facts(s).messages_lost) + " messages lost in the session)");
  if (!check.checked)
    return not_applicable(id, check.unexported ? "the transactions the messages named were never exported"
                                               : "no messages could be sent (no socket or no live transaction)");
  return met(id, check.checked, std::to_string(check.checked) + " " + what + " counted exactly as required");
}

// Launched, the agent met no profiler before tracecorr. Attached, it may have
// (a host agent, or an earlier run of tracecorr): a transaction that began
// before this session's first message can carry the ids they sent.
std::chrono::system_clock::time_point ids_judged_from(const SessionEvidence& s) {
  auto from = std::chrono::system_clock::time_point::min();
  if (s.launched) return from;
  for (const auto& m : facts(s).sent_messages)
    if (m.outcome == SendOutcome::Sent && (from == std::chrono::system_clock::time_point::min() || m.at_system < from))
      from = m.at_system;
  return from;
}

bool died_during(const SessionEvidence& s, std::string* how) {
  auto exit = s.target_exit;
  if (!exit || !s.launched) return false;
  if (exit->rfind("stopped by tracecorr", 0) == 0) return false;
  *how = *exit;
  return true;
}

class MsgProbe final : public Probe {
 public:
  std::string name() const override { return "msg"; }
  std::vector<std::string> requirements() const override {
    return {"MSG-02", "MSG-03", "MSG-04", "MSG-05", "MSG-06", "MSG-07"};
  }
  std::vector<std::string> sessions() const override { return {kEnabledSession, kSmallQueueSession}; }
  // Only MSG-02 reads the small-queue session (its registration at minor 2).
  std::vector<std::string> sessions_for(const std::string& requirement) const override {
    if (requirement == "MSG-02") return sessions();
    return {kEnabledSession};
  }

  std::vector<Finding> judge(const SessionSet& sessions) const override {
    const SessionEvidence* s = sessions.find(kEnabledSession);
    if (!s) return not_run(requirements());
    if (!facts(*s).could_send && facts(*s).sent_messages.empty())
      return not_run(requirements(), "tracecorr could not connect to the agent's socket (see SOCK-02)");
    SpanIndex spans(*s);
    auto windows = registration_windows(*s, kMargin);
    std::vector<Finding> out;
    out.push_back(judge_minor_versions(sessions, spans, windows));
    out.push_back(judge_reregistration(spans, windows));
    out.push_back(judge_truncation(*s, spans));
    out.push_back(judge_counts("MSG-05", *s, spans, "messages of unknown type or minor 0 (and their controls)"));
    out.push_back(judge_counts("MSG-06", *s, spans, "messages with trailing bytes (and their controls)"));
    out.push_back(judge_boundaries(*s, spans));
    return out;
  }

 private:
  static Finding judge_minor_versions(const SessionSet& sessions, const SpanIndex& spans,
                                      const std::vector<RegistrationWindow>& windows) {
    std::vector<Evidence> ev;
    std::string proven, unjudged;
    std::size_t judged = 0;
    // Minor 1 with trailing bytes: the enabled session's first registration.
    bool minor1_judged = false, minor2_judged = false, minor2_sent = false;
    if (!windows.empty() && windows.front().registration.message.minor == 1) {
      RegistrationEffect e;
      auto ok = took_effect(windows.front(), spans, adopts_host_ids(windows, spans), &e);
      if (ok && !*ok)
        return violated("MSG-02", "the registration at minor 1 with trailing bytes had no effect, while later "
                                  "registrations at minor 2 did",
                        {registration_evidence(windows.front(), e)});
      if (ok) {
        ++judged;
        minor1_judged = true;
        proven += "minor 1 + trailing bytes accepted (" + e.describe() + ")";
      } else {
        unjudged += "minor 1 (" + e.describe() + ")";
      }
    }
    // Minor 2 with trailing bytes: the small-queue session's first registration
    // (judged by host.id only: a full queue blurs the delay).
    if (const SessionEvidence* q = sessions.find(kSmallQueueSession)) {
      SpanIndex qspans(*q);
      auto qwindows = registration_windows(*q, kMargin);
      if (!qwindows.empty()) {
        minor2_sent = true;
        auto e = effect_of(qwindows.front(), qspans);
        bool agent_has_own = false;
        for (const auto& sp : qspans.spans())
          if (sp.received_at_system < qwindows.front().registration.at_system && !host_id_of(sp).empty())
            agent_has_own = true;
        if (e.spans > 0 && !agent_has_own && !e.host_id_adopted())
          return violated("MSG-02", "the registration at minor 2 with trailing bytes had no effect",
                          {registration_evidence(qwindows.front(), e)});
        if (e.spans > 0 && e.host_id_adopted()) {
          ++judged;
          minor2_judged = true;
          proven += std::string(proven.empty() ? "" : "; ") + "minor 2 + trailing bytes accepted (" + e.describe() + ")";
        } else {
          unjudged += std::string(unjudged.empty() ? "" : "; ") + "minor 2 (" + e.describe() + ")";
        }
      }
    }
    if (proven.empty()) return not_seen("MSG-02", "no span ended while a registration was in force");
    // The rule is "both minors": one accepted minor proves nothing about the
    // other (an agent that discards minor 1 accepts minor 2), so half is inconclusive.
    // (Attach mode runs no small-queue session: minor 2 is then seen only
    // through the later registrations minor 1 is compared with.)
    if (!minor1_judged || (minor2_sent && !minor2_judged))
      return kit_error("MSG-02", "inconclusive: " + proven + ", but " +
                                     (unjudged.empty() ? std::string("the other minor was not sent") : unjudged) +
                                     " could not be judged");
    return met("MSG-02", judged, proven);
  }

  static Finding judge_reregistration(const SpanIndex& spans, const std::vector<RegistrationWindow>& windows) {
    if (windows.size() < 2) return not_seen("MSG-03", "fewer than two registrations could be judged");
    std::size_t judged = 0;
    bool adopts = adopts_host_ids(windows, spans);
    for (std::size_t i = 1; i < windows.size(); ++i) {
      if (scenario::is_long_registration(windows[i].registration.message)) continue;  // MSG-07 judges it
      RegistrationEffect e;
      auto ok = took_effect(windows[i], spans, adopts, &e);
      if (!ok) continue;
      ++judged;
      if (!*ok)
        return violated("MSG-03", "registration #" + std::to_string(i + 1) + " (after a profiler restart) had no effect",
                        {registration_evidence(windows[i], e)});
    }
    if (!judged) return not_seen("MSG-03", "no span ended after a later registration");
    return met("MSG-03", judged, std::to_string(judged) + " later registration(s) each took effect");
  }

  static Finding judge_truncation(const SessionEvidence& s, const SpanIndex& spans) {
    auto f = judge_counts("MSG-04", s, spans, "truncated messages (and their controls)");
    if (f.outcome == Finding::Outcome::Violated) return f;
    auto unknown = unknown_ids(facts(s).sent_messages, spans, ids_judged_from(s));
    if (!unknown.empty()) {
      std::vector<Evidence> ev;
      for (std::size_t i = 0; i < unknown.size() && i < kMaxExamples; ++i)
        ev.push_back(span_evidence(*unknown[i].first, "only ids tracecorr sent whole",
                                   "id " + base64url_nopad(unknown[i].second) + " that no message carried whole"));
      return violated("MSG-04", std::to_string(unknown.size()) +
                                    " stack id(s) appeared that no message carried whole: a short datagram was decoded",
                      ev);
    }
    for (const auto& sp : spans.spans())
      if (host_id_of(sp) == scenario::kTruncatedHostId)
        return violated("MSG-04", "a truncated registration was applied",
                        {span_evidence(sp, "host.id never \"" + std::string(scenario::kTruncatedHostId) + "\"",
                                       "host.id \"" + host_id_of(sp) + "\"")});
    return f;
  }

  static Finding judge_boundaries(const SessionEvidence& s, const SpanIndex& spans) {
    std::string how;
    if (died_during(s, &how)) {
      const SentMessage* last = nullptr;
      auto sent = facts(s).sent_messages;
      if (!sent.empty()) last = &sent.back();
      std::vector<Evidence> ev;
      if (last) ev.push_back(message_evidence(*last, "the agent survives", "last message sent before it died"));
      return violated("MSG-07", "the agent died during the session: " + how, ev);
    }
    auto counts = judge_counts("MSG-07", s, spans, "boundary-value messages (and the controls after them)");
    if (counts.outcome != Finding::Outcome::Met) return counts;
    // A long registration is judged for its effect, like any other: an agent
    // whose receive buffer is shorter drops it whole (or applies a truncated one).
    auto windows = registration_windows(s, kMargin);
    std::vector<RegistrationWindow> ordinary;
    for (const auto& w : windows)
      if (!scenario::is_long_registration(w.registration.message)) ordinary.push_back(w);
    bool adopts = adopts_host_ids(ordinary, spans);
    std::size_t long_judged = 0, long_sent = 0;
    std::string long_note;
    for (const auto& r : facts(s).registrations) long_sent += r.sent() && scenario::is_long_registration(r.message);
    for (const auto& w : windows) {
      if (!scenario::is_long_registration(w.registration.message)) continue;
      RegistrationEffect e;
      auto ok = took_effect(w, spans, adopts, &e);
      auto bytes = encode(w.registration.message).size();
      if (ok && !*ok)
        return violated("MSG-07", "a registration of " + std::to_string(bytes) + " bytes (host-id " +
                                      std::to_string(w.registration.message.host_id.size()) +
                                      " bytes) had no effect, while shorter ones did: the agent breaks at a length "
                                      "between the longest registration it applied and " + std::to_string(bytes) + " bytes",
                        {registration_evidence(w, e)});
      if (ok) {
        ++long_judged;
        long_note = "; a " + std::to_string(bytes) + "-byte registration applied";
      } else {
        // The long registration is the half of MSG-07 a real agent breaks
        // (EDOT Java's 1024-byte buffer): unjudged, the rule is inconclusive.
        return kit_error("MSG-07", "inconclusive: " + counts.reason + ", but the " + std::to_string(bytes) +
                                       "-byte registration could not be judged (" + e.describe() + ")");
      }
    }
    if (long_sent && !long_judged)  // sent, but never seen read: no window to judge it in
      return kit_error("MSG-07", "inconclusive: " + counts.reason + ", but the long registration was never seen read "
                                     "by the agent");
    return met("MSG-07", counts.evidence_count + long_judged, counts.reason + long_note);
  }
};

}  // namespace

std::unique_ptr<Probe> make_msg_probe() { return std::make_unique<MsgProbe>(); }

}  // namespace tracecorr::elastic_v1

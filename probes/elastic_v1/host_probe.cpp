// HOST: host.id adoption from the registration, and an agent's own host.id kept.
#include <algorithm>
#include <cctype>

#include "judging.hpp"
#include "probes.hpp"
#include "scenarios.hpp"

namespace tracecorr::elastic_v1 {

using namespace tracecorr::conform;
namespace {


class HostProbe final : public Probe {
 public:
  std::string name() const override { return "host"; }
  std::vector<std::string> requirements() const override { return {"HOST-01", "HOST-02"}; }
  std::vector<std::string> sessions() const override { return {kEnabledSession, kSmallQueueSession, kOwnHostIdSession}; }
  std::vector<std::string> sessions_for(const std::string& requirement) const override {
    if (requirement == "HOST-02") return {kOwnHostIdSession};
    return {kEnabledSession, kSmallQueueSession};
  }

  std::vector<Finding> judge(const SessionSet& sessions) const override {
    auto adoption = judge_adoption(sessions.find(kEnabledSession));
    // The enabled session's registrations are about a second apart: an
    // exporter batching every 5 s may export in none of those windows. The
    // small-queue session has one registration and a long window.
    if (adoption.outcome == Finding::Outcome::NotApplicable)
      if (const SessionEvidence* q = sessions.find(kSmallQueueSession)) {
        auto second = judge_adoption(q);
        if (second.outcome != Finding::Outcome::NotApplicable) adoption = second;
      }
    return {adoption, judge_own(sessions.find(kOwnHostIdSession))};
  }

 private:
  // A host.id on spans before the session's first registration is the
  // agent's own (HOST-02's case) only if the agent keeps it: attached, it may
  // be an earlier profiler's registration (a host agent's, an earlier run's),
  // which the agent replaces with this session's like any other.
  static Finding judge_adoption(const SessionEvidence* s) {
    if (!s) return not_run({"HOST-01"}).front();
    SpanIndex spans(*s);
    auto windows = registration_windows(*s, kMargin);
    if (windows.empty()) return not_applicable("HOST-01", "no registration could be sent");
    const std::string before = host_id_before_registration(*s, spans);
    std::size_t judged = 0;
    for (const auto& w : windows) {
      if (scenario::is_long_registration(w.registration.message)) continue;  // MSG-07 judges it
      auto e = effect_of(w, spans);
      if (!e.spans) continue;
      ++judged;
      if (e.host_id_adopted()) continue;
      const otlp::ReceivedSpan& example = first_not_adopted(w, e, spans);
      if (!before.empty() && host_id_of(example) == before)
        return not_applicable("HOST-01", "the agent sends host.id \"" + before +
                                             "\" of its own before any registration and keeps it (HOST-02 applies)");
      return violated("HOST-01", "spans exported after a registration do not carry its host-id",
                      {span_evidence(example, "resource host.id \"" + w.registration.message.host_id + "\"",
                                     "host.id \"" + host_id_of(example) + "\"")});
    }
    if (!judged) return not_applicable("HOST-01", "no span ended after a registration");
    return met("HOST-01", judged,
               std::to_string(judged) + " registrations' host-ids adopted" +
                   (before.empty() ? "" : " (host.id \"" + before + "\" before the first, replaced)"));
  }

  static std::string host_id_before_registration(const SessionEvidence& s, const SpanIndex& spans) {
    for (const auto& sp : spans.spans())
      if (sp.received_at_system < facts(s).registrations.front().at_system && !host_id_of(sp).empty())
        return host_id_of(sp);
    return {};
  }

  // The first span of window `w` that lacks its host-id after the agent had
  // shown it (or the first in the window when it never did).
  static const otlp::ReceivedSpan& first_not_adopted(const RegistrationWindow& w, const RegistrationEffect& e,
                                                     const SpanIndex& spans) {
    bool shown = false;
    for (const auto& sp : spans.spans()) {
      if (sp.received_at_system < w.from || sp.received_at_system + w.margin > w.next) continue;
      bool carries = host_id_of(sp) == w.registration.message.host_id;
      if (!carries && (shown || e.since_adoption == 0)) return sp;
      shown = shown || carries;
    }
    return spans.spans().front();  // host_id_adopted() was false: some span lacked it
  }

  static Finding judge_own(const SessionEvidence* s) {
    if (!s) return not_run({"HOST-02"}, "needs a launch with host.id in OTEL_RESOURCE_ATTRIBUTES").front();
    auto regs = facts(*s).registrations;
    if (regs.empty()) return not_applicable("HOST-02", "the agent opened no socket without the ENABLED option, so no registration could be sent");
    SpanIndex spans(*s);
    std::size_t after = 0;
    for (const auto& sp : spans.spans()) {
      if (sp.received_at_system < regs.front().effective_from() + kMargin) continue;
      ++after;
      if (host_id_of(sp) != scenario::kOwnHostId)
        return violated("HOST-02", "the agent replaced its own host.id with the registration's",
                        {span_evidence(sp, std::string("host.id \"") + scenario::kOwnHostId + "\"",
                                       "host.id \"" + host_id_of(sp) + "\"")});
    }
    if (!after) return not_applicable("HOST-02", "no span ended after the registration");
    std::string output = s->target_output;
    std::transform(output.begin(), output.end(), output.begin(), [](unsigned char c) { return std::tolower(c); });
    if (output.find("host.id") == std::string::npos && output.find("host id") == std::string::npos)
      return violated("HOST-02", "the agent kept its host.id but printed no warning about the mismatch",
                      {text_evidence("agent output", "a warning naming host.id", output.empty() ? "(nothing)" : output.substr(0, 300))});
    return met("HOST-02", after, "own host.id kept on " + std::to_string(after) + " spans, mismatch warned");
  }
};

}  // namespace

std::unique_ptr<Probe> make_host_probe() { return std::make_unique<HostProbe>(); }

}  // namespace tracecorr::elastic_v1

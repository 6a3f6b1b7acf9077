#include "tracecorr/conform/probe.hpp"

namespace tracecorr::conform {

Verdict verdict_of(Finding::Outcome o) {
  switch (o) {
    case Finding::Outcome::Met: return Verdict::Pass;
    case Finding::Outcome::Violated: return Verdict::Fail;
    case Finding::Outcome::NotApplicable: return Verdict::Skip;
    case Finding::Outcome::KitError: return Verdict::Error;
    case Finding::Outcome::Tolerated: return Verdict::Warn;  // the runner raises only Fail to the level
  }
  return Verdict::Error;
}

std::optional<std::string> starved_of_events(const Finding& finding, const SessionSet& sessions,
                                             const std::vector<std::string>& read) {
  if (finding.outcome != Finding::Outcome::NotApplicable || !finding.for_want_of_events) return std::nullopt;
  for (const auto& name : read) {
    const SessionEvidence* s = sessions.find(name);
    if (s && s->run_queue_wait && s->run_queue_wait->starved())
      return "inconclusive: " + finding.reason + ", in session " + name + " whose target was starved of CPU (" +
             s->run_queue_wait->describe() + "): it had too little of the machine to make happen what this rule needs";
  }
  return std::nullopt;
}

}  // namespace tracecorr::conform

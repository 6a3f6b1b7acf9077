#include "tracecorr/finding.hpp"

#include "tracecorr/protocol.hpp"

namespace tracecorr {

Finding met(std::string id, std::size_t evidence_count, std::string reason, std::vector<Evidence> evidence) {
  return {std::move(id), Finding::Outcome::Met, std::move(reason), std::move(evidence), evidence_count};
}
Finding violated(std::string id, std::string reason, std::vector<Evidence> evidence) {
  return {std::move(id), Finding::Outcome::Violated, std::move(reason), std::move(evidence)};
}
Finding not_applicable(std::string id, std::string reason) {
  return {std::move(id), Finding::Outcome::NotApplicable, std::move(reason), {}};
}
Finding not_seen(std::string id, std::string reason) {
  Finding f = not_applicable(std::move(id), std::move(reason));
  f.for_want_of_events = true;
  return f;
}
Finding kit_error(std::string id, std::string reason, std::vector<Evidence> evidence) {
  return {std::move(id), Finding::Outcome::KitError, std::move(reason), std::move(evidence)};
}

Finding tolerated(std::string id, std::string reason, std::vector<Evidence> evidence) {
  return {std::move(id), Finding::Outcome::Tolerated, std::move(reason), std::move(evidence)};
}

Evidence text_evidence(std::string label, std::string expected, std::string actual) {
  Evidence e;
  e.label = std::move(label);
  e.expected = std::move(expected);
  e.actual = std::move(actual);
  return e;
}

std::string level_of(const Finding& f) {
  if (f.outcome == Finding::Outcome::Tolerated) return "warn";
  const Requirement* r = find_requirement(f.requirement);
  return std::string(to_string(r ? r->level : Level::Must));
}

std::string finding_message(const Finding& f) {
  std::string m = f.reason;
  for (const auto& e : f.evidence)
    if (!e.actual.empty()) m += " (" + e.label + ": expected " + e.expected + ", found " + e.actual + ")";
  return m;
}

}  // namespace tracecorr

#include "tracecorr/conform/probe.hpp"

namespace tracecorr::conform {

Finding met(std::string id, std::size_t evidence_count, std::string reason, std::vector<Evidence> evidence) {
  return {std::move(id), Finding::Outcome::Met, std::move(reason), std::move(evidence), evidence_count};
}
Finding violated(std::string id, std::string reason, std::vector<Evidence> evidence) {
  return {std::move(id), Finding::Outcome::Violated, std::move(reason), std::move(evidence)};
}
Finding not_applicable(std::string id, std::string reason) {
  return {std::move(id), Finding::Outcome::NotApplicable, std::move(reason), {}};
}
Finding kit_error(std::string id, std::string reason, std::vector<Evidence> evidence) {
  return {std::move(id), Finding::Outcome::KitError, std::move(reason), std::move(evidence)};
}

Verdict verdict_of(Finding::Outcome o) {
  switch (o) {
    case Finding::Outcome::Met: return Verdict::Pass;
    case Finding::Outcome::Violated: return Verdict::Fail;
    case Finding::Outcome::NotApplicable: return Verdict::Skip;
    case Finding::Outcome::KitError: return Verdict::Error;
  }
  return Verdict::Error;
}

}  // namespace tracecorr::conform

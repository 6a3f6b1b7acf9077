// elsewhere (NJS-16, 17, 18): the rules no session judges on their own, each
// saying how it is judged instead: through another rule (16, 17 by what a
// read sees, NJS-08), or not at all (18, invisible from outside).
#include "probes.hpp"

namespace tracecorr::otel_nodejs_thread_context {
namespace {

const std::vector<std::pair<std::string, std::string>>& judged_elsewhere() {
  static const std::vector<std::pair<std::string, std::string>> rules = {
      {"NJS-16", "judged only by what a read sees (spec §6): a record moved without re-publication leaves the slot "
                 "leading to no readable record, which a look reports as NJS-08"},
      {"NJS-17", "judged only by what a read sees (spec §6): a record freed behind a live wrapper is unreadable, which a "
                 "look reports as NJS-08"},
      {"NJS-18", "not judged: invisible from outside the process (the rule says so)"},
  };
  return rules;
}

std::vector<std::string> elsewhere_ids() {
  std::vector<std::string> out;
  for (const auto& rule : judged_elsewhere()) out.push_back(rule.first);
  return out;
}

class ElsewhereProbe final : public SessionProbe {
 public:
  ElsewhereProbe() : SessionProbe("elsewhere", elsewhere_ids(), kLookedSession) {}
  std::vector<Finding> judge_writer(const conform::SessionEvidence&, const NodeFacts&) const override {
    std::vector<Finding> out;
    for (const auto& [id, why] : judged_elsewhere()) out.push_back(not_applicable(id, why));
    return out;
  }
};

}  // namespace

std::unique_ptr<conform::Probe> make_elsewhere_probe() { return std::make_unique<ElsewhereProbe>(); }

}  // namespace tracecorr::otel_nodejs_thread_context

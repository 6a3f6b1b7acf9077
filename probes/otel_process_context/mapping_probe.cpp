// mapping (PCTX-01..06, 12, 15..18): one look at the context when each session
// opened and closed, judged by the shared checks (otel_process_context/checks.hpp,
// also inspect's); the worst look stands.
#include "probes.hpp"

#include <algorithm>
#include <map>

#include "otel_process_context/checks.hpp"

namespace tracecorr::otel_process_context {

namespace {

using conform::SessionSet;

// One look at the context, when each session opened and closed: every rule
// such a look can judge, the worst look standing (a context can go wrong in an
// update). PCTX-11 is the fork probe's.
class MappingProbe final : public conform::Probe {
 public:
  std::string name() const override { return "mapping"; }
  std::vector<std::string> requirements() const override {
    std::vector<std::string> ids;
    for (auto id : kSnapshotRequirements)
      if (id != "PCTX-11") ids.emplace_back(id);
    return ids;
  }
  std::vector<std::string> sessions() const override { return {kWatchedSession, kReadSession}; }

  std::vector<Finding> judge(const SessionSet& sessions) const override {
    const auto ran = sessions_run(sessions);
    if (ran.empty()) return none_ran(requirements());
    std::map<std::string, Finding> worst;
    const bool found_somewhere = std::any_of(ran.begin(), ran.end(), [](const auto* f) { return !f->not_found; });
    for (const auto* f : ran) {
      if (f->not_found) {
        // Nothing published judges nothing, unless another session of the same
        // command found a context: then this one cannot be told apart from a lost launch.
        const std::string why = f->session + " session: " + f->not_found->message();
        keep(worst, !f->nothing_published ? violated("PCTX-01", why)
                    : found_somewhere     ? kit_error("PCTX-01", "published in another session, nothing in this one: " + why)
                                          : not_applicable("PCTX-01", "published nothing: " + why));
        continue;
      }
      for (const auto* snapshot : {&f->first, &f->last}) {
        if (!*snapshot) continue;
        for (auto& finding : check_snapshot(**snapshot)) {
          finding.reason = f->session + " session, " + (snapshot == &f->first ? "first" : "last") + " look: " + finding.reason;
          keep(worst, std::move(finding));
        }
      }
    }
    std::vector<Finding> out;
    for (const auto& id : requirements()) {
      auto it = worst.find(id);
      out.push_back(it != worst.end() ? it->second : not_applicable(id, "no look at the context judged it"));
    }
    return out;
  }

 private:
  static void keep(std::map<std::string, Finding>& worst, Finding f) {
    auto it = worst.find(f.requirement);
    if (it == worst.end()) return void(worst.emplace(f.requirement, std::move(f)));
    if (severity(f.outcome) > severity(it->second.outcome)) it->second = std::move(f);
    else if (f.outcome == Finding::Outcome::Met && it->second.outcome == Finding::Outcome::Met)
      it->second.evidence_count += f.evidence_count;  // every look that met it counts
  }
};

}  // namespace

std::unique_ptr<conform::Probe> make_mapping_probe() { return std::make_unique<MappingProbe>(); }

}  // namespace tracecorr::otel_process_context

// The suite's probe catalogue, one per area (<area>_probe.cpp: each picks the
// sessions its rules need and hands their plain evidence to the shared checks,
// otel_process_context/checks.hpp, also inspect's, or to the judges beside
// it), and what the probes share.
#include "probes.hpp"

namespace tracecorr::otel_process_context {

std::vector<const ContextFacts*> sessions_run(const conform::SessionSet& sessions) {
  std::vector<const ContextFacts*> out;
  for (const char* name : {kWatchedSession, kReadSession})
    if (const auto* f = facts(sessions, name)) out.push_back(f);
  return out;
}

std::vector<Finding> needs_watched_session(const std::vector<std::string>& ids) {
  std::vector<Finding> out;
  for (const auto& id : ids)
    out.push_back(not_applicable(id, "needs the watched session, which runs only on a launched target"));
  return out;
}

std::vector<Finding> none_ran(const std::vector<std::string>& ids) {
  std::vector<Finding> out;
  for (const auto& id : ids) out.push_back(not_applicable(id, "no session of this suite ran"));
  return out;
}

std::vector<std::unique_ptr<conform::Probe>> make_probes() {
  std::vector<std::unique_ptr<conform::Probe>> p;
  p.push_back(make_mapping_probe());
  p.push_back(make_seqlock_probe());
  p.push_back(make_naming_probe());
  p.push_back(make_fork_probe());
  return p;
}

}  // namespace tracecorr::otel_process_context

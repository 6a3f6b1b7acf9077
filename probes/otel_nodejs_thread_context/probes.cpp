// The suite's probe catalogue (one probe per area, <area>_probe.cpp, each
// handing a session's plain evidence, evidence.hpp, to its judges) and what
// the probes share.
#include "probes.hpp"

#include <algorithm>

namespace tracecorr::otel_nodejs_thread_context {
namespace {

std::vector<Finding> all_not_applicable(const std::vector<std::string>& ids, const std::string& why) {
  std::vector<Finding> out;
  for (const auto& id : ids) out.push_back(not_applicable(id, why));
  return out;
}

}  // namespace

std::vector<Finding> completed(std::vector<Finding> found, const std::vector<std::string>& ids, const std::string& why) {
  for (const auto& id : ids)
    if (std::none_of(found.begin(), found.end(), [&](const Finding& f) { return f.requirement == id; }))
      found.push_back(not_applicable(id, why));
  return found;
}

std::vector<Finding> SessionProbe::judge(const conform::SessionEvidence& session, const NodeFacts& f) const {
  if (f.not_found) return all_not_applicable(ids(), "no Node.js thread-context writer: " + f.not_found->message());
  return completed(judge_writer(session, f), ids(), "not judged by this session");
}

std::vector<std::unique_ptr<conform::Probe>> make_probes() {
  std::vector<std::unique_ptr<conform::Probe>> p;
  p.push_back(make_variable_probe());
  p.push_back(make_reference_probe());
  p.push_back(make_thread_probe());
  p.push_back(make_spans_probe());
  p.push_back(make_gate_probe());
  p.push_back(make_elsewhere_probe());
  return p;
}

}  // namespace tracecorr::otel_nodejs_thread_context

// From reader evidence to requirement results: every reader probe of the
// chosen suites judges once, each selected requirement gets its verdict with
// the same rules as the writer side (levels, evidence minimum, strict).
#include <algorithm>
#include <map>

#include "tracecorr/conform/probe.hpp"
#include "tracecorr/profiler/run.hpp"

namespace tracecorr::profiler {
using conform::RequirementResult;
using conform::Verdict;
using conform::verdict_of;
using conform::enforce_evidence_minimum;
using conform::apply_level;
using conform::make_result;

namespace {

bool selected(const Requirement& r, const std::vector<std::string>& only) {
  if (r.role != Role::Profiler) return false;
  if (only.empty()) return true;
  return std::any_of(only.begin(), only.end(), [&](const std::string& token) { return token == r.id || token == r.area; });
}

void judged_by(const Finding& f, const ReaderProbe& probe, bool strict, RequirementResult& r) {
  r.probe = probe.name();
  r.verdict = verdict_of(f.outcome);
  r.reason = f.reason;
  r.evidence = f.evidence;
  r.evidence_count = f.evidence_count;
  r.evidence_minimum = probe.minimum_evidence(r.id);
  enforce_evidence_minimum(r);
  if (r.verdict == Verdict::Fail) apply_level(r, strict);
}

}  // namespace

void attach_samples(ReaderEvidence& e) {
  for (auto& m : e.members) {
    m.samples.clear();
    for (const auto& s : e.samples)
      if (s.pid && m.pid != 0 && *s.pid == m.pid) m.samples.push_back(&s);
  }
}

std::vector<RequirementResult> judge_readers(const ReaderEvidence& evidence, const std::vector<const ReaderSuite*>& suites,
                                             const std::vector<std::string>& only, bool strict) {
  std::vector<RequirementResult> results;
  for (const auto* suite : suites) {
    std::map<std::string, std::pair<Finding, const ReaderProbe*>> findings;
    for (const auto& probe : suite->probes())
      for (auto& f : probe->judge(evidence)) {
        std::string id = f.requirement;
        findings.emplace(std::move(id), std::make_pair(std::move(f), probe.get()));
      }
    for (const auto& req : suite->protocol().requirements) {
      if (!selected(req, only)) continue;
      auto result = make_result(req.id);
      if (!result) continue;  // the registry is the suite's own: cannot happen
      auto it = findings.find(std::string(req.id));
      if (it == findings.end()) {
        result->verdict = Verdict::Error;
        result->reason = "no reader probe judged this requirement";
      } else {
        judged_by(it->second.first, *it->second.second, strict, *result);
      }
      results.push_back(std::move(*result));
    }
  }
  return results;
}

}  // namespace tracecorr::profiler

// The suite's probes: each picks the sessions its rules need and hands their
// plain evidence to the shared checks (otel_process_context/checks.hpp, also
// inspect's) or to the watch judges (judges.hpp).
#include "probes.hpp"

#include <algorithm>

#include "evidence.hpp"
#include "judges.hpp"
#include "otel_process_context/checks.hpp"

namespace tracecorr::otel_process_context {
namespace {

using conform::SessionSet;

// How bad an outcome is, for keeping the worst of several looks.
int severity(Finding::Outcome o) {
  switch (o) {
    case Finding::Outcome::Violated: return 4;
    case Finding::Outcome::KitError: return 3;
    case Finding::Outcome::Tolerated: return 2;
    case Finding::Outcome::Met: return 1;
    case Finding::Outcome::NotApplicable: return 0;
  }
  return 0;
}

std::vector<const ContextFacts*> sessions_run(const SessionSet& sessions) {
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

class SeqlockProbe final : public conform::Probe {
 public:
  std::string name() const override { return "seqlock"; }
  std::vector<std::string> requirements() const override { return {"PCTX-07", "PCTX-08", "PCTX-09", "PCTX-10"}; }
  std::vector<std::string> sessions() const override { return {kWatchedSession, kReadSession}; }
  // Only the torn-read count (PCTX-10) reads both: the stores are the watched session's.
  std::vector<std::string> sessions_for(const std::string& requirement) const override {
    if (requirement == "PCTX-10") return sessions();
    return {kWatchedSession};
  }
  std::vector<Finding> judge(const SessionSet& sessions) const override {
    std::vector<Finding> out;
    if (const auto* watched = facts(sessions, kWatchedSession)) {
      out.push_back(judge_timestamp_written_last(*watched));
      out.push_back(judge_zeroed_before_update(*watched));
      out.push_back(judge_timestamp_moves_forward(*watched));
    } else {
      out = needs_watched_session({"PCTX-07", "PCTX-08", "PCTX-09"});
    }
    out.push_back(judge_no_torn_read(sessions_run(sessions)));
    return out;
  }
  std::size_t minimum_evidence(const std::string& requirement) const override {
    return requirement == "PCTX-10" ? kMinimumConsistentReads : 1;
  }
};

class NamingProbe final : public conform::Probe {
 public:
  std::string name() const override { return "naming"; }
  std::vector<std::string> requirements() const override { return {"PCTX-13", "PCTX-14"}; }
  std::vector<std::string> sessions() const override { return {kWatchedSession}; }
  std::vector<Finding> judge(const SessionSet& sessions) const override {
    const auto* watched = facts(sessions, kWatchedSession);
    if (!watched) return needs_watched_session(requirements());
    return {judge_named_on_publish(*watched), judge_named_on_update(*watched)};
  }
};

class ForkProbe final : public conform::Probe {
 public:
  std::string name() const override { return "fork"; }
  std::vector<std::string> requirements() const override { return {"PCTX-11"}; }
  std::vector<std::string> sessions() const override { return {kWatchedSession, kReadSession}; }
  // The read session only stands in when no watched session ran (attach mode).
  std::vector<std::string> sessions_for(const std::string&) const override { return {kWatchedSession}; }
  std::vector<Finding> judge(const SessionSet& sessions) const override {
    // The watched session also sees forks; without it, the flag alone.
    if (const auto* watched = facts(sessions, kWatchedSession)) return {judge_not_inherited(*watched)};
    if (const auto* read = facts(sessions, kReadSession)) return {judge_not_inherited(*read)};
    return none_ran(requirements());
  }
};

}  // namespace

std::vector<std::unique_ptr<conform::Probe>> make_probes() {
  std::vector<std::unique_ptr<conform::Probe>> p;
  p.push_back(std::make_unique<MappingProbe>());
  p.push_back(std::make_unique<SeqlockProbe>());
  p.push_back(std::make_unique<NamingProbe>());
  p.push_back(std::make_unique<ForkProbe>());
  return p;
}

}  // namespace tracecorr::otel_process_context

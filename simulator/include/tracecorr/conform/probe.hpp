// Conformance probes: one per requirement area, each judging the evidence
// that its protocol's scenarios collected in one or more sessions (suite.hpp).
//
// A probe never drives the target itself: scenarios act, sessions record,
// probes judge. So every verdict can be traced to recorded evidence, and a
// probe can be re-read as the requirement's words plus the rule that checks it.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tracecorr/conform/result.hpp"
#include "tracecorr/finding.hpp"
#include "tracecorr/conform/session_evidence.hpp"

namespace tracecorr::conform {

// What the sessions of one run observed, by name (scenarios.hpp names them).
// In attach mode only the attached session exists.
class SessionSet {
 public:
  void add(SessionEvidence evidence) {
    auto name = evidence.name;
    sessions_.insert_or_assign(std::move(name), std::move(evidence));
  }
  const SessionEvidence* find(const std::string& name) const {
    auto it = sessions_.find(name);
    return it == sessions_.end() ? nullptr : &it->second;
  }
  bool attach_mode = false;

 private:
  std::map<std::string, SessionEvidence> sessions_;
};

class Probe {
 public:
  virtual ~Probe() = default;
  virtual std::string name() const = 0;  // "msg": also the file probes/<protocol>/msg_probe.cpp
  virtual std::vector<std::string> requirements() const = 0;
  // Sessions whose evidence the probe reads: the runner opens each needed one.
  virtual std::vector<std::string> sessions() const = 0;
  // The sessions that judging `requirement` reads (some of sessions()): all a
  // run limited by --only opens, and the only ones whose failure makes the
  // requirement an error. A probe whose requirements read different sessions
  // says so, so that a kill matrix's `--only ID` runs launch no more targets
  // than the rule needs; the verdict is the same as in a full run because the
  // judge reads nothing else for it.
  virtual std::vector<std::string> sessions_for(const std::string& requirement) const {
    (void)requirement;
    return sessions();
  }
  // One Finding per requirement it covers (a requirement left out is an Error).
  virtual std::vector<Finding> judge(const SessionSet& sessions) const = 0;
  // The least evidence a pass on `requirement` needs (Finding::evidence_count).
  virtual std::size_t minimum_evidence(const std::string& requirement) const {
    (void)requirement;
    return 1;
  }
};


// A probe whose requirements all read one session's protocol evidence, of
// the package's own type `Facts`: every requirement not applicable when that
// session did not run (attach mode runs one); otherwise the package's judge.
template <class Facts>
class SessionFactsProbe : public Probe {
 public:
  SessionFactsProbe(std::string name, std::vector<std::string> ids, const char* session)
      : name_(std::move(name)), ids_(std::move(ids)), session_(session) {}
  std::string name() const override { return name_; }
  std::vector<std::string> requirements() const override { return ids_; }
  std::vector<std::string> sessions() const override { return {session_}; }
  std::vector<Finding> judge(const SessionSet& sessions) const override {
    const auto* evidence = sessions.find(session_);
    const Facts* facts = evidence ? evidence->template protocol_as<Facts>() : nullptr;
    if (!evidence || !facts) {
      std::vector<Finding> out;
      for (const auto& id : ids_) out.push_back(not_applicable(id, "the " + std::string(session_) + " session did not run"));
      return out;
    }
    return judge(*evidence, *facts);
  }

 protected:
  virtual std::vector<Finding> judge(const SessionEvidence& session, const Facts& facts) const = 0;
  const std::vector<std::string>& ids() const { return ids_; }

 private:
  std::string name_;
  std::vector<std::string> ids_;
  const char* session_;
};

// The verdict an outcome becomes before the level and expectations apply
// (a violated SHOULD becomes a warning later, in the runner).
Verdict verdict_of(Finding::Outcome outcome);

// A finding not applicable for want of events (Finding::for_want_of_events)
// whose requirement reads a session (of `read`) whose target was starved of
// CPU (RunQueueWait::starved): the reason for the error conform answers
// instead, naming that session and its figures. nullopt otherwise.
std::optional<std::string> starved_of_events(const Finding& finding, const SessionSet& sessions,
                                             const std::vector<std::string>& read);

}  // namespace tracecorr::conform

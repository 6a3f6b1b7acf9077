// The suite's probes: each picks the session its rules need and hands its
// plain evidence to the judges (judges.hpp).
#include "probes.hpp"

#include "evidence.hpp"
#include "judges.hpp"

namespace tracecorr::otel_thread_context {
namespace {

using conform::SessionSet;

std::vector<Finding> session_missing(const std::vector<std::string>& ids, const std::string& session) {
  std::vector<Finding> out;
  for (const auto& id : ids) out.push_back(not_applicable(id, "the " + session + " session did not run"));
  return out;
}

std::vector<std::string> range(int first, int last, int except = 0) {
  std::vector<std::string> ids;
  for (int i = first; i <= last; ++i)
    if (i != except) ids.push_back("TCTX-" + std::string(i < 10 ? "0" : "") + std::to_string(i));
  return ids;
}

// A probe over one session's facts.
class SessionProbe : public conform::Probe {
 public:
  SessionProbe(std::string name, std::vector<std::string> ids, const char* session)
      : name_(std::move(name)), ids_(std::move(ids)), session_(session) {}
  std::string name() const override { return name_; }
  std::vector<std::string> requirements() const override { return ids_; }
  std::vector<std::string> sessions() const override { return {session_}; }
  std::vector<Finding> judge(const SessionSet& sessions) const override {
    const auto* evidence = sessions.find(session_);
    const auto* f = facts(sessions, session_);
    if (!evidence || !f) return session_missing(ids_, session_);
    return judge(*evidence, *f);
  }

 protected:
  virtual std::vector<Finding> judge(const conform::SessionEvidence& session, const ThreadContextFacts& facts) const = 0;

 private:
  std::string name_;
  std::vector<std::string> ids_;
  const char* session_;
};

// The symbol, its type and size, and the relocations that reach it.
class VariableProbe final : public SessionProbe {
 public:
  VariableProbe() : SessionProbe("variable", range(1, 5), kSampledSession) {}
  std::vector<Finding> judge(const conform::SessionEvidence&, const ThreadContextFacts& f) const override {
    return judge_variable(f);
  }
};

// The reference data in the process context, over the session.
class ReferenceProbe final : public SessionProbe {
 public:
  ReferenceProbe() : SessionProbe("reference", range(6, 10), kSampledSession) {}
  std::vector<Finding> judge(const conform::SessionEvidence&, const ThreadContextFacts& f) const override {
    auto out = judge_reference_data(f);
    out.push_back(judge_key_published_first(f));
    return out;
  }
};

// Every record the sampler read from a stopped thread.
class RecordProbe final : public SessionProbe {
 public:
  RecordProbe() : SessionProbe("record", range(11, 20), kSampledSession) {}
  std::vector<Finding> judge(const conform::SessionEvidence& s, const ThreadContextFacts& f) const override {
    return judge_records(s, f);
  }
  std::size_t minimum_evidence(const std::string& requirement) const override {
    return requirement == "TCTX-14" ? kMinReadsAgainstSpans : 1;
  }
};

// Whether a record is detached once its span ended: the sampled records
// against the spans the writer exported (when each ended).
class DetachProbe final : public SessionProbe {
 public:
  DetachProbe() : SessionProbe("detach", {"TCTX-27"}, kSampledSession) {}
  std::vector<Finding> judge(const conform::SessionEvidence& s, const ThreadContextFacts& f) const override {
    return {judge_detach(s, f)};
  }
  std::size_t minimum_evidence(const std::string&) const override { return kMinReadsAgainstSpans; }
};

// Each thread's stores to its pointer and record, under hardware watchpoints
// (TCTX-27, detaching, needs the spans' end times: DetachProbe).
class PublicationProbe final : public SessionProbe {
 public:
  PublicationProbe() : SessionProbe("publication", range(21, 28, 27), kWatchedSession) {}
  std::vector<Finding> judge(const conform::SessionEvidence&, const ThreadContextFacts& f) const override {
    return judge_publication(f);
  }
};

}  // namespace

std::vector<std::unique_ptr<conform::Probe>> make_probes() {
  std::vector<std::unique_ptr<conform::Probe>> probes;
  probes.push_back(std::make_unique<VariableProbe>());
  probes.push_back(std::make_unique<ReferenceProbe>());
  probes.push_back(std::make_unique<RecordProbe>());
  probes.push_back(std::make_unique<DetachProbe>());
  probes.push_back(std::make_unique<PublicationProbe>());
  return probes;
}

}  // namespace tracecorr::otel_thread_context

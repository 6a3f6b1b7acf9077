// PCTXR-01..06: the process context a profiler reads from outside, judged by
// the resources its samples carry against the publications the stage's
// writers journaled (`context` events: what each publication held, and the
// values written while its timestamp was 0, which a reader that keeps the
// seqlock never takes).
#include <algorithm>
#include <set>

#include "reader.hpp"

namespace tracecorr::otel_process_context::reader {
namespace {

using profiler::MemberEvidence;
using profiler::ReaderEvidence;

// Whether the sample's resource holds any of `values`; the one it holds.
const std::string* resource_holds(const profiles::ProfileSample& s, const std::set<std::string>& values) {
  if (!s.resource) return nullptr;
  for (const auto& [key, value] : *s.resource)
    if (const auto* text = value.as_string(); text && values.count(*text)) return text;
  return nullptr;
}

std::set<std::string> published_values(const MemberEvidence& m) {
  std::set<std::string> values;
  for (const auto& c : m.truth.contexts)
    if (c.published_at != 0)
      for (const auto& [key, value] : c.resource) values.insert(value);
  return values;
}

std::set<std::string> poison_values(const MemberEvidence& m) {
  std::set<std::string> values;
  for (const auto& c : m.truth.contexts)
    for (const auto& v : c.poison_values) values.insert(v);
  return values;
}

bool shows(const MemberEvidence& m, const std::string& hazard) {
  return std::find(m.member.hazards.begin(), m.member.hazards.end(), hazard) != m.member.hazards.end();
}

// Members whose process context was damaged (reader/stage.cpp): judged by
// PCTXR-02 and 05, not as publishers.
bool damaged(const MemberEvidence& m) {
  return shows(m, "context_wrong_signature") || shows(m, "context_wrong_version") || shows(m, "context_invalid");
}

// Every member that published a (sound) process context and was sampled.
std::vector<const MemberEvidence*> publishing(const ReaderEvidence& e) {
  std::vector<const MemberEvidence*> out;
  for (const auto& m : e.members)
    if (!m.truth.contexts.empty() && !m.samples.empty() && !damaged(m)) out.push_back(&m);
  return out;
}

Finding judge_found(const ReaderEvidence& e) {
  std::vector<std::string> missed;
  std::size_t carried = 0, members_read = 0;
  const auto members = publishing(e);
  for (const auto* m : members) {
    const auto values = published_values(*m);
    const auto n = std::count_if(m->samples.begin(), m->samples.end(),
                                 [&](const auto* s) { return resource_holds(*s, values) != nullptr; });
    carried += static_cast<std::size_t>(n);
    if (n > 0)
      ++members_read;
    else
      missed.push_back(m->member.name + " (" + std::to_string(m->samples.size()) + " samples)");
  }
  if (members_read == 0)
    return kit_error("PCTXR-01", "inconclusive: no sample of the " + std::to_string(members.size()) +
                                     " writers publishing a process context carried any of its resource values: "
                                     "the profiler may not export process context resources");
  if (!missed.empty()) {
    std::string list;
    for (const auto& m : missed) list += (list.empty() ? "" : ", ") + m;
    return violated("PCTXR-01", "the process context of " + list + " was never read, while " +
                                    std::to_string(members_read) + " other writers' were");
  }
  return met("PCTXR-01", carried, std::to_string(carried) + " samples of " + std::to_string(members_read) +
                                      " writers carried their process context's resource");
}

Finding judge_seqlock(const ReaderEvidence& e, const std::string& id, const std::string& what) {
  std::size_t exercised = 0, bad = 0, showing = 0;
  std::vector<Evidence> shown;
  for (const auto* m : publishing(e)) {
    const auto poison = poison_values(*m);
    showing += poison.empty() ? 0 : 1;
    if (poison.empty()) continue;
    for (const auto* s : m->samples) {
      ++exercised;
      if (const auto* v = resource_holds(*s, poison)) {
        ++bad;
        if (shown.size() < profiler::kExamplesKept)
          shown.push_back(profiler::sample_evidence(m->member.name, *s, profiler::check_sample(*m, *s, e.tolerance_ns),
                                                    "a published resource, not \"" + *v + "\""));
      }
    }
  }
  if (bad > 0) return violated(id, std::to_string(bad) + " samples carried " + what, shown);
  if (showing == 0)
    return not_applicable(id, "no stage member wrote a payload a seqlock-ignoring reader would take (values "
                              "journaled as poison) yet");
  return met(id, exercised, std::to_string(exercised) + " samples of writers whose process context was rewritten under a "
                                                        "zero timestamp, none carried " + what);
}

// Members whose mapping carries a wrong signature or an unsupported version:
// their resource values (journaled as poison) are never a sample's.
Finding judge_identity(const ReaderEvidence& e) {
  std::size_t exercised = 0, bad = 0;
  std::vector<Evidence> shown;
  for (const auto& m : e.members) {
    if (!shows(m, "context_wrong_signature") && !shows(m, "context_wrong_version")) continue;
    const auto poison = poison_values(m);
    if (poison.empty()) continue;  // its writer did not damage the header (the journal says so)
    for (const auto* s : m.samples) {
      ++exercised;
      if (const auto* v = resource_holds(*s, poison)) {
        ++bad;
        if (shown.size() < profiler::kExamplesKept)
          shown.push_back(profiler::sample_evidence(m.member.name, *s, profiler::check_sample(m, *s, e.tolerance_ns),
                                                    "no process context resource, not \"" + *v + "\""));
      }
    }
  }
  if (bad > 0)
    return violated("PCTXR-02", std::to_string(bad) + " samples carried the resource of a mapping whose signature or "
                                                      "version is not OTEP 4719's",
                    shown);
  if (exercised == 0)
    return not_applicable("PCTXR-02", "no stage member publishing a wrong signature or version was sampled");
  return met("PCTXR-02", exercised, std::to_string(exercised) + " samples of writers whose mapping has a wrong "
                                                              "signature or version, none carried its resource");
}

// Writers whose process context was damaged (the stage's hazards) are still
// sampled: the reader went on without it.
Finding judge_graceful(const ReaderEvidence& e) {
  std::size_t samples = 0;
  for (const auto& m : e.members)
    if (shows(m, "context_invalid")) samples += m.samples.size();
  if (samples == 0)
    return not_applicable("PCTXR-05", "no stage member publishes a damaged process context yet");
  return met("PCTXR-05", samples, std::to_string(samples) + " samples of writers with a damaged process context");
}

class ResourceProbe : public profiler::ReaderProbe {
 public:
  std::string name() const override { return "resource"; }
  std::vector<std::string> requirements() const override {
    return {"PCTXR-01", "PCTXR-02", "PCTXR-03", "PCTXR-04", "PCTXR-05", "PCTXR-06"};
  }
  std::vector<Finding> judge(const ReaderEvidence& e) const override {
    return {judge_found(e),
            judge_identity(e),
            judge_seqlock(e, "PCTXR-03", "a value written while the timestamp was 0 (read without waiting for it)"),
            judge_seqlock(e, "PCTXR-04", "a value of a payload that changed while it was copied (the timestamp not "
                                         "checked again)"),
            judge_graceful(e),
            not_applicable("PCTXR-06", "a permission (caching by the timestamp): nothing a reader does breaks it")};
  }
  std::size_t minimum_evidence(const std::string& requirement) const override {
    (void)requirement;
    return 5;
  }
};

}  // namespace

std::unique_ptr<profiler::ReaderProbe> make_resource_probe() { return std::make_unique<ResourceProbe>(); }

}  // namespace tracecorr::otel_process_context::reader

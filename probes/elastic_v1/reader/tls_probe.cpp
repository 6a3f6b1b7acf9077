// TLS-08 and TLS-09: a profiler ignores what it reads while the record's
// valid byte is 0, and the ids while trace-present is 0. Judged like OTEP
// 4947's TCTXR-08: the stage's Elastic agent journals each state of its
// record, with the ids a reader must not report (`poison`).
#include "reader.hpp"

namespace tracecorr::elastic_v1::reader {
namespace {

using profiler::ReaderEvidence;
using Kind = profiler::SampleCheck::Kind;

Finding judge_poison(const ReaderEvidence& e, const std::string& id, const std::string& hazard, const std::string& what) {
  std::size_t exercised = 0, bad = 0;
  std::vector<Evidence> shown;
  for (const auto* m : elastic_members(e)) {
    auto t = profiler::tally(*m, e.tolerance_ns);
    for (const auto& s : t.checked) {
      if (!profiler::around_hazard(*m, *s.sample, e.tolerance_ns, hazard)) continue;
      ++exercised;
      if (s.check.kind != Kind::Poisoned) continue;
      ++bad;
      if (shown.size() < profiler::kExamplesKept)
        shown.push_back(profiler::sample_evidence(m->member.name, *s.sample, s.check, "no link"));
    }
  }
  if (bad > 0) return violated(id, std::to_string(bad) + " samples reported " + what, shown);
  if (exercised == 0)
    return not_applicable(id, "no sample of the stage's Elastic agents fell in a window showing " + hazard);
  return met(id, exercised, std::to_string(exercised) + " samples taken while the record showed " + hazard + ", none reported " + what);
}

class TlsProbe : public profiler::ReaderProbe {
 public:
  std::string name() const override { return "tls"; }
  std::vector<std::string> requirements() const override { return {"TLS-08", "TLS-09"}; }
  std::vector<Finding> judge(const ReaderEvidence& e) const override {
    return {judge_poison(e, "TLS-08", "valid_0_poison", "ids read while the record's valid byte was 0"),
            judge_poison(e, "TLS-09", "trace_present_0_poison", "ids read while trace-present was 0")};
  }
  std::size_t minimum_evidence(const std::string&) const override { return 5; }
};

}  // namespace

std::unique_ptr<profiler::ReaderProbe> make_tls_probe() { return std::make_unique<TlsProbe>(); }

}  // namespace tracecorr::elastic_v1::reader

// NJSR-02, 03 and 13: every TLS model of the stage is read (its samples carry
// their thread's context), a context reported is one the thread was in at the
// sample's time (never a pair read while the thread ran on), and no failed
// walk yields ids from elsewhere.
#include <algorithm>

#include "reader.hpp"

namespace tracecorr::otel_nodejs_thread_context::reader {
namespace {

using Kind = profiler::SampleCheck::Kind;

struct Coverage {
  std::size_t right = 0;
  std::size_t with_context = 0;               // samples whose states all had a context
  std::size_t missing_after_first_right = 0;  // before the first right one: discovery
};

Coverage coverage(const profiler::MemberTally& tally) {
  Coverage c;
  bool seen_right = false;
  for (const auto& s : tally.checked) {
    if (s.check.kind == Kind::Right) seen_right = true, ++c.right, ++c.with_context;
    if (s.check.kind == Kind::Missing) ++c.with_context, c.missing_after_first_right += seen_right;
  }
  return c;
}

Finding judge_models(const ReaderEvidence& e) {
  std::string failed, thin;
  std::vector<Evidence> shown;
  std::size_t right = 0;
  for (const auto* m : read_members(e)) {
    const auto tally = profiler::tally(*m, e.tolerance_ns);
    const auto c = coverage(tally);
    right += c.right;
    if (c.with_context < kMinSamples) {
      thin += (thin.empty() ? "" : ", ") + m->member.name + " (" + std::to_string(c.with_context) + ")";
      continue;
    }
    if (c.right > 0 && c.missing_after_first_right <= kMissingShare * static_cast<double>(c.with_context)) continue;
    failed += (failed.empty() ? "" : "; ") + m->member.layout + " [" + m->member.name + "]: " + std::to_string(c.right) +
              " of " + std::to_string(c.with_context) + " samples carried the context";
    for (const auto& s : tally.checked)
      if (s.check.kind == Kind::Missing && shown.size() < profiler::kExamplesKept) {
        shown.push_back(profiler::sample_evidence(m->member.name, *s.sample, s.check, "the published context"));
        break;
      }
  }
  if (!failed.empty()) return violated("NJSR-02", "samples without their thread's context in " + failed, shown);
  if (!thin.empty())
    return kit_error("NJSR-02", "inconclusive: too few samples of a published context in " + thin + " (at least " +
                                    std::to_string(kMinSamples) + " each)");
  if (read_members(e).empty()) return kit_error("NJSR-02", "inconclusive: no Node.js writer of the stage ran");
  return met("NJSR-02", right, "the addon was read in static and dynamic TLS: " + std::to_string(right) +
                                   " samples carried their thread's context");
}

// Every state around the sample had no context: ids reported there are the
// walk's hazard rules' to judge (walk_probe.cpp), whatever kind they are.
bool around_nothing(const ReaderEvidence& e, const HazardSample& s) {
  const auto around = profiler::states_around(*s.member, *s.sample.sample, e.tolerance_ns);
  return std::none_of(around.begin(), around.end(), [](const auto* st) { return st->context.has_value(); });
}

// Samples of read members that `wrong` picks out, as a finding of `id`;
// `where_context`: only where a state around the sample had a context.
template <typename Wrong>
Finding judge_samples(const ReaderEvidence& e, const std::string& id, Wrong wrong, const std::string& what,
                      bool where_context) {
  std::vector<Evidence> shown;
  std::size_t bad = 0;
  const auto samples = samples_in(e, "");
  for (const auto& s : samples) {
    if (!wrong(s.sample) || (where_context && around_nothing(e, s))) continue;
    ++bad;
    if (shown.size() < profiler::kExamplesKept)
      shown.push_back(profiler::sample_evidence(s.member->member.name, *s.sample.sample, s.sample.check,
                                                "the thread's context at that time, or none"));
  }
  if (bad > 0) return violated(id, std::to_string(bad) + " samples reported " + what, shown);
  return met(id, samples.size(), std::to_string(samples.size()) + " samples taken, none reported " + what);
}

class LinkProbe : public ReaderProbe {
 public:
  std::string name() const override { return "link"; }
  std::vector<std::string> requirements() const override { return {"NJSR-02", "NJSR-03", "NJSR-13"}; }
  std::vector<Finding> judge(const ReaderEvidence& e) const override {
    const auto stale_or_torn = [](const profiler::CheckedSample& s) {
      return s.check.kind == Kind::Stale || s.check.kind == Kind::Torn;
    };
    const auto from_nowhere = [](const profiler::CheckedSample& s) { return s.check.kind == Kind::Unknown; };
    return {judge_models(e),
            judge_samples(e, "NJSR-03", stale_or_torn,
                          "a context the thread was not in at the sample's time (read while it ran on)", true),
            judge_samples(e, "NJSR-13", from_nowhere, "ids the thread never published (a failed walk read on)", false)};
  }
  std::size_t minimum_evidence(const std::string& requirement) const override {
    return requirement == "NJSR-02" ? 1 : kMinSamples;
  }
};

}  // namespace

std::unique_ptr<ReaderProbe> make_link_probe() { return std::make_unique<LinkProbe>(); }

}  // namespace tracecorr::otel_nodejs_thread_context::reader

// TCTXR-05..08 and 14: the link a profiler reports for a sample is the
// context the thread published at that time, in every TLS model; never ids
// of a record whose valid is not 1, never a context around a NULL pointer,
// never a pair torn from two records, never ids from elsewhere.
#include <algorithm>
#include <functional>

#include "reader.hpp"

namespace tracecorr::otel_thread_context::reader {
namespace {

using profiler::CheckedSample;
using profiler::MemberTally;
using Kind = profiler::SampleCheck::Kind;

// A member read in its TLS model: its samples of published contexts after
// the first one the profiler got right (what comes before is discovery) are
// almost all right. kMissingShare of them may be missing: a state's first
// moments, a sample the sampler could not finish.
constexpr double kMissingShare = 0.10;
constexpr std::size_t kMinSamplesPerMember = 5;

struct Coverage {
  std::size_t right = 0;
  std::size_t missing_after_first_right = 0;
  std::size_t with_context = 0;  // right + missing, any time
};

Coverage coverage(const MemberTally& t) {
  Coverage c;
  bool seen_right = false;
  for (const auto& s : t.checked) {
    if (s.check.kind == Kind::Right) {
      seen_right = true;
      ++c.right;
      ++c.with_context;
    } else if (s.check.kind == Kind::Missing) {
      ++c.with_context;
      if (seen_right) ++c.missing_after_first_right;
    }
  }
  return c;
}

Finding judge_models(const ReaderEvidence& e) {
  std::vector<std::string> failed, thin;
  std::vector<Evidence> shown;
  std::size_t right = 0;
  for (const auto* m : read_members(e)) {
    // A writer whose records are never valid (valid 2) publishes no context to read.
    if (std::none_of(m->truth.states.begin(), m->truth.states.end(), [](const auto& st) { return st.context.has_value(); }))
      continue;
    auto t = profiler::tally(*m, e.tolerance_ns);
    auto c = coverage(t);
    right += c.right;
    if (c.with_context < kMinSamplesPerMember) {
      thin.push_back(m->member.name + " (" + std::to_string(c.with_context) + " samples of a published context)");
      continue;
    }
    const bool none = c.right == 0;
    const bool holes = c.missing_after_first_right > kMissingShare * static_cast<double>(c.with_context);
    if (!none && !holes) continue;
    failed.push_back(m->member.layout + " [" + m->member.name + "]: " + std::to_string(c.right) + " of " +
                     std::to_string(c.with_context) + " samples carried the context");
    for (const auto& s : t.checked)
      if (s.check.kind == Kind::Missing && shown.size() < profiler::kExamplesKept * 3) {
        shown.push_back(profiler::sample_evidence(m->member.name, *s.sample, s.check, "the published context"));
        break;
      }
  }
  std::string list;
  for (const auto& f : failed) list += (list.empty() ? "" : "; ") + f;
  if (!failed.empty()) return violated("TCTXR-05", "samples without their thread's context in " + list, shown);
  if (!thin.empty()) {
    std::string which;
    for (const auto& f : thin) which += (which.empty() ? "" : ", ") + f;
    return kit_error("TCTXR-05", "inconclusive: too few samples of " + which + " (at least " +
                                     std::to_string(kMinSamplesPerMember) + " each)");
  }
  return met("TCTXR-05", right, "every TLS model of the stage was read: " + std::to_string(right) + " samples carried their thread's context");
}

using Wrong = std::function<bool(const MemberEvidence&, const CheckedSample&)>;

// Samples `wrong` picks out, in any read member, as a finding of `id`;
// `hazard`: what the passes rest on (samples while the stage showed it).
Finding judge_samples(const ReaderEvidence& e, const std::string& id, const Wrong& wrong, const std::string& what,
                      const std::string& hazard) {
  std::vector<Evidence> shown;
  std::size_t bad = 0, exercised = 0;
  for (const auto* m : read_members(e)) {
    auto t = profiler::tally(*m, e.tolerance_ns);
    exercised += samples_in_hazard(*m, t, hazard, e.tolerance_ns);
    for (const auto& s : t.checked) {
      if (!wrong(*m, s)) continue;
      ++bad;
      if (shown.size() < profiler::kExamplesKept)
        shown.push_back(profiler::sample_evidence(m->member.name, *s.sample, s.check, "the thread's context at that time, or none"));
    }
  }
  if (bad > 0) return violated(id, std::to_string(bad) + " samples reported " + what, shown);
  return met(id, exercised, std::to_string(exercised) + " samples taken" +
                                (hazard.empty() ? "" : " while the stage showed " + hazard) + ", none reported " + what);
}

// Every state around the sample's time had no context (a NULL pointer, a
// detached thread): a link there was read from nothing.
bool linked_around_nothing(const MemberEvidence& m, const CheckedSample& s, std::uint64_t tolerance_ns) {
  if (!s.sample->link || s.check.kind == Kind::Right || s.check.kind == Kind::Poisoned) return false;
  auto around = profiler::states_around(m, *s.sample, tolerance_ns);
  return !around.empty() && std::none_of(around.begin(), around.end(), [](const auto* st) { return st->context.has_value(); });
}

Wrong of_kind(Kind kind) {
  return [kind](const MemberEvidence&, const CheckedSample& s) { return s.check.kind == kind; };
}

class LinkProbe : public ReaderProbe {
 public:
  std::string name() const override { return "link"; }
  std::vector<std::string> requirements() const override {
    return {"TCTXR-05", "TCTXR-06", "TCTXR-07", "TCTXR-08", "TCTXR-14"};
  }
  std::vector<Finding> judge(const ReaderEvidence& e) const override {
    const auto tol = e.tolerance_ns;
    const Wrong torn_or_stale = [tol](const MemberEvidence& m, const CheckedSample& s) {
      return (s.check.kind == Kind::Torn || s.check.kind == Kind::Stale) && !linked_around_nothing(m, s, tol);
    };
    const Wrong from_nothing = [tol](const MemberEvidence& m, const CheckedSample& s) {
      return linked_around_nothing(m, s, tol);
    };
    return {judge_models(e),
            judge_samples(e, "TCTXR-06", torn_or_stale,
                          "a context the thread was not in at the sample's time (torn from two records, or stale: "
                          "read while the thread ran on)", ""),
            judge_samples(e, "TCTXR-07", from_nothing, "a context while the thread's pointer was NULL", "null_pointer"),
            judge_samples(e, "TCTXR-08", of_kind(Kind::Poisoned), "the ids of a record whose valid was not 1",
                          "valid_0_poison"),
            judge_samples(e, "TCTXR-14", of_kind(Kind::Unknown), "ids the thread never published (another source's)", "")};
  }
  std::size_t minimum_evidence(const std::string& requirement) const override {
    return requirement == "TCTXR-05" ? 1 : 5;
  }
};

}  // namespace

std::unique_ptr<ReaderProbe> make_link_probe() { return std::make_unique<LinkProbe>(); }

}  // namespace tracecorr::otel_thread_context::reader

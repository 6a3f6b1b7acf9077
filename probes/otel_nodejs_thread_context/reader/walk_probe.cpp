// NJSR-04..06, 08, 10, 11 and 14: the walk's answers in the states the stage
// shows in turn (README.md of the fixtures, "Stage hazards"). Where the walk
// must end without a context (a closed gate over a whole graph, no frame, a
// rehash's forwarding pointer over a whole old table, a detached key, a null
// record slot), no sample carries ids, least of all the poison ids behind it;
// where it must go on (deleted entries on the chain, map words that are
// forwarding addresses), the samples carry the thread's context.
#include <algorithm>

#include "reader.hpp"

namespace tracecorr::otel_nodejs_thread_context::reader {
namespace {

using Kind = profiler::SampleCheck::Kind;

struct HazardRule {
  const char* id;
  const char* hazard;
  const char* state;  // in the words of the rule
  bool has_context;   // the walk must reach the record
};

const HazardRule kRules[] = {
    {"NJSR-04", "gate_closed_poison", "a closed gate (cped_slot 0) over a whole graph to a valid record", false},
    {"NJSR-05", "frame_undefined", "the slot holding undefined (nothing attached)", false},
    {"NJSR-06", "rehash_forward", "a table whose element count is a heap pointer (a rehash forwarding it)", false},
    {"NJSR-08", "deleted_entries", "deleted entries on the key's chain (its index past the element count)", true},
    {"NJSR-10", "frame_detached", "a frame mapping the key to undefined (detached)", false},
    {"NJSR-11", "record_null", "a wrapper whose record slot is 0 (teardown in progress)", false},
    {"NJSR-14", "map_forwarded", "map words holding forwarding addresses (a scavenge in flight)", true},
};

Evidence shown_sample(const HazardSample& s, const HazardRule& rule) {
  return profiler::sample_evidence(s.member->member.name, *s.sample.sample, s.sample.check,
                                   rule.has_context ? "the thread's context" : "no context");
}

Finding judge_rule(const ReaderEvidence& e, const HazardRule& rule) {
  const auto samples = samples_in(e, rule.hazard);
  std::vector<Evidence> shown;
  std::size_t wrong = 0, right = 0, missing = 0;
  for (const auto& s : samples) {
    const bool bad = reports_wrong_ids(s.sample);
    wrong += bad;
    right += s.sample.check.kind == Kind::Right;
    missing += s.sample.check.kind == Kind::Missing;
    if ((bad || s.sample.check.kind == Kind::Missing) && shown.size() < profiler::kExamplesKept)
      shown.push_back(shown_sample(s, rule));
  }
  const std::string in = " while the stage showed " + std::string(rule.state);
  if (wrong > 0)
    return violated(rule.id, std::to_string(wrong) + " of " + std::to_string(samples.size()) +
                                 " samples reported ids no state around them holds" + in, shown);
  if (rule.has_context && right + missing >= kMinSamples &&
      (right == 0 || missing > kMissingShare * static_cast<double>(right + missing)))
    return violated(rule.id, std::to_string(missing) + " of " + std::to_string(right + missing) +
                                 " samples came without the thread's context" + in, shown);
  const std::size_t judged = rule.has_context ? right + missing : samples.size();
  return met(rule.id, judged, std::to_string(judged) + " samples taken" + in + (rule.has_context ? ", " + std::to_string(right) + " with the thread's context" : ", none with ids"));
}

class WalkProbe : public ReaderProbe {
 public:
  std::string name() const override { return "walk"; }
  std::vector<std::string> requirements() const override {
    std::vector<std::string> ids;
    for (const auto& r : kRules) ids.emplace_back(r.id);
    ids.insert(ids.end(), {"NJSR-07", "NJSR-09"});
    return ids;
  }
  std::vector<Finding> judge(const ReaderEvidence& e) const override {
    std::vector<Finding> out;
    for (const auto& r : kRules) out.push_back(judge_rule(e, r));
    // No legal V8 table breaks these bounds, and a reader that ignores them
    // reads no other ids on the tables V8 makes: nothing on the stage can
    // tell it from a conforming one. The walk's checks are unit-tested.
    out.push_back(not_applicable("NJSR-07", "no stage member shows a table outside the bounds (V8 makes none); "
                                            "the walk's bucket and capacity checks are unit-tested"));
    out.push_back(not_applicable("NJSR-09", "no stage member shows a chain past the cap or a cycle (V8 makes "
                                            "none); the walk's chain cap is unit-tested"));
    return out;
  }
  std::size_t minimum_evidence(const std::string&) const override { return kMinSamples; }
};

}  // namespace

std::unique_ptr<ReaderProbe> make_walk_probe() { return std::make_unique<WalkProbe>(); }

}  // namespace tracecorr::otel_nodejs_thread_context::reader

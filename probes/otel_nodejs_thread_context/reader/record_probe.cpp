// NJSR-12: the record at the walk's end is read by OTEP 4947's rules: only
// valid 1 is read (the stage attaches records holding poison ids under valid
// 0), attributes are named through the process context's key map, and an
// entry whose key index is past the map is dropped, its value never reported.
#include <algorithm>

#include "reader.hpp"

namespace tracecorr::otel_nodejs_thread_context::reader {
namespace {

using Kind = profiler::SampleCheck::Kind;

struct Tally {
  std::size_t judged = 0, bad = 0;
  std::vector<Evidence> shown;
  std::string first;  // what the first bad sample did

  void count(const HazardSample& s, bool wrong, const std::string& what, const std::string& expected) {
    ++judged;
    if (!wrong) return;
    if (bad++ == 0) first = what;
    if (shown.size() < profiler::kExamplesKept)
      shown.push_back(profiler::sample_evidence(s.member->member.name, *s.sample.sample, s.sample.check, expected));
  }
};

// An attribute of the state the sample reports with another value under its
// key, or its value under another key ("": none). Which keys a profiler
// exports is its choice: a key left out is no misreading.
std::string misread_attribute(const profiler::CheckedSample& s) {
  for (const auto& [key, value] : s.check.matches.front()->context->attributes) {
    const bool in_all = std::all_of(s.check.matches.begin(), s.check.matches.end(), [&](const auto* other) {
      const auto& a = other->context->attributes;
      return std::find(a.begin(), a.end(), profiler::stage::Attribute{key, value}) != a.end();
    });
    if (!in_all) continue;
    const auto* reported = profiler::reported_value(*s.sample, key);
    if (reported ? *reported != value : profiler::reports_any(*s.sample, {value}) != nullptr)
      return key + " = " + value;
  }
  return "";
}

class RecordProbe : public ReaderProbe {
 public:
  std::string name() const override { return "record"; }
  std::vector<std::string> requirements() const override { return {"NJSR-12"}; }
  std::vector<Finding> judge(const ReaderEvidence& e) const override {
    Tally t;
    for (const auto& s : samples_in(e, "valid_0_poison"))
      t.count(s, s.sample.check.kind == Kind::Poisoned, "the ids of a record whose valid was 0", "no context");
    for (const auto& s : samples_in(e, "")) {
      if (s.sample.check.kind != Kind::Right) continue;
      const auto dropped = profiler::dropped_by_all(s.sample.check.matches);
      if (const auto* v = profiler::reports_any(*s.sample.sample, dropped))
        t.count(s, true, "the value of an entry past the key map", "not the value \"" + *v + "\"");
      else if (auto misread = misread_attribute(s.sample); !misread.empty())
        t.count(s, true, "an attribute with another value, or under another key", misread);
      else
        t.count(s, false, "", "");
    }
    if (t.bad > 0)
      return {violated("NJSR-12", std::to_string(t.bad) + " of " + std::to_string(t.judged) +
                                      " samples misread the record, the first: " + t.first, t.shown)};
    return {met("NJSR-12", t.judged, std::to_string(t.judged) + " samples read the record as OTEP 4947's rules say: "
                                                                "valid 1 only, attributes named by the key map, "
                                                                "entries past it dropped")};
  }
  std::size_t minimum_evidence(const std::string&) const override { return kMinSamples; }
};

}  // namespace

std::unique_ptr<ReaderProbe> make_record_probe() { return std::make_unique<RecordProbe>(); }

}  // namespace tracecorr::otel_nodejs_thread_context::reader

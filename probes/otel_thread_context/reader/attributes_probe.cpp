// TCTXR-01, 09..13, 16: the attributes a profiler reports with a right link
// are the record's, named through the key map current at that time: a key
// appended late is named once the map names it, an entry past the map is
// dropped, the last of two duplicates wins, nothing past the entry that does
// not fit nor past the 1024-byte bound is reported.
#include <algorithm>
#include <map>

#include "reader.hpp"

namespace tracecorr::otel_thread_context::reader {
namespace {

using profiler::CheckedSample;
using Kind = profiler::SampleCheck::Kind;

// A record naming a key the reader's map lacks makes a conforming reader
// refresh the map (the stage appends a new key every cycle and uses it at
// once, in one state of hazard-ms). How soon is the reader's own pace, not
// a deadline: on a busy host its refresh may take longer than a state lasts.
// Samples this long into the state are counted; the verdict is whether the
// reader ever named a key appended after it started (it refreshed) or never.
constexpr std::uint64_t kLateKeyGraceNs = 100'000'000;

using Matches = std::vector<const profiler::stage::ThreadState*>;
using profiler::dropped_by_all;
using profiler::reported_value;
using profiler::reports_any;

bool has_attribute(const profiler::stage::ThreadState& st, const std::string& key, const std::string& value) {
  const auto& a = st.context->attributes;
  return std::find(a.begin(), a.end(), profiler::stage::Attribute{key, value}) != a.end();
}

bool shows(const Matches& matches, const std::string& hazard) {
  return std::any_of(matches.begin(), matches.end(), [&](const auto* st) { return st->hazard == hazard; });
}

// Right samples of every read member.
template <typename F>
void each_right(const ReaderEvidence& e, F&& f) {
  for (const auto* m : read_members(e)) {
    auto t = profiler::tally(*m, e.tolerance_ns);
    for (const auto& s : t.checked)
      if (s.check.kind == Kind::Right) f(*m, s);
  }
}

// One sample's attributes against the states it may be of: named right (any
// state's key and value), or a state's value under another name.
struct Naming {
  bool any_named = false;
  std::vector<std::string> misnamed;  // "key = value" the sample carried under another key
};

Naming naming(const CheckedSample& s) {
  Naming n;
  for (const auto* st : s.check.matches)
    for (const auto& [key, value] : st->context->attributes) {
      const auto* reported = reported_value(*s.sample, key);
      if (reported && *reported == value) {
        n.any_named = true;
      } else if (!reported && reports_any(*s.sample, {value})) {
        n.misnamed.push_back(key + " = " + value);
      }
    }
  return n;
}

Finding judge_naming(const ReaderEvidence& e) {
  std::size_t named = 0, misnamed = 0, with_attributes = 0;
  std::vector<Evidence> shown;
  each_right(e, [&](const MemberEvidence& m, const CheckedSample& s) {
    const bool any = std::any_of(s.check.matches.begin(), s.check.matches.end(),
                                 [](const auto* st) { return !st->context->attributes.empty(); });
    if (!any) return;
    ++with_attributes;
    auto n = naming(s);
    if (n.any_named) ++named;
    misnamed += n.misnamed.size();
    if (!n.misnamed.empty() && shown.size() < profiler::kExamplesKept)
      shown.push_back(profiler::sample_evidence(m.member.name, *s.sample, s.check, n.misnamed.front()));
  });
  if (misnamed > 0)
    return violated("TCTXR-01", std::to_string(misnamed) + " attributes reported under another key than the key map names", shown);
  if (named == 0)
    return kit_error("TCTXR-01", "inconclusive: none of " + std::to_string(with_attributes) +
                                     " samples of records with attributes carried them: nothing shows how the profiler names them");
  return met("TCTXR-01", named, std::to_string(named) + " samples carried record attributes named as the process context's key map names them");
}

// First time each key appeared in a member's states.
std::map<std::string, std::uint64_t> first_use(const MemberEvidence& m) {
  std::map<std::string, std::uint64_t> first;
  for (const auto& st : m.truth.states)
    if (st.context)
      for (const auto& [key, value] : st.context->attributes) {
        auto [it, added] = first.emplace(key, st.done_ns);
        if (!added) it->second = std::min(it->second, st.done_ns);
      }
  return first;
}

// Keys first used by the states a sample may be of (appended late, used at
// once), past the grace after those states were published: the sample must
// name them.
Finding judge_late_keys(const ReaderEvidence& e) {
  std::size_t named = 0, dropped = 0;
  std::vector<Evidence> shown;
  for (const auto* m : read_members(e)) {
    const auto first = first_use(*m);
    const auto met = profiler::first_sample_ns(*m);
    auto t = profiler::tally(*m, e.tolerance_ns);
    for (const auto& s : t.checked) {
      if (s.check.kind != Kind::Right || !shows(s.check.matches, "late_key")) continue;
      const auto& some = *s.check.matches.front();
      std::uint64_t published = 0;
      for (const auto* st : s.check.matches) published = std::max(published, st->done_ns);
      for (const auto& [key, value] : some.context->attributes) {
        const bool in_all = std::all_of(s.check.matches.begin(), s.check.matches.end(),
                                        [&, &key = key, &value = value](const auto* st) { return has_attribute(*st, key, value); });
        // No earlier state of the member carried it, and it came after the
        // profiler met the member: a map read at discovery cannot name it.
        const bool late = first.at(key) >= some.begun_ns && some.begun_ns > met;
        if (!in_all || !late || s.sample->time->nanos < published + kLateKeyGraceNs) continue;
        const auto* reported = reported_value(*s.sample, key);
        if (reported && *reported == value) {
          ++named;
        } else if (!reported && s.sample->attributes && !s.sample->attributes->empty()) {
          ++dropped;
          if (shown.size() < profiler::kExamplesKept)
            shown.push_back(profiler::sample_evidence(m->member.name, *s.sample, s.check, key + " = " + value));
        }
      }
    }
  }
  if (dropped > 0 && named == 0) {
    if (dropped < 3)
      return kit_error("TCTXR-10", "inconclusive: " + std::to_string(dropped) + " samples lacked a key appended late and none "
                                   "named one: too few to tell a reader that never refreshes from one met late");
    return violated("TCTXR-10", std::to_string(dropped) + " samples lacked a key appended to the key map and used " +
                                    std::to_string(kLateKeyGraceNs / 1'000'000) + " ms or more earlier, and no sample named any "
                                    "such key: the key map was never refreshed on an unknown index", shown);
  }
  if (dropped > 0)
    return met("TCTXR-10", named, std::to_string(named) + " attributes of keys appended late were named; " +
                                      std::to_string(dropped) + " samples came before the reader's refresh (its own pace)");
  return met("TCTXR-10", named, std::to_string(named) + " attributes of keys appended late were named");
}

// A hazard the member shows in every state (its writer is made so: a mutant
// writer), not in states its journal labels with it.
bool shows_throughout(const MemberEvidence& m, const std::string& hazard) {
  const auto& meant = m.member.hazards;
  const auto& labelled = m.truth.hazards_shown;
  return std::find(meant.begin(), meant.end(), hazard) != meant.end() &&
         std::find(labelled.begin(), labelled.end(), hazard) == labelled.end();
}

// Samples of states showing `hazard` (a state's, or its whole member's) that
// reported a value a conforming reader never takes.
Finding judge_poison_values(const ReaderEvidence& e, const std::string& id, const std::string& hazard, const std::string& what) {
  std::size_t exercised = 0, bad = 0;
  std::vector<Evidence> shown;
  each_right(e, [&](const MemberEvidence& m, const CheckedSample& s) {
    if (!shows(s.check.matches, hazard) && !shows_throughout(m, hazard)) return;
    const auto poison = dropped_by_all(s.check.matches);
    if (poison.empty()) return;  // nothing in this record to take wrongly
    ++exercised;
    if (const auto* v = reports_any(*s.sample, poison)) {
      ++bad;
      if (shown.size() < profiler::kExamplesKept)
        shown.push_back(profiler::sample_evidence(m.member.name, *s.sample, s.check, "not the value \"" + *v + "\""));
    }
  });
  if (bad > 0) return violated(id, std::to_string(bad) + " samples reported " + what, shown);
  return met(id, exercised, std::to_string(exercised) + " samples of records showing " + hazard + ", none reported " + what);
}

class AttributesProbe : public ReaderProbe {
 public:
  std::string name() const override { return "attributes"; }
  std::vector<std::string> requirements() const override {
    return {"TCTXR-01", "TCTXR-09", "TCTXR-10", "TCTXR-11", "TCTXR-12", "TCTXR-13", "TCTXR-16"};
  }
  std::vector<Finding> judge(const ReaderEvidence& e) const override {
    return {judge_naming(e),
            judge_poison_values(e, "TCTXR-09", "entry_overrun", "an entry that did not fit in attrs_data_size"),
            judge_late_keys(e),
            judge_poison_values(e, "TCTXR-11", "out_of_map", "an entry whose key index is past the key map"),
            judge_poison_values(e, "TCTXR-12", "duplicate_key", "the first of two values of one key (the last wins)"),
            not_applicable("TCTXR-13", "a permission (caching known key indexes): nothing a reader does breaks it; "
                                       "the refresh it must still make is TCTXR-10's"),
            judge_poison_values(e, "TCTXR-16", "oversize", "bytes past the 1024-byte bound of a record")};
  }
  std::size_t minimum_evidence(const std::string& requirement) const override {
    return requirement == "TCTXR-01" ? 5 : 3;
  }
};

}  // namespace

std::unique_ptr<ReaderProbe> make_attributes_probe() { return std::make_unique<AttributesProbe>(); }

}  // namespace tracecorr::otel_thread_context::reader

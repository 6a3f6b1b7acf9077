// reference (TCTX-06..10): the thread-local reference data in the process
// context (the key map over the session) and the keys records use against it.
#include "probes.hpp"

#include <algorithm>

#include "judges.hpp"
#include "judging.hpp"
#include "otel_thread_context/checks.hpp"
#include "otel_thread_context/registry.hpp"

namespace tracecorr::otel_thread_context {

namespace {

const Publication* publication_at(const ThreadContextFacts& facts, std::uint64_t published_at_ns) {
  for (const auto& p : facts.publications)
    if (p.published_at_ns == published_at_ns) return &p;
  return nullptr;
}

bool records_carry_entries(const ThreadContextFacts& facts) {
  for (const auto& s : facts.samples)
    if (auto r = decoded(s); r && r->readable() && !r->entries.empty()) return true;
  return false;
}

std::string join_keys(const KeyMap& keys) {
  std::string s;
  for (const auto& k : keys) s += (s.empty() ? "" : ", ") + k;
  return "[" + s + "]";
}

}  // namespace

std::vector<Finding> judge_reference_data(const ThreadContextFacts& facts) {
  std::vector<Finding> out;
  if (facts.not_found) {
    for (auto id : {"TCTX-06", "TCTX-07", "TCTX-08", "TCTX-09"})
      out.push_back(not_applicable(id, "no thread-context writer: " + facts.not_found->message()));
    return out;
  }
  Worst worst;
  const bool entries = records_carry_entries(facts);
  for (const auto& p : facts.publications) {
    if (!p.data) {
      worst.add(kit_error("TCTX-06", "the publication " + std::to_string(p.published_at_ns) + " could not be decoded: " +
                                         (p.error ? p.error->message() : "?")));
      continue;
    }
    for (auto& f : check_reference_data(p.data, entries)) {
      f.reason = "publication " + std::to_string(p.published_at_ns) + ": " + f.reason;
      worst.add(std::move(f));
    }
  }
  out.push_back(worst.take("TCTX-06", "no publication was read"));
  out.push_back(worst.take("TCTX-07", "no publication was read"));

  // TCTX-08: each key map starts with the one before it.
  std::size_t compared = 0;
  const KeyMap* before = nullptr;
  std::uint64_t before_at = 0;
  std::optional<Finding> broken;
  std::size_t appended = 0;
  for (const auto& p : facts.publications) {
    if (!p.data || !p.data->key_map) continue;
    const KeyMap& map = *p.data->key_map;
    if (before) {
      ++compared;
      for (std::size_t i = 0; i < before->size() && !broken; ++i) {
        const std::string now = i < map.size() ? map[i] : std::string("(removed)");
        if (now != (*before)[i])
          broken = violated("TCTX-08", "key index " + std::to_string(i) + " named " + (*before)[i] + " in publication " +
                                           std::to_string(before_at) + " and " + now + " in publication " +
                                           std::to_string(p.published_at_ns) + ": the key map is not append-only",
                            {text_evidence("key map", join_keys(*before) + " then more", join_keys(map))});
      }
      if (map.size() > before->size()) appended += map.size() - before->size();
    }
    before = &map;
    before_at = p.published_at_ns;
  }
  if (broken) out.push_back(*broken);
  else if (compared == 0)
    out.push_back(not_applicable("TCTX-08", "the key map was published once while tracecorr followed the context: "
                                            "nothing to compare"));
  else
    out.push_back(met("TCTX-08", compared, std::to_string(compared) + " key map update(s), each keeping every earlier index (" +
                                               std::to_string(appended) + " key(s) appended)"));
  out.push_back(not_applicable("TCTX-09", "a freedom the writer has (MAY), never judged against it: " +
                                              std::to_string(appended) + " key(s) appended after the first publication seen"));
  return out;
}

// A pass needs a key appended while tracecorr sampled, and records using it:
// keys published before sampling began say nothing of whether a record used
// them first (tracecorr was not looking then).
Finding judge_key_published_first(const ThreadContextFacts& sampled) {
  if (sampled.not_found) return not_applicable("TCTX-10", "no thread-context writer: " + sampled.not_found->message());
  // The smallest key map any publication seen had: indexes past it were appended meanwhile.
  std::optional<std::size_t> first_map_size;
  for (const auto& p : sampled.publications)
    if (p.data && p.data->key_map) first_map_size = std::min(first_map_size.value_or(p.data->key_map->size()), p.data->key_map->size());
  std::size_t judged = 0, unresolved = 0, using_appended = 0;
  for (const auto& s : sampled.samples) {
    auto r = decoded(s);
    if (!r || !r->readable() || r->entries.empty()) continue;
    const Publication* current = s.context_published_at ? publication_at(sampled, *s.context_published_at) : nullptr;
    if (!current || !current->data || !current->data->key_map) {
      ++unresolved;
      continue;
    }
    ++judged;
    const KeyMap& map = *current->data->key_map;
    // An appended key the current publication names: the rule kept, seen.
    if (std::any_of(r->entries.begin(), r->entries.end(),
                    [&](const auto& e) { return e.key >= *first_map_size && e.key < map.size(); }))
      ++using_appended;
    for (const auto& e : r->entries) {
      if (e.key < map.size()) continue;
      // Which later publication names it (TCTX-10), if any (else it is TCTX-11's).
      for (const auto& later : sampled.publications) {
        if (later.published_at_ns <= current->published_at_ns || !later.data || !later.data->key_map ||
            e.key >= later.data->key_map->size())
          continue;
        return violated("TCTX-10",
                        thread_text(s.tid) + ", record " + hex_address(s.record_pointer) + ": key index " +
                            std::to_string(e.key) + " (" + (*later.data->key_map)[e.key] +
                            ") was visible while the current publication (" + std::to_string(current->published_at_ns) +
                            ") had " + std::to_string(map.size()) + " keys; publication " +
                            std::to_string(later.published_at_ns) + " named it later",
                        {text_evidence("key map when the record was read", "index " + std::to_string(e.key) + " named",
                                       join_keys(map))});
      }
    }
  }
  if (judged == 0)
    return not_applicable("TCTX-10", "no sampled record carrying attributes could be matched with the publication current "
                                     "when it was read (" + std::to_string(unresolved) + " unmatched)");
  if (using_appended == 0)
    return not_applicable("TCTX-10", "no key was appended while tracecorr sampled (every publication seen had " +
                                         std::to_string(*first_map_size) + " keys or no record used a later one; " +
                                         std::to_string(judged) + " records carried only keys published before sampling)");
  return met("TCTX-10", using_appended, std::to_string(using_appended) + " sampled record(s) carrying a key appended while "
                                            "tracecorr sampled: each named by the publication current when the thread "
                                            "was stopped (" + std::to_string(judged) + " records with attributes in all)");
}

namespace {

// The reference data in the process context, over the session.
class ReferenceProbe final : public SessionProbe {
 public:
  ReferenceProbe() : SessionProbe("reference", requirement_range(6, 10), kSampledSession) {}
  std::vector<Finding> judge(const conform::SessionEvidence&, const ThreadContextFacts& f) const override {
    auto out = judge_reference_data(f);
    out.push_back(judge_key_published_first(f));
    return out;
  }
};

}  // namespace

std::unique_ptr<conform::Probe> make_reference_probe() { return std::make_unique<ReferenceProbe>(); }

}  // namespace tracecorr::otel_thread_context

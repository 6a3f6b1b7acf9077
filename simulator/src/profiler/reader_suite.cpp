// The reader suites' registry, and what one sample says against its
// thread's timeline (reader_suite.hpp).
#include "tracecorr/profiler/reader_suite.hpp"

#include <algorithm>
#include <chrono>

#include "tracecorr/conform/result.hpp"

namespace tracecorr::profiler {
namespace {

std::vector<const ReaderSuite*>& registry() {
  static std::vector<const ReaderSuite*> suites;
  return suites;
}

bool same_ids(const stage::Context& c, const profiles::SampleLink& link) {
  return c.trace_id == link.trace_id && c.span_id == link.span_id;
}

// The whole timeline of one thread (the states are sorted by tid).
std::pair<std::vector<stage::ThreadState>::const_iterator, std::vector<stage::ThreadState>::const_iterator> thread_states(
    const stage::MemberTruth& truth, std::int64_t tid) {
  auto first = std::lower_bound(truth.states.begin(), truth.states.end(), tid,
                                [](const stage::ThreadState& s, std::int64_t t) { return s.tid < t; });
  auto last = first;
  while (last != truth.states.end() && last->tid == tid) ++last;
  return {first, last};
}

// A link matching no state around its time: what the rest of the thread's
// timeline makes of it.
SampleCheck::Kind misplaced(const stage::MemberTruth& truth, std::int64_t tid, const profiles::SampleLink& link) {
  auto [first, last] = thread_states(truth, tid);
  bool trace_seen = false, span_seen = false;
  for (auto it = first; it != last; ++it)
    if (it->poison && it->poison->first == link.trace_id && it->poison->second == link.span_id)
      return SampleCheck::Kind::Poisoned;
  for (auto it = first; it != last; ++it) {
    if (!it->context) continue;
    if (same_ids(*it->context, link)) return SampleCheck::Kind::Stale;
    trace_seen = trace_seen || it->context->trace_id == link.trace_id;
    span_seen = span_seen || it->context->span_id == link.span_id;
  }
  return trace_seen && span_seen ? SampleCheck::Kind::Torn : SampleCheck::Kind::Unknown;
}

}  // namespace

void register_reader_suite(const ReaderSuite& suite) { registry().push_back(&suite); }

std::vector<const ReaderSuite*> reader_suites() { return registry(); }

const ReaderProbe* reader_probe_for(std::string_view requirement) {
  for (const auto* suite : registry())
    for (const auto& probe : suite->probes())
      for (const auto& id : probe->requirements())
        if (id == requirement) return probe.get();
  return nullptr;
}

const MemberEvidence* ReaderEvidence::member(std::string_view name) const {
  for (const auto& m : members)
    if (m.member.name == name) return &m;
  return nullptr;
}

std::string_view to_string(SampleCheck::Kind kind) {
  switch (kind) {
    case SampleCheck::Kind::Right: return "right";
    case SampleCheck::Kind::Missing: return "missing";
    case SampleCheck::Kind::NoContext: return "no-context";
    case SampleCheck::Kind::Poisoned: return "poisoned";
    case SampleCheck::Kind::Stale: return "stale";
    case SampleCheck::Kind::Torn: return "torn";
    case SampleCheck::Kind::Unknown: return "unknown";
    case SampleCheck::Kind::Unplaced: return "unplaced";
  }
  return "?";
}

std::vector<const stage::ThreadState*> states_around(const MemberEvidence& member, const profiles::ProfileSample& sample,
                                                     std::uint64_t tolerance_ns) {
  if (!sample.time || sample.time->clock != profiles::Clock::Unix || !sample.tid) return {};
  const std::uint64_t t = sample.time->nanos;
  return stage::states_around(member.truth, *sample.tid, t > tolerance_ns ? t - tolerance_ns : 0, t + tolerance_ns);
}

bool around_hazard(const MemberEvidence& member, const profiles::ProfileSample& sample, std::uint64_t tolerance_ns,
                   std::string_view hazard) {
  const auto around = states_around(member, sample, tolerance_ns);
  return std::any_of(around.begin(), around.end(), [&](const auto* st) { return st->hazard == hazard; });
}

SampleCheck check_sample(const MemberEvidence& member, const profiles::ProfileSample& sample,
                         std::uint64_t tolerance_ns) {
  if (!sample.time || sample.time->clock != profiles::Clock::Unix || !sample.tid) return {};
  const auto around = states_around(member, sample, tolerance_ns);
  if (!sample.link) {
    bool all_had_context = !around.empty() && std::all_of(around.begin(), around.end(), [](const auto* s) {
      return s->context.has_value();
    });
    return {all_had_context ? SampleCheck::Kind::Missing : SampleCheck::Kind::NoContext, {}};
  }
  SampleCheck right{SampleCheck::Kind::Right, {}};
  for (const auto* s : around)
    if (s->context && same_ids(*s->context, *sample.link)) right.matches.push_back(s);
  if (!right.matches.empty()) return right;
  return {misplaced(member.truth, *sample.tid, *sample.link), {}};
}

std::size_t MemberTally::count(SampleCheck::Kind kind) const {
  auto it = counts.find(kind);
  return it == counts.end() ? 0 : it->second;
}

std::uint64_t first_sample_ns(const MemberEvidence& member) {
  std::uint64_t first = UINT64_MAX;
  for (const auto* s : member.samples)
    if (s->time && s->time->clock == profiles::Clock::Unix) first = std::min<std::uint64_t>(first, s->time->nanos);
  return first;
}

MemberTally tally(const MemberEvidence& member, std::uint64_t tolerance_ns) {
  MemberTally t;
  t.checked.reserve(member.samples.size());
  for (const auto* s : member.samples) {
    auto c = check_sample(member, *s, tolerance_ns);
    ++t.counts[c.kind];
    t.checked.push_back({s, c});
  }
  return t;
}

const std::string* reported_value(const profiles::ProfileSample& sample, const std::string& key) {
  const auto* v = sample.attribute(key);
  return v ? v->as_string() : nullptr;
}

const std::string* reports_any(const profiles::ProfileSample& sample, const std::vector<std::string>& values) {
  if (!sample.attributes) return nullptr;
  for (const auto& [key, value] : *sample.attributes)
    if (const auto* text = value.as_string(); text && std::find(values.begin(), values.end(), *text) != values.end())
      return text;
  return nullptr;
}

std::vector<std::string> dropped_by_all(const std::vector<const stage::ThreadState*>& matches) {
  std::vector<std::string> out;
  const auto kept = [&](const std::string& v) {
    return std::any_of(matches.begin(), matches.end(), [&](const auto* st) {
      return st->context && std::any_of(st->context->attributes.begin(), st->context->attributes.end(),
                                         [&](const auto& a) { return a.second == v; });
    });
  };
  for (const auto* st : matches)
    for (const auto& v : st->poison_values)
      if (!kept(v)) out.push_back(v);
  return out;
}

Evidence sample_evidence(const std::string& label, const profiles::ProfileSample& sample, const SampleCheck& check,
                         const std::string& expected) {
  std::string actual = "pid " + (sample.pid ? std::to_string(*sample.pid) : std::string("?")) + " tid " +
                       (sample.tid ? std::to_string(*sample.tid) : std::string("?"));
  if (sample.time && sample.time->clock == profiles::Clock::Unix)
    actual += " at " + conform::format_utc(std::chrono::system_clock::time_point(
                           std::chrono::duration_cast<std::chrono::system_clock::duration>(
                               std::chrono::nanoseconds(sample.time->nanos))));
  actual += sample.link ? ": link " + to_hex(sample.link->trace_id) + "/" + to_hex(sample.link->span_id) : ": no link";
  actual += " (" + std::string(to_string(check.kind)) + ")";
  return Evidence{label, expected, actual, {}, {}};
}

}  // namespace tracecorr::profiler

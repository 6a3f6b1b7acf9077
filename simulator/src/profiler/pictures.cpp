// The HTML report's picture of each stage member: every sample that came
// back for it, at its time, in a lane of its kind (right, missing, stale,
// poisoned, ...), with the hazards the member's threads showed beside them.
// The same check the reader probes judge with (check_sample): the picture
// shows their evidence, not another reading of it.
#include <algorithm>
#include <limits>

#include "tracecorr/profiler/reader_suite.hpp"

namespace tracecorr::profiler {
namespace {

using conform::SessionTimeline;
using conform::TimelineEvent;

// Where the member's time starts: its first journaled change, else its first sample.
std::uint64_t origin_ns(const MemberEvidence& m) {
  std::uint64_t origin = first_sample_ns(m);  // UINT64_MAX without one
  for (const auto& s : m.truth.states) origin = std::min(origin, s.begun_ns);
  return origin;
}

double ms_since(std::uint64_t origin, std::uint64_t t) {
  return t < origin ? 0 : static_cast<double>(t - origin) / 1e6;
}

// A hazard's first state on each thread: where the lanes of samples can be read against it.
std::vector<TimelineEvent> hazard_events(const MemberEvidence& m, std::uint64_t origin) {
  std::vector<TimelineEvent> events;
  for (std::size_t i = 0; i < m.truth.states.size(); ++i) {
    const auto& s = m.truth.states[i];
    const bool starts = i == 0 || m.truth.states[i - 1].hazard != s.hazard || m.truth.states[i - 1].tid != s.tid;
    if (!s.hazard.empty() && starts)
      events.push_back({ms_since(origin, s.begun_ns), "hazard", s.hazard + " (thread " + std::to_string(s.tid) + ")"});
  }
  return events;
}

// Every sample but the right ones kept; right ones thinned to what fits.
std::vector<TimelineEvent> sample_events(const MemberEvidence& m, std::uint64_t origin, std::uint64_t tolerance_ns,
                                         std::size_t room) {
  const auto t = tally(m, tolerance_ns);
  std::vector<TimelineEvent> wrong, right;
  for (const auto& c : t.checked) {
    if (!c.sample->time || c.sample->time->clock != profiles::Clock::Unix) continue;
    TimelineEvent e{ms_since(origin, c.sample->time->nanos), std::string(to_string(c.check.kind)),
                    sample_evidence("", *c.sample, c.check, "").actual};
    (c.check.kind == SampleCheck::Kind::Right ? right : wrong).push_back(std::move(e));
  }
  if (wrong.size() > room) wrong.resize(room);
  const std::size_t left = room - wrong.size();
  const std::size_t step = right.size() > left && left > 0 ? (right.size() + left - 1) / left : 1;
  for (std::size_t i = 0; i < right.size() && left > 0; i += step) wrong.push_back(right[i]);
  return wrong;
}

}  // namespace

std::vector<SessionTimeline> member_timelines(const ReaderEvidence& e) {
  std::vector<SessionTimeline> out;
  for (const auto& m : e.members) {
    if (m.pid == 0) continue;
    SessionTimeline t;
    t.of = "stage member";
    t.session = m.member.name;
    const auto origin = origin_ns(m);
    if (origin == std::numeric_limits<std::uint64_t>::max()) continue;
    auto hazards = hazard_events(m, origin);
    hazards.resize(std::min(hazards.size(), conform::kMaxTimelineEvents / 4));
    t.events = sample_events(m, origin, e.tolerance_ns, conform::kMaxTimelineEvents - hazards.size());
    t.events.insert(t.events.end(), hazards.begin(), hazards.end());
    std::stable_sort(t.events.begin(), t.events.end(), [](const auto& a, const auto& b) { return a.at_ms < b.at_ms; });
    for (const auto& ev : t.events) t.duration_ms = std::max(t.duration_ms, ev.at_ms);
    out.push_back(std::move(t));
  }
  return out;
}

}  // namespace tracecorr::profiler

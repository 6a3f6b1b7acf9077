#include "evidence.hpp"

#include "elastic_v1/registry.hpp"

namespace tracecorr::elastic_v1 {

std::optional<ProcessStorage> SessionFacts::storage() const {
  for (auto it = storage_sightings.rbegin(); it != storage_sightings.rend(); ++it)
    if (it->decoded) return it->decoded;
  return std::nullopt;
}

const SessionFacts& facts(const conform::SessionEvidence& session) {
  static const SessionFacts none;
  const auto* mine = session.protocol_as<SessionFacts>();
  return mine ? *mine : none;
}

std::optional<std::uint32_t> delay_in_force(const conform::SessionEvidence& session,
                                            std::chrono::system_clock::time_point t, std::chrono::milliseconds margin) {
  const auto& registrations = facts(session).registrations;
  // Launched, the agent met no profiler before tracecorr: the default delay
  // until the first registration. Attached, a host agent or an earlier run
  // may have registered another delay (a host agent's 10 ms made transactions
  // leave at once, judged "not deferred" against the default): unknown.
  std::optional<std::uint32_t> delay;
  if (session.launched) delay = elastic_v1::spec::kDefaultDelayMs;
  for (const auto& r : registrations)
    if (r.sent() && r.effective_from() <= t) delay = r.judged ? std::optional<std::uint32_t>(r.message.samples_delay_ms) : std::nullopt;
  if (!delay) return std::nullopt;
  auto from = t - margin, to = t + std::chrono::milliseconds(*delay) + margin;
  for (const auto& r : registrations)
    if (r.sent() && r.effective_from() > from && r.at_system < to) return std::nullopt;  // sent..taken up overlaps
  if (session.timing_boundary && *session.timing_boundary < to) return std::nullopt;
  if (session.stop_requested_at && *session.stop_requested_at < to) return std::nullopt;  // released by the shutdown
  return delay;
}

}  // namespace tracecorr::elastic_v1

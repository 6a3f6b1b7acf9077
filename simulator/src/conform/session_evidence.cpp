#include "tracecorr/conform/session_evidence.hpp"

#include "elastic_v1/registry.hpp"

namespace tracecorr::conform {

std::optional<elastic_v1::ProcessStorage> SessionEvidence::storage() const {
  for (auto it = storage_sightings.rbegin(); it != storage_sightings.rend(); ++it)
    if (it->decoded) return it->decoded;
  return std::nullopt;
}

std::optional<std::uint32_t> SessionEvidence::delay_in_force(std::chrono::system_clock::time_point t,
                                                             std::chrono::milliseconds margin) const {
  std::optional<std::uint32_t> delay = elastic_v1::spec::kDefaultDelayMs;
  for (const auto& r : registrations)
    if (r.sent() && r.effective_from() <= t) delay = r.judged ? std::optional<std::uint32_t>(r.message.samples_delay_ms) : std::nullopt;
  if (!delay) return std::nullopt;
  auto from = t - margin, to = t + std::chrono::milliseconds(*delay) + margin;
  for (const auto& r : registrations)
    if (r.sent() && r.effective_from() > from && r.at_system < to) return std::nullopt;  // sent..taken up overlaps
  if (timing_boundary && *timing_boundary < to) return std::nullopt;
  if (stop_requested_at && *stop_requested_at < to) return std::nullopt;  // released by the shutdown
  return delay;
}

}  // namespace tracecorr::conform

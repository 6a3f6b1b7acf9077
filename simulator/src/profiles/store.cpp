#include "tracecorr/profiles/store.hpp"

namespace tracecorr::profiles {

std::string_view to_string(Outcome outcome) {
  switch (outcome) {
    case Outcome::Accepted: return "accepted";
    case Outcome::Refused: return "refused";
    case Outcome::Malformed: return "malformed";
    case Outcome::OverBounds: return "over-bounds";
    case Outcome::Busy: return "busy";
    case Outcome::Unsupported: return "unsupported";
  }
  return "unknown";
}

Outcome outcome_of(otlp::RejectReason reason) {
  switch (reason) {
    case otlp::RejectReason::UnsupportedContentType:
    case otlp::RejectReason::UnsupportedContentEncoding: return Outcome::Unsupported;
    case otlp::RejectReason::BodyTooLarge:
    case otlp::RejectReason::DecompressedTooLarge:
    case otlp::RejectReason::LimitExceeded: return Outcome::OverBounds;
    case otlp::RejectReason::Busy: return Outcome::Busy;
    case otlp::RejectReason::MalformedBody:
    case otlp::RejectReason::InvalidSpan: return Outcome::Malformed;
  }
  return Outcome::Malformed;
}

IntakeCounters& IntakeCounters::operator+=(const IntakeCounters& other) {
  exports += other.exports;
  for (std::size_t i = 0; i < kOutcomeCount; ++i) outcomes[i] += other.outcomes[i];
  samples += other.samples;
  samples_not_kept += other.samples_not_kept;
  lines_malformed += other.lines_malformed;
  lines_over_bounds += other.lines_over_bounds;
  return *this;
}

SampleStore::SampleStore(const ProfilesLimits& limits) : limits_(limits) {}

std::size_t SampleStore::record(ExportRecord record, std::vector<ProfileSample> samples) {
  std::size_t index;
  {
    std::lock_guard lock(mutex_);
    index = record.index = next_index_++;
    IntakeCounters& counters = counters_[static_cast<std::size_t>(record.source)];
    ++counters.exports;
    ++counters.outcomes[static_cast<std::size_t>(record.outcome)];
    counters.lines_malformed += record.lines_malformed;
    counters.lines_over_bounds += record.lines_over_bounds;
    if (record.outcome == Outcome::Accepted) counters.samples += samples.size();
    const bool keep = stored_bytes_ + record.bytes <= limits_.max_stored_bytes;
    if (keep && !samples.empty()) stored_bytes_ += record.bytes;
    for (auto& sample : samples) {
      if (!keep || samples_.size() >= limits_.max_stored_samples) {
        ++counters.samples_not_kept;
        continue;
      }
      sample.source = record.source;
      sample.export_index = index;
      sample.received_at = record.received_at;
      sample.received_at_system = record.received_at_system;
      samples_.push_back(std::move(sample));
    }
    if (exports_.size() < limits_.max_stored_exports) exports_.push_back(std::move(record));
  }
  arrived_.notify_all();
  return index;
}

std::vector<ProfileSample> SampleStore::samples() const {
  std::lock_guard lock(mutex_);
  return samples_;
}

std::vector<ExportRecord> SampleStore::exports() const {
  std::lock_guard lock(mutex_);
  return exports_;
}

IntakeCounters SampleStore::counters(Source source) const {
  std::lock_guard lock(mutex_);
  return counters_[static_cast<std::size_t>(source)];
}

IntakeCounters SampleStore::counters() const {
  std::lock_guard lock(mutex_);
  IntakeCounters total;
  for (const auto& c : counters_) total += c;
  return total;
}

bool SampleStore::wait_for(const std::function<bool(const std::vector<ProfileSample>&)>& predicate,
                           std::chrono::milliseconds timeout) const {
  std::unique_lock lock(mutex_);
  return arrived_.wait_for(lock, timeout, [&] { return predicate(samples_); });
}

void SampleStore::clear() {
  std::lock_guard lock(mutex_);
  samples_.clear();
  exports_.clear();
  counters_ = {};
  stored_bytes_ = 0;
}

}  // namespace tracecorr::profiles

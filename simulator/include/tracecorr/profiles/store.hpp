// Where every intake (gRPC, HTTP, JSON lines) leaves what it took: the
// samples of accepted exports, a record of every export accepted or not (a
// malformed export is evidence too), and counters. Thread-safe; bounded
// (ProfilesLimits::max_stored_*): beyond, samples are counted, not kept.
#pragma once

#include <array>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "tracecorr/profiles/decode.hpp"
#include "tracecorr/profiles/sample.hpp"

namespace tracecorr::profiles {

// What became of one export, one counter each.
enum class Outcome {
  Accepted,
  Refused,      // not from the judged process (the admission check: grpc_receiver.hpp)
  Malformed,    // not a readable export: protobuf, a dictionary reference, a link's ids, gzip
  OverBounds,   // a limit: message or decoded size, fields, samples, a value
  Busy,         // bytes in flight over the limit; the exporter may retry
  Unsupported,  // a content type or encoding tracecorr does not read
};
inline constexpr std::size_t kOutcomeCount = 6;
std::string_view to_string(Outcome outcome);  // "accepted", "refused", ...
Outcome outcome_of(otlp::RejectReason reason);

struct ExportRecord {
  std::size_t index = 0;  // set by the store, never reused
  Source source = Source::OtlpGrpc;
  std::chrono::steady_clock::time_point received_at{};
  std::chrono::system_clock::time_point received_at_system{};
  std::string peer;        // "127.0.0.1:41234", or the JSON-lines source's name
  std::size_t bytes = 0;   // decoded (after the transport's compression was undone)
  std::size_t profiles = 0;
  std::size_t samples = 0;  // observations accepted
  Outcome outcome = Outcome::Accepted;
  std::string message;     // what the answer said when it was not accepted
  std::vector<otlp::DecodeProblem> problems;  // at most otlp::ReceivedRequest::kMaxProblemsKept
  // JSON lines: lines of this batch that were not samples.
  std::size_t lines_malformed = 0;
  std::size_t lines_over_bounds = 0;
};

struct IntakeCounters {
  std::uint64_t exports = 0;  // every export (a JSON-lines batch), whatever became of it
  std::array<std::uint64_t, kOutcomeCount> outcomes{};
  std::uint64_t samples = 0;           // observations in accepted exports
  std::uint64_t samples_not_kept = 0;  // over max_stored_samples or max_stored_bytes
  std::uint64_t lines_malformed = 0;   // JSON lines
  std::uint64_t lines_over_bounds = 0;
  std::uint64_t of(Outcome outcome) const { return outcomes[static_cast<std::size_t>(outcome)]; }
  IntakeCounters& operator+=(const IntakeCounters& other);
};

class SampleStore {
 public:
  explicit SampleStore(const ProfilesLimits& limits = {});

  // Keeps one export's record and samples (stamped with the record's source,
  // index and arrival); returns the record's index. Refused and rejected
  // exports come with no samples.
  std::size_t record(ExportRecord record, std::vector<ProfileSample> samples);

  // Snapshots (copies), safe while exports keep arriving.
  std::vector<ProfileSample> samples() const;
  std::vector<ExportRecord> exports() const;
  IntakeCounters counters(Source source) const;
  IntakeCounters counters() const;  // every source

  // Blocks until predicate(samples so far) holds or the timeout passes. The
  // predicate runs under the store's lock: it must not call the store.
  bool wait_for(const std::function<bool(const std::vector<ProfileSample>&)>& predicate,
                std::chrono::milliseconds timeout) const;
  // Forgets samples, records and counters; indices keep increasing.
  void clear();

 private:
  ProfilesLimits limits_;
  mutable std::mutex mutex_;
  mutable std::condition_variable arrived_;
  std::vector<ProfileSample> samples_;
  std::vector<ExportRecord> exports_;
  std::array<IntakeCounters, kSourceCount> counters_{};
  std::size_t next_index_ = 0;
  std::size_t stored_bytes_ = 0;
};

}  // namespace tracecorr::profiles

// OTLP profiles (opentelemetry.proto.collector.profiles.v1development
// ExportProfilesServiceRequest, binary protobuf) -> ProfileSample.
//
// Everything received is hostile. Before libprotobuf allocates anything the
// fields are counted on the wire, packed elements included (a 1-byte varint
// of a packed `values` is 8 bytes in memory); after, every dictionary index a
// sample uses is checked against its table, every string for UTF-8 and length,
// every value for nesting and size, and every stack is cut at a bound. A
// reference out of range rejects the export and names where it was; nothing
// is followed without a bound, so a hostile dictionary (indexes out of range,
// huge tables, deep values) never crashes nor allocates beyond the limits.
#pragma once

#include <cstddef>
#include <string_view>
#include <vector>

#include "tracecorr/otlp.hpp"
#include "tracecorr/profiles/sample.hpp"

namespace tracecorr::profiles {

struct ProfilesLimits {
  // The transport's bounds, as for traces (otlp.hpp): body and decoded size,
  // connections, idle and request time, bytes in flight, and for the decoder
  // the value size, array elements, attributes per sample or resource and
  // nesting depth. Its max_fields_per_request is not used (below).
  otlp::ReceiverLimits transport;
  // Protobuf fields of one export counted on the wire before decoding, each
  // element of a packed field one: what libprotobuf may allocate for.
  std::size_t max_fields_per_export = 2'000'000;
  // Observations in one export, aggregated timestamps unfolded.
  std::size_t max_samples_per_export = 1'000'000;
  // Frames kept per stack; deeper stacks are cut there (a note says so).
  std::size_t max_stack_frames = 1024;
  // JSON lines (json_lines.hpp): a longer line is skipped and counted.
  std::size_t max_json_line_bytes = 64u << 10;
  // What a receiver keeps over a run (store.hpp): beyond, counted, not kept.
  std::size_t max_stored_samples = 500'000;
  std::size_t max_stored_exports = 100'000;
  std::size_t max_stored_bytes = 128u << 20;  // decoded bytes of the exports whose samples are kept
  // gRPC only: streams one connection may have open, and how long a
  // connection lives before it is asked to go away (GOAWAY; it is closed
  // transport.max_request_time later if a call is still running).
  std::size_t max_concurrent_streams = 8;
  std::chrono::milliseconds max_connection_age{60'000};
};

struct DecodedProfiles {
  std::vector<ProfileSample> samples;  // none when the export was rejected
  std::size_t profiles = 0;            // Profile messages in the export
  std::vector<otlp::DecodeProblem> problems;  // at most otlp::ReceivedRequest::kMaxProblemsKept
  std::size_t problems_not_kept = 0;
  std::optional<otlp::DecodeProblem> first_fatal;  // kept even when `problems` is full
  bool ok() const { return !first_fatal.has_value(); }
};

// Never throws; a body it cannot read comes back with a fatal problem naming
// where ("dictionary.stackTable[3].locationIndices[0]: 99 is outside the
// location table (12 entries)"). Samples carry no arrival (the store's).
DecodedProfiles decode_profiles(std::string_view body, const ProfilesLimits& limits = {});

}  // namespace tracecorr::profiles

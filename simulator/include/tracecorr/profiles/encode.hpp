// ProfileSample -> OTLP profiles (ExportProfilesServiceRequest, binary
// protobuf): the exporter's encoder (exporter.hpp), and the tests' way to make
// exports. decode_profiles(encode_profiles(s)) gives back observations that
// are same_observation() as s (in another order, grouped as below), except
// trace_flags, which OTLP's Link does not carry.
//
// One ResourceProfiles per distinct resource, one ScopeProfiles per scope,
// one Profile per distinct ProfileInfo (a null one is written as zeros);
// observations of the same identity (stack, attributes, link) aggregated into
// one Sample, as OTLP recommends: timestamps only when every value is 1,
// values beside them otherwise, untimed ones in a Sample of values only. The
// dictionary is deduplicated (strings, attributes, links, stacks, locations).
// `thread.id` and `process.pid` are written as sample attributes from tid and
// pid unless the attributes (or, for the pid, the resource) already say them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tracecorr/profiles/sample.hpp"

namespace tracecorr::profiles {

struct EncodeOptions {
  // Added to CLOCK_MONOTONIC sample times: OTLP's are Unix.
  std::int64_t monotonic_to_unix_ns = 0;
};

std::string encode_profiles(const std::vector<ProfileSample>& samples, const EncodeOptions& options = {});

// CLOCK_REALTIME minus CLOCK_MONOTONIC now, for EncodeOptions.
std::int64_t monotonic_to_unix_offset();

}  // namespace tracecorr::profiles

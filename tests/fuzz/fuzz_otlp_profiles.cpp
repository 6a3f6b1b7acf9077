// libFuzzer: OTLP profiles exports (ExportProfilesServiceRequest, binary
// protobuf), with limits made small so that every bound is reached by small
// inputs: a hostile dictionary (indexes out of range, huge tables, deep
// values) never crashes the decoder nor escapes its limits.
#include <string_view>

#include "tracecorr/profiles/decode.hpp"
#include "tracecorr/profiles/encode.hpp"

namespace {

const tracecorr::profiles::ProfilesLimits& small_limits() {
  static const tracecorr::profiles::ProfilesLimits limits = [] {
    tracecorr::profiles::ProfilesLimits l;
    l.transport.max_attributes_per_span = 16;
    l.transport.max_value_bytes = 256;
    l.transport.max_array_elements = 16;
    l.transport.max_nesting_depth = 4;
    l.max_fields_per_export = 4096;
    l.max_samples_per_export = 256;
    l.max_stack_frames = 16;
    return l;
  }();
  return limits;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace tracecorr::profiles;
  const auto& limits = small_limits();
  DecodedProfiles decoded = decode_profiles(std::string_view(reinterpret_cast<const char*>(data), size), limits);
  if (decoded.problems.size() > tracecorr::otlp::ReceivedRequest::kMaxProblemsKept) __builtin_trap();
  if (!decoded.ok()) {
    if (!decoded.samples.empty()) __builtin_trap();
    return 0;
  }
  if (decoded.samples.size() > limits.max_samples_per_export) __builtin_trap();
  for (const auto& sample : decoded.samples) {
    if (sample.stack && sample.stack->size() > limits.max_stack_frames) __builtin_trap();
    if (sample.attributes && sample.attributes->size() > limits.transport.max_attributes_per_span) __builtin_trap();
    if (sample.attributes)
      for (const auto& [key, value] : *sample.attributes) (void)value.to_display();
  }
  // What was accepted encodes and decodes again to as many observations.
  DecodedProfiles again = decode_profiles(encode_profiles(decoded.samples));
  if (!again.ok() || again.samples.size() != decoded.samples.size()) __builtin_trap();
  return 0;
}

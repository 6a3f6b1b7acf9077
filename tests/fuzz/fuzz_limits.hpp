// Shared by the OTLP decoder harnesses: small limits, so that short inputs
// reach every bound, and the checks every decoded export must pass.
#pragma once

#include "tracecorr/otlp.hpp"

namespace tracecorr::fuzz {

inline const otlp::ReceiverLimits& small_limits() {
  static const otlp::ReceiverLimits limits = [] {
    otlp::ReceiverLimits l;
    l.max_spans_per_request = 64;
    l.max_attributes_per_span = 16;
    l.max_value_bytes = 256;
    l.max_array_elements = 16;
    l.max_nesting_depth = 4;
    l.max_fields_per_request = 4096;
    return l;
  }();
  return limits;
}

// A decoded export keeps its promises: no spans when rejected, bounded
// problems, every span within the limits, re-encodable.
inline void check(const otlp::DecodedExport& decoded) {
  const auto& limits = small_limits();
  if (decoded.problems.size() > otlp::ReceivedRequest::kMaxProblemsKept) __builtin_trap();
  if (!decoded.ok()) {
    if (!decoded.spans.empty()) __builtin_trap();
    return;
  }
  if (decoded.spans.size() > limits.max_spans_per_request) __builtin_trap();
  for (const auto& span : decoded.spans) {
    if (span.attributes.size() > limits.max_attributes_per_span) __builtin_trap();
    for (const auto& [key, value] : span.attributes) (void)value.to_display();
    (void)span.resource_attributes();
    (void)span.scope_name();
  }
  // What was accepted encodes and decodes again to as many spans.
  auto again = otlp::decode_protobuf(otlp::encode_protobuf(decoded.spans));
  if (!again.ok() || again.spans.size() != decoded.spans.size()) __builtin_trap();
}

}  // namespace tracecorr::fuzz

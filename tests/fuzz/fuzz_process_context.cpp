// libFuzzer: a process context's header and payload (OTEP 4719), as the
// engine's reader decodes them, with the decode bounds made small so that
// every bound is reached by small inputs.
#include <cstdlib>
#include <span>

#include "tracecorr/process_context.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  namespace pc = tracecorr::process_context;
  std::span<const std::uint8_t> bytes(data, size);
  if (auto header = pc::parse_header(bytes)) (void)pc::check_identity(*header, true);

  pc::DecodeLimits limits;
  limits.max_fields = 512;
  limits.max_attributes = 16;
  limits.max_array_elements = 16;
  limits.max_string_bytes = 256;
  limits.max_nesting_depth = 4;
  auto decoded = pc::decode_payload(bytes, limits);
  const std::size_t prefix = pc::complete_prefix_length(bytes);
  if (prefix > size) std::abort();
  if (decoded) {
    // What decodes re-encodes and decodes to the same attributes (compared
    // encoded: a NaN is not equal to itself).
    if (decoded->resource.size() > limits.max_attributes || decoded->attributes.size() > limits.max_attributes) std::abort();
    auto encoded = pc::encode_payload(*decoded);
    auto again = pc::decode_payload(encoded);
    if (!again || pc::encode_payload(*again) != encoded) std::abort();
    (void)pc::duplicate_keys(decoded->resource);
  } else if (decoded.error().kind != tracecorr::ErrorKind::kMalformed &&
             decoded.error().kind != tracecorr::ErrorKind::kTooLong) {
    std::abort();  // every refusal is named malformed or past a bound
  }
  return 0;
}

// libFuzzer: OTLP/HTTP binary protobuf exports, with the receiver's limits
// made small so that every bound is reached by small inputs.
#include <string_view>

#include "fuzz_limits.hpp"
#include "tracecorr/otlp.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view body(reinterpret_cast<const char*>(data), size);
  auto decoded = tracecorr::otlp::decode_protobuf(body, tracecorr::fuzz::small_limits());
  tracecorr::fuzz::check(decoded);
  return 0;
}

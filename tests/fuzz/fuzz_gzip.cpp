// libFuzzer: Content-Encoding gzip and deflate, bounded on output; what
// inflates must round-trip through gzip_compress.
#include <string_view>

#include "tracecorr/otlp.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace tracecorr::otlp;
  constexpr std::size_t kMaxOutput = 256 << 10;  // keeps one execution cheap
  std::string_view input(reinterpret_cast<const char*>(data), size);
  for (auto inflate : {gunzip, inflate_zlib}) {
    auto out = inflate(input, kMaxOutput);
    if (!out.ok()) continue;
    if (out->size() > kMaxOutput) __builtin_trap();
    auto again = gunzip(gzip_compress(*out), kMaxOutput);
    if (!again.ok() || *again != *out) __builtin_trap();
  }
  return 0;
}

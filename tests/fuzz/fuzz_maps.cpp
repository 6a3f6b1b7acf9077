// libFuzzer: /proc/PID/maps text, which a target shapes (its paths are its
// own): parse_maps and find_mapping.
#include <string_view>

#include "tracecorr/maps.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  auto maps = tracecorr::parse_maps(std::string_view(reinterpret_cast<const char*>(data), size));
  for (const auto& m : maps) {
    if (m.end < m.start) __builtin_trap();  // the parser must refuse reversed ranges
    (void)tracecorr::find_mapping(maps, m.start);
  }
  return 0;
}

// libFuzzer: one JSON line of profiler output (docs/json-lines.md), with
// small limits: a sample that parses respects them.
#include <string_view>

#include "tracecorr/profiles/json_lines.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace tracecorr::profiles;
  static const ProfilesLimits limits = [] {
    ProfilesLimits l;
    l.transport.max_attributes_per_span = 16;
    l.transport.max_value_bytes = 256;
    l.transport.max_array_elements = 16;
    l.transport.max_nesting_depth = 4;
    l.max_stack_frames = 16;
    l.max_json_line_bytes = 4096;
    return l;
  }();
  auto sample = parse_json_line(std::string_view(reinterpret_cast<const char*>(data), size), limits);
  if (!sample) return 0;
  if (size > limits.max_json_line_bytes) __builtin_trap();
  if (!sample->pid || !sample->tid || !sample->time) __builtin_trap();
  if (sample->stack && sample->stack->size() > limits.max_stack_frames) __builtin_trap();
  if (sample->attributes && sample->attributes->size() > limits.transport.max_attributes_per_span) __builtin_trap();
  return 0;
}

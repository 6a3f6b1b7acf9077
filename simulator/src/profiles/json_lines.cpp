// JSON lines -> ProfileSample (docs/json-lines.md).
#include "tracecorr/profiles/json_lines.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <limits>
#include <span>
#include <tuple>
#include <nlohmann/json.hpp>

namespace tracecorr::profiles {
namespace {

using json = nlohmann::json;

// Deeper than `max` outside strings (nlohmann's parser is iterative, the
// conversion below recurses): the byte where it went too deep.
std::optional<std::size_t> too_deep(std::string_view text, std::size_t max) {
  std::size_t depth = 0;
  bool in_string = false, escaped = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      if (++depth > max) return i;
    } else if ((c == '}' || c == ']') && depth > 0) {
      --depth;
    }
  }
  return std::nullopt;
}

// A member of the line's object; null counts as absent.
const json* member(const json& object, const char* name) {
  auto it = object.find(name);
  return it == object.end() || it->is_null() ? nullptr : &*it;
}

// An unsigned integer: a JSON number without fraction, or a decimal string
// (unix nanoseconds pass 2^53, where some JSON writers round numbers).
Expected<std::uint64_t> unsigned_value(const json& value, const char* name) {
  if (value.is_number_unsigned()) return value.get<std::uint64_t>();
  if (value.is_number_integer() && value.get<std::int64_t>() >= 0) return static_cast<std::uint64_t>(value.get<std::int64_t>());
  if (value.is_string()) {
    const auto& s = value.get_ref<const std::string&>();
    std::uint64_t n = 0;
    const bool hex = s.size() > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X');
    const char* begin = s.data() + (hex ? 2 : 0);
    auto [end, error] = std::from_chars(begin, s.data() + s.size(), n, hex ? 16 : 10);
    if (error == std::errc() && end == s.data() + s.size() && begin != end) return n;
  }
  return make_error(ErrorKind::kMalformed,
                    "expected an unsigned integer (a number or a decimal string), got " +
                        value.dump(-1, ' ', true, json::error_handler_t::replace).substr(0, 40),
                    name);
}

Expected<std::int64_t> signed_value(const json& value, const char* name) {
  if (value.is_number_integer()) {
    if (value.is_number_unsigned() && value.get<std::uint64_t>() > static_cast<std::uint64_t>(INT64_MAX))
      return make_error(ErrorKind::kMalformed, "out of the signed 64-bit range", name);
    return value.get<std::int64_t>();
  }
  if (value.is_string()) {
    const auto& s = value.get_ref<const std::string&>();
    std::int64_t n = 0;
    auto [end, error] = std::from_chars(s.data(), s.data() + s.size(), n);
    if (error == std::errc() && end == s.data() + s.size() && !s.empty()) return n;
  }
  return make_error(ErrorKind::kMalformed,
                    "expected an integer, got " + value.dump(-1, ' ', true, json::error_handler_t::replace).substr(0, 40),
                    name);
}

Expected<otlp::AttributeValue> attribute_value(const json& value, const std::string& where, const ProfilesLimits& limits);

Expected<otlp::Attributes> attributes_object(const json& object, const std::string& where, const ProfilesLimits& limits) {
  if (!object.is_object()) return make_error(ErrorKind::kMalformed, std::string("expected an object, got ") + object.type_name(), where);
  if (object.size() > limits.transport.max_attributes_per_span)
    return make_error(ErrorKind::kTooLong, std::to_string(object.size()) + " attributes exceed the limit of " +
                                               std::to_string(limits.transport.max_attributes_per_span), where);
  otlp::Attributes out;
  for (const auto& [key, value] : object.items()) {
    const std::string at = where + "[\"" + key.substr(0, 64) + "\"]";
    if (key.size() > limits.transport.max_value_bytes) return make_error(ErrorKind::kTooLong, "key too long", at);
    auto converted = attribute_value(value, at, limits);
    if (!converted) return converted.error();
    out.emplace(key, std::move(*converted));  // nlohmann keeps the last of duplicate keys
  }
  return out;
}

Expected<otlp::AttributeValue> attribute_value(const json& value, const std::string& where, const ProfilesLimits& limits) {
  switch (value.type()) {
    case json::value_t::string: {
      const auto& s = value.get_ref<const std::string&>();
      if (s.size() > limits.transport.max_value_bytes)
        return make_error(ErrorKind::kTooLong, std::to_string(s.size()) + "-byte string", where);
      return otlp::AttributeValue(s);
    }
    case json::value_t::boolean: return otlp::AttributeValue(value.get<bool>());
    case json::value_t::number_integer: return otlp::AttributeValue(value.get<std::int64_t>());
    case json::value_t::number_unsigned: {
      if (value.get<std::uint64_t>() > static_cast<std::uint64_t>(INT64_MAX))
        return make_error(ErrorKind::kMalformed, "an integer attribute past the signed 64-bit range", where);
      return otlp::AttributeValue(value.get<std::int64_t>());
    }
    case json::value_t::number_float: return otlp::AttributeValue(value.get<double>());
    case json::value_t::array: {
      if (value.size() > limits.transport.max_array_elements)
        return make_error(ErrorKind::kTooLong, std::to_string(value.size()) + " array elements", where);
      otlp::AttributeValue::Array array;
      for (std::size_t i = 0; i < value.size(); ++i) {
        auto element = attribute_value(value[i], where + "[" + std::to_string(i) + "]", limits);
        if (!element) return element.error();
        array.push_back(std::move(*element));
      }
      return otlp::AttributeValue(std::move(array));
    }
    case json::value_t::object: {
      auto object = attributes_object(value, where, limits);
      if (!object) return object.error();
      otlp::AttributeValue::KvList list;
      for (auto& [key, v] : *object) list.push_back({key, std::move(v)});
      return otlp::AttributeValue(std::move(list));
    }
    default: return otlp::AttributeValue();  // null: an empty value
  }
}

Status read_ids(const json& line, ProfileSample& sample) {
  const json* trace = member(line, "trace_id");
  const json* span = member(line, "span_id");
  if (!trace && !span) return Ok{};
  if (!trace || !span) return make_error(ErrorKind::kMalformed, "a span needs both trace_id and span_id", trace ? "span_id" : "trace_id");
  SampleLink link;
  for (auto [value, name, out] : {std::tuple{trace, "trace_id", std::span<std::uint8_t>(link.trace_id)},
                                  std::tuple{span, "span_id", std::span<std::uint8_t>(link.span_id)}}) {
    if (!value->is_string() || !from_hex(value->get_ref<const std::string&>(), out))
      return make_error(ErrorKind::kMalformed,
                        "expected " + std::to_string(out.size() * 2) + " hex digits, got " +
                            value->dump(-1, ' ', true, json::error_handler_t::replace).substr(0, 48),
                        name);
  }
  sample.link = link;
  return Ok{};
}

Status read_time(const json& line, ProfileSample& sample) {
  const json* unix_time = member(line, "time_unix_nano");
  const json* monotonic = member(line, "time_monotonic_nano");
  if (!unix_time == !monotonic)
    return make_error(ErrorKind::kMalformed, "exactly one of time_unix_nano and time_monotonic_nano is required",
                      unix_time ? "time_monotonic_nano" : "time_unix_nano");
  auto nanos = unsigned_value(unix_time ? *unix_time : *monotonic, unix_time ? "time_unix_nano" : "time_monotonic_nano");
  if (!nanos) return nanos.error();
  sample.time = SampleTime{*nanos, unix_time ? Clock::Unix : Clock::Monotonic};
  return Ok{};
}

}  // namespace

Expected<ProfileSample> parse_json_line(std::string_view line, const ProfilesLimits& limits) {
  if (line.size() > limits.max_json_line_bytes)
    return make_error(ErrorKind::kTooLong, std::to_string(line.size()) + " bytes exceed the " +
                                               std::to_string(limits.max_json_line_bytes) + "-byte line limit");
  if (auto at = too_deep(line, limits.transport.max_nesting_depth + 2))
    return make_error(ErrorKind::kTooLong, "nested more than " + std::to_string(limits.transport.max_nesting_depth + 2) +
                                               " levels deep at byte " + std::to_string(*at));
  json parsed;
  try {
    parsed = json::parse(line.begin(), line.end());
  } catch (const json::exception& e) {
    return make_error(ErrorKind::kMalformed, std::string("not JSON: ") + e.what());
  }
  if (!parsed.is_object())
    return make_error(ErrorKind::kMalformed, std::string("a sample is a JSON object, got ") + parsed.type_name());
  ProfileSample sample;
  sample.source = Source::JsonLines;
  for (auto [name, out] : {std::pair{"pid", &sample.pid}, std::pair{"tid", &sample.tid}}) {
    const json* value = member(parsed, name);
    if (!value) return make_error(ErrorKind::kMalformed, "required", name);
    auto n = signed_value(*value, name);
    if (!n) return n.error();
    *out = *n;
  }
  if (Status time = read_time(parsed, sample); !time) return time.error();
  if (Status ids = read_ids(parsed, sample); !ids) return ids.error();
  if (const json* flags = member(parsed, "flags")) {
    auto n = unsigned_value(*flags, "flags");
    if (!n) return n.error();
    if (*n > 0xff) return make_error(ErrorKind::kMalformed, "W3C trace flags are one byte, got " + std::to_string(*n), "flags");
    sample.trace_flags = static_cast<std::uint8_t>(*n);
  }
  if (const json* value = member(parsed, "value")) {
    auto n = signed_value(*value, "value");
    if (!n) return n.error();
    sample.value = *n;
  }
  for (auto [name, out] : {std::pair{"attributes", &sample.attributes}, std::pair{"resource", &sample.resource}}) {
    if (const json* object = member(parsed, name)) {
      auto converted = attributes_object(*object, name, limits);
      if (!converted) return converted.error();
      *out = std::make_shared<const otlp::Attributes>(std::move(*converted));
    }
  }
  if (const json* stack = member(parsed, "stack")) {
    if (!stack->is_array()) return make_error(ErrorKind::kMalformed, "expected an array of addresses", "stack");
    auto frames = std::make_shared<Stack>();
    for (std::size_t i = 0; i < stack->size() && i < limits.max_stack_frames; ++i) {
      auto address = unsigned_value((*stack)[i], "stack");
      if (!address) return address.error();
      frames->push_back(*address);
    }
    sample.stack = std::move(frames);
  }
  return sample;
}

}  // namespace tracecorr::profiles

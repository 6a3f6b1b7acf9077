// OTLP/JSON -> tracecorr model.
//
// OTLP/JSON is the protobuf JSON mapping with OTLP's deviations: trace and span
// ids are hex strings (not base64), enums may be integers, and 64-bit integers
// may be strings or numbers. Unknown keys are ignored, as OTLP requires.
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <nlohmann/json.hpp>

#include "decode_common.hpp"

namespace tracecorr::otlp {
namespace {

using detail::DecodeContext;
using detail::field_path;
using detail::index_path;
using json = nlohmann::json;

// Before parsing, one pass over the text outside strings: nlohmann's parser is
// iterative but our conversion recurses, so deep documents are refused; and a
// JSON value costs as little as two bytes of text but tens in memory, so the
// values are counted (an upper bound: every value follows '[', ',' or ':').
struct JsonShape {
  std::optional<std::size_t> too_deep_at;
  std::size_t values = 1;
};
JsonShape json_shape(std::string_view text, std::size_t max_depth) {
  JsonShape shape;
  std::size_t depth = 0;
  bool in_string = false, escaped = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      if (c == '[') ++shape.values;
      if (++depth > max_depth) {
        shape.too_deep_at = i;
        return shape;
      }
    } else if ((c == '}' || c == ']') && depth > 0) {
      --depth;
    } else if (c == ',' || c == ':') {
      ++shape.values;
    }
  }
  return shape;
}

// A member, with the lowerCamelCase name OTLP uses or the proto field name
// (protobuf JSON parsers accept both). null counts as absent.
const json* member(const json& object, std::string_view camel, std::string_view snake = {}) {
  auto it = object.find(camel);
  if (it == object.end() && !snake.empty()) it = object.find(snake);
  if (it == object.end() || it->is_null()) return nullptr;
  return &*it;
}

const json* object_member(DecodeContext& ctx, const json& object, const std::string& where, std::string_view camel,
                          std::string_view snake = {}) {
  const json* m = member(object, camel, snake);
  if (m && !m->is_object()) {
    ctx.fatal(field_path(where, camel), std::string("expected an object, got ") + m->type_name());
    return nullptr;
  }
  return m;
}

const json* array_member(DecodeContext& ctx, const json& object, const std::string& where, std::string_view camel,
                         std::string_view snake = {}) {
  const json* m = member(object, camel, snake);
  if (m && !m->is_array()) {
    ctx.fatal(field_path(where, camel), std::string("expected an array, got ") + m->type_name());
    return nullptr;
  }
  return m;
}

std::string string_member(DecodeContext& ctx, const json& object, const std::string& where, std::string_view camel,
                          std::string_view snake = {}) {
  const json* m = member(object, camel, snake);
  if (!m) return {};
  if (!m->is_string()) {
    ctx.fatal(field_path(where, camel), std::string("expected a string, got ") + m->type_name());
    return {};
  }
  const auto& s = m->get_ref<const std::string&>();
  detail::check_value_size(ctx, field_path(where, camel), s.size());
  return s;
}

// Integers: a JSON number without fraction, or a decimal string.
template <typename Int>
Int integer_value(DecodeContext& ctx, const json& value, const std::string& where) {
  if (value.is_number_unsigned()) {
    auto v = value.get<std::uint64_t>();
    if (v <= static_cast<std::uint64_t>(std::numeric_limits<Int>::max())) return static_cast<Int>(v);
  } else if (value.is_number_integer()) {
    auto v = value.get<std::int64_t>();
    if (v >= static_cast<std::int64_t>(std::numeric_limits<Int>::min()) &&
        (v < 0 || static_cast<std::uint64_t>(v) <= static_cast<std::uint64_t>(std::numeric_limits<Int>::max())))
      return static_cast<Int>(v);
  } else if (value.is_number_float()) {
    double d = value.get<double>();
    if (std::isfinite(d) && d == std::floor(d) && d >= static_cast<double>(std::numeric_limits<Int>::min()) &&
        d < static_cast<double>(std::numeric_limits<Int>::max()))
      return static_cast<Int>(d);
  } else if (value.is_string()) {
    const auto& s = value.get_ref<const std::string&>();
    if (!s.empty() && s.size() <= 21) {
      errno = 0;
      char* end = nullptr;
      if constexpr (std::is_signed_v<Int>) {
        long long v = std::strtoll(s.c_str(), &end, 10);
        if (errno == 0 && *end == '\0' && v >= std::numeric_limits<Int>::min() && v <= std::numeric_limits<Int>::max())
          return static_cast<Int>(v);
      } else if (s[0] != '-') {
        unsigned long long v = std::strtoull(s.c_str(), &end, 10);
        if (errno == 0 && *end == '\0' && v <= std::numeric_limits<Int>::max()) return static_cast<Int>(v);
      }
    }
  }
  ctx.fatal(where, "expected a " + std::string(std::is_signed_v<Int> ? "signed" : "unsigned") + " " +
                       std::to_string(sizeof(Int) * 8) + "-bit integer (number or decimal string), got " +
                       value.dump(-1, ' ', false, json::error_handler_t::replace).substr(0, 40));
  return 0;
}

template <typename Int>
Int integer_member(DecodeContext& ctx, const json& object, const std::string& where, std::string_view camel,
                   std::string_view snake = {}) {
  const json* m = member(object, camel, snake);
  return m ? integer_value<Int>(ctx, *m, field_path(where, camel)) : 0;
}

// Enums: an integer or the value's name.
std::int32_t enum_member(DecodeContext& ctx, const json& object, const std::string& where, std::string_view camel,
                         std::initializer_list<std::string_view> names) {
  const json* m = member(object, camel);
  if (!m) return 0;
  if (m->is_string()) {
    std::int32_t i = 0;
    for (auto name : names) {
      if (m->get_ref<const std::string&>() == name) return i;
      ++i;
    }
    ctx.fatal(field_path(where, camel), "unknown enum name " + m->dump(-1, ' ', false, json::error_handler_t::replace));
    return 0;
  }
  return integer_value<std::int32_t>(ctx, *m, field_path(where, camel));
}

// bytesValue: base64, standard or URL-safe alphabet, padding optional (the
// protobuf JSON mapping accepts all of these).
std::optional<AttributeValue::Bytes> base64_any(std::string_view text) {
  AttributeValue::Bytes out;
  std::uint32_t acc = 0;
  int bits = 0;
  std::size_t pad = 0;
  for (char c : text) {
    int v;
    if (c >= 'A' && c <= 'Z') v = c - 'A';
    else if (c >= 'a' && c <= 'z') v = c - 'a' + 26;
    else if (c >= '0' && c <= '9') v = c - '0' + 52;
    else if (c == '+' || c == '-') v = 62;
    else if (c == '/' || c == '_') v = 63;
    else if (c == '=') { ++pad; continue; }
    else return std::nullopt;
    if (pad) return std::nullopt;  // data after padding
    acc = (acc << 6) | static_cast<std::uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<std::uint8_t>(acc >> bits));
    }
  }
  if (bits >= 6 || pad > 2) return std::nullopt;  // a lone trailing character
  return out;
}

std::optional<double> double_value(const json& value) {
  if (value.is_number()) return value.get<double>();
  if (!value.is_string()) return std::nullopt;
  const auto& s = value.get_ref<const std::string&>();
  if (s == "NaN") return std::numeric_limits<double>::quiet_NaN();
  if (s == "Infinity") return std::numeric_limits<double>::infinity();
  if (s == "-Infinity") return -std::numeric_limits<double>::infinity();
  if (s.empty() || s.size() > 64) return std::nullopt;
  char* end = nullptr;
  double d = std::strtod(s.c_str(), &end);
  if (*end != '\0') return std::nullopt;
  return d;
}

void convert_attributes(DecodeContext& ctx, const std::string& where, const json* from, Attributes& into);

AttributeValue convert_value(DecodeContext& ctx, const std::string& where, const json& from, std::size_t depth) {
  if (depth > ctx.limits.max_nesting_depth) {
    ctx.fatal(where, "values nested more than " + std::to_string(ctx.limits.max_nesting_depth) + " deep",
              RejectReason::LimitExceeded);
    return {};
  }
  if (!from.is_object()) {
    ctx.fatal(where, std::string("an AnyValue is an object, got ") + from.type_name());
    return {};
  }
  static constexpr std::pair<std::string_view, std::string_view> kMembers[] = {
      {"stringValue", "string_value"}, {"boolValue", "bool_value"},       {"intValue", "int_value"},
      {"doubleValue", "double_value"}, {"arrayValue", "array_value"},     {"kvlistValue", "kvlist_value"},
      {"bytesValue", "bytes_value"}};
  const json* set = nullptr;
  std::string_view set_name;
  for (auto [camel, snake] : kMembers) {
    if (const json* m = member(from, camel, snake)) {
      if (set) {
        ctx.fatal(where, "AnyValue has both " + std::string(set_name) + " and " + std::string(camel) +
                             " (value is a oneof)");
        return {};
      }
      set = m;
      set_name = camel;
    }
  }
  if (!set) return {};  // {}: an empty AnyValue
  std::string at = field_path(where, set_name);
  if (set_name == "stringValue") {
    if (!set->is_string()) {
      ctx.fatal(at, std::string("expected a string, got ") + set->type_name());
      return {};
    }
    detail::check_value_size(ctx, at, set->get_ref<const std::string&>().size());
    return AttributeValue(set->get<std::string>());
  }
  if (set_name == "boolValue") {
    if (!set->is_boolean()) {
      ctx.fatal(at, std::string("expected true or false, got ") + set->type_name());
      return {};
    }
    return AttributeValue(set->get<bool>());
  }
  if (set_name == "intValue") return AttributeValue(integer_value<std::int64_t>(ctx, *set, at));
  if (set_name == "doubleValue") {
    auto d = double_value(*set);
    if (!d) ctx.fatal(at, "expected a number, \"NaN\", \"Infinity\" or \"-Infinity\"");
    return AttributeValue(d.value_or(0.0));
  }
  if (set_name == "bytesValue") {
    if (!set->is_string()) {
      ctx.fatal(at, std::string("expected a base64 string, got ") + set->type_name());
      return {};
    }
    const auto& text = set->get_ref<const std::string&>();
    detail::check_value_size(ctx, at, text.size() / 4 * 3);
    auto bytes = base64_any(text);
    if (!bytes) {
      ctx.fatal(at, "not base64");
      return {};
    }
    return AttributeValue(std::move(*bytes));
  }
  if (!set->is_object()) {
    ctx.fatal(at, std::string("expected an object with \"values\", got ") + set->type_name());
    return {};
  }
  const json* values = array_member(ctx, *set, at, "values");
  if (set_name == "arrayValue") {
    AttributeValue::Array array;
    if (!values) return AttributeValue(std::move(array));
    if (!detail::check_count(ctx, at, values->size(), ctx.limits.max_array_elements, "array elements")) return {};
    array.reserve(values->size());
    for (std::size_t i = 0; i < values->size() && !ctx.failed(); ++i)
      array.push_back(convert_value(ctx, index_path(at, "values", i), (*values)[i], depth + 1));
    return AttributeValue(std::move(array));
  }
  // kvlistValue
  AttributeValue::KvList list;
  if (!values) return AttributeValue(std::move(list));
  if (!detail::check_count(ctx, at, values->size(), ctx.limits.max_attributes_per_span, "kvlist entries")) return {};
  for (std::size_t i = 0; i < values->size() && !ctx.failed(); ++i) {
    std::string entry_path = index_path(at, "values", i);
    const json& entry = (*values)[i];
    if (!entry.is_object()) {
      ctx.fatal(entry_path, std::string("a KeyValue is an object, got ") + entry.type_name());
      break;
    }
    std::string key = string_member(ctx, entry, entry_path, "key");
    const json* value = member(entry, "value");
    list.push_back({std::move(key), value ? convert_value(ctx, field_path(entry_path, "value"), *value, depth + 1)
                                          : AttributeValue{}});
  }
  return AttributeValue(std::move(list));
}

void convert_attributes(DecodeContext& ctx, const std::string& where, const json* from, Attributes& into) {
  if (!from) return;
  if (!detail::check_count(ctx, where, from->size(), ctx.limits.max_attributes_per_span, "attributes")) return;
  for (std::size_t i = 0; i < from->size() && !ctx.failed(); ++i) {
    const json& entry = (*from)[i];
    std::string entry_path = index_path(where, "", i);
    if (!entry.is_object()) {
      ctx.fatal(entry_path, std::string("a KeyValue is an object, got ") + entry.type_name());
      return;
    }
    std::string key = string_member(ctx, entry, entry_path, "key");
    std::string at = where + "[\"" + key.substr(0, 64) + "\"]";
    const json* value = member(entry, "value");
    AttributeValue converted = value ? convert_value(ctx, at, *value, 0) : AttributeValue{};
    detail::insert_attribute(ctx, at, into, std::move(key), std::move(converted));
  }
}

// Ids are hex in OTLP/JSON. Exporters that use the plain protobuf JSON mapping
// send base64 instead; say so, since that is the usual mistake.
template <std::size_t N>
bool id_member(DecodeContext& ctx, const json& object, const std::string& where, std::string_view camel,
               std::string_view snake, std::array<std::uint8_t, N>& out, bool optional) {
  std::string at = field_path(where, camel);
  const json* m = member(object, camel, snake);
  if (!m) {
    if (!optional) ctx.fatal(at, "missing", RejectReason::InvalidSpan);
    return false;
  }
  if (!m->is_string()) {
    ctx.fatal(at, std::string("expected a hex string, got ") + m->type_name(), RejectReason::InvalidSpan);
    return false;
  }
  const auto& text = m->get_ref<const std::string&>();
  if (text.empty() && optional) return false;
  std::array<std::uint8_t, N> bytes{};
  if (!from_hex(text, bytes)) {
    std::string shown = text.substr(0, 48);
    std::string hint = base64_any(text) ? " (looks like base64: OTLP/JSON ids are hex)" : "";
    ctx.fatal(at, "\"" + shown + "\" is not " + std::to_string(2 * N) + " hex digits" + hint,
              RejectReason::InvalidSpan);
    return false;
  }
  return detail::accept_id(ctx, at, std::string_view(reinterpret_cast<const char*>(bytes.data()), N), out, optional);
}

void convert_span(DecodeContext& ctx, const std::string& at, const json& from, ReceivedSpan& span) {
  id_member(ctx, from, at, "traceId", "trace_id", span.trace_id, false);
  id_member(ctx, from, at, "spanId", "span_id", span.span_id, false);
  SpanId parent{};
  if (id_member(ctx, from, at, "parentSpanId", "parent_span_id", parent, true)) span.parent_span_id = parent;
  span.trace_state = string_member(ctx, from, at, "traceState", "trace_state");
  span.name = string_member(ctx, from, at, "name");
  span.kind = static_cast<SpanKind>(
      enum_member(ctx, from, at, "kind",
                  {"SPAN_KIND_UNSPECIFIED", "SPAN_KIND_INTERNAL", "SPAN_KIND_SERVER", "SPAN_KIND_CLIENT",
                   "SPAN_KIND_PRODUCER", "SPAN_KIND_CONSUMER"}));
  span.start_unix_nano = integer_member<std::uint64_t>(ctx, from, at, "startTimeUnixNano", "start_time_unix_nano");
  span.end_unix_nano = integer_member<std::uint64_t>(ctx, from, at, "endTimeUnixNano", "end_time_unix_nano");
  span.flags = integer_member<std::uint32_t>(ctx, from, at, "flags");
  convert_attributes(ctx, field_path(at, "attributes"), array_member(ctx, from, at, "attributes"), span.attributes);
  span.dropped_attributes_count =
      integer_member<std::uint32_t>(ctx, from, at, "droppedAttributesCount", "dropped_attributes_count");
  if (const json* status = object_member(ctx, from, at, "status")) {
    std::string status_path = field_path(at, "status");
    span.status_code = enum_member(ctx, *status, status_path, "code",
                                   {"STATUS_CODE_UNSET", "STATUS_CODE_OK", "STATUS_CODE_ERROR"});
    span.status_message = string_member(ctx, *status, status_path, "message");
  }
  detail::finish_span(ctx, at, span);
}

}  // namespace

DecodedExport decode_json(std::string_view body, const ReceiverLimits& limits) {
  DecodeContext ctx(limits);
  // Request > resourceSpans > [] > scopeSpans > [] > spans > [] > attributes > [] > value,
  // then three levels per nesting (arrayValue > values > AnyValue).
  std::size_t max_depth = 12 + 3 * limits.max_nesting_depth;
  JsonShape shape = json_shape(body, max_depth);
  if (shape.too_deep_at) {
    ctx.fatal("", "JSON nested more than " + std::to_string(max_depth) + " levels deep at byte " +
                      std::to_string(*shape.too_deep_at),
              RejectReason::LimitExceeded);
    return std::move(ctx.out);
  }
  if (shape.values > limits.max_fields_per_request) {
    ctx.fatal("", "more than " + std::to_string(limits.max_fields_per_request) +
                      " JSON values in one export (counted before decoding)",
              RejectReason::LimitExceeded);
    return std::move(ctx.out);
  }
  json document;
  try {
    document = json::parse(body.begin(), body.end());
  } catch (const json::exception& e) {
    ctx.fatal("", std::string("body is not valid JSON: ") + e.what());
    return std::move(ctx.out);
  }
  if (!document.is_object()) {
    ctx.fatal("", std::string("an ExportTraceServiceRequest is a JSON object, got ") + document.type_name());
    return std::move(ctx.out);
  }
  const json* resource_spans = array_member(ctx, document, "", "resourceSpans", "resource_spans");
  if (!resource_spans) return std::move(ctx.out);

  std::size_t span_total = 0;
  for (const auto& rs : *resource_spans) {
    const json* scope_spans = rs.is_object() ? member(rs, "scopeSpans", "scope_spans") : nullptr;
    if (!scope_spans || !scope_spans->is_array()) continue;
    for (const auto& ss : *scope_spans) {
      const json* spans = ss.is_object() ? member(ss, "spans") : nullptr;
      if (spans && spans->is_array()) span_total += spans->size();
    }
  }
  if (!detail::check_count(ctx, "resourceSpans", span_total, limits.max_spans_per_request, "spans"))
    return std::move(ctx.out);

  for (std::size_t r = 0; r < resource_spans->size() && !ctx.failed(); ++r) {
    const json& rs = (*resource_spans)[r];
    std::string rs_path = index_path("", "resourceSpans", r);
    if (!rs.is_object()) {
      ctx.fatal(rs_path, std::string("expected an object, got ") + rs.type_name());
      break;
    }
    Attributes resource_attributes;
    if (const json* resource = object_member(ctx, rs, rs_path, "resource")) {
      std::string resource_path = field_path(rs_path, "resource");
      convert_attributes(ctx, field_path(resource_path, "attributes"),
                         array_member(ctx, *resource, resource_path, "attributes"), resource_attributes);
    }
    auto resource = std::make_shared<const Attributes>(std::move(resource_attributes));
    const json* scope_spans = array_member(ctx, rs, rs_path, "scopeSpans", "scope_spans");
    for (std::size_t s = 0; scope_spans && s < scope_spans->size() && !ctx.failed(); ++s) {
      const json& ss = (*scope_spans)[s];
      std::string ss_path = index_path(rs_path, "scopeSpans", s);
      if (!ss.is_object()) {
        ctx.fatal(ss_path, std::string("expected an object, got ") + ss.type_name());
        break;
      }
      Scope scope_read;
      if (const json* scope = object_member(ctx, ss, ss_path, "scope")) {
        scope_read.name = string_member(ctx, *scope, field_path(ss_path, "scope"), "name");
        scope_read.version = string_member(ctx, *scope, field_path(ss_path, "scope"), "version");
      }
      auto scope = std::make_shared<const Scope>(std::move(scope_read));
      const json* spans = array_member(ctx, ss, ss_path, "spans");
      for (std::size_t i = 0; spans && i < spans->size() && !ctx.failed(); ++i) {
        std::string at = index_path(ss_path, "spans", i);
        const json& from = (*spans)[i];
        if (!from.is_object()) {
          ctx.fatal(at, std::string("expected an object, got ") + from.type_name());
          break;
        }
        ReceivedSpan span;
        convert_span(ctx, at, from, span);
        span.resource = resource;
        span.scope = scope;
        ctx.out.spans.push_back(std::move(span));
      }
    }
  }
  if (ctx.failed()) ctx.out.spans.clear();  // a rejected export carries no spans
  return std::move(ctx.out);
}

}  // namespace tracecorr::otlp

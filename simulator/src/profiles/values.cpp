// Checks shared by the profiles decoders: counts, text, values, attributes.
#include <charconv>

#include "problems.hpp"

namespace tracecorr::profiles::detail {

namespace pb_common = opentelemetry::proto::common::v1;

bool check_count(Problems& problems, const std::string& where, std::size_t count, std::size_t limit,
                 std::string_view what) {
  if (count <= limit) return true;
  problems.fatal(where, std::to_string(count) + " " + std::string(what) + " exceed the limit of " + std::to_string(limit),
                 otlp::RejectReason::LimitExceeded);
  return false;
}

const std::string& checked_text(Problems& problems, const ProfilesLimits& limits, const std::string& where,
                                const std::string& raw) {
  if (raw.size() > limits.transport.max_value_bytes)
    problems.fatal(where,
                   "value of " + std::to_string(raw.size()) + " bytes exceeds the " +
                       std::to_string(limits.transport.max_value_bytes) + "-byte limit",
                   otlp::RejectReason::LimitExceeded);
  else if (auto at = utf8_invalid_at(raw))
    problems.fatal(where, "invalid UTF-8 at byte " + std::to_string(*at) + " (OTLP strings are UTF-8)");
  return raw;
}

namespace {

otlp::AttributeValue convert_array(Problems& problems, const ProfilesLimits& limits, const std::string& where,
                                   const pb_common::ArrayValue& from, std::size_t depth) {
  const auto& values = from.values();
  if (!check_count(problems, where, static_cast<std::size_t>(values.size()), limits.transport.max_array_elements,
                   "array elements"))
    return {};
  otlp::AttributeValue::Array array;
  array.reserve(static_cast<std::size_t>(values.size()));
  for (int i = 0; i < values.size() && !problems.failed(); ++i)
    array.push_back(convert_value(problems, limits, index_path(where, "arrayValue.values", i), values[i], depth + 1));
  return otlp::AttributeValue(std::move(array));
}

otlp::AttributeValue convert_kvlist(Problems& problems, const ProfilesLimits& limits, const std::string& where,
                                    const pb_common::KeyValueList& from, std::size_t depth) {
  const auto& values = from.values();
  if (!check_count(problems, where, static_cast<std::size_t>(values.size()), limits.transport.max_attributes_per_span,
                   "kvlist entries"))
    return {};
  otlp::AttributeValue::KvList list;
  list.reserve(static_cast<std::size_t>(values.size()));
  for (int i = 0; i < values.size() && !problems.failed(); ++i) {
    std::string at = index_path(where, "kvlistValue.values", i);
    std::string key = checked_text(problems, limits, at + ".key", values[i].key());
    list.push_back({std::move(key), convert_value(problems, limits, at + ".value", values[i].value(), depth + 1)});
  }
  return otlp::AttributeValue(std::move(list));
}

}  // namespace

otlp::AttributeValue convert_value(Problems& problems, const ProfilesLimits& limits, const std::string& where,
                                   const pb_common::AnyValue& from, std::size_t depth) {
  if (depth > limits.transport.max_nesting_depth) {
    problems.fatal(where, "values nested more than " + std::to_string(limits.transport.max_nesting_depth) + " deep",
                   otlp::RejectReason::LimitExceeded);
    return {};
  }
  switch (from.value_case()) {
    case pb_common::AnyValue::kStringValue:
      return otlp::AttributeValue(checked_text(problems, limits, where, from.string_value()));
    case pb_common::AnyValue::kBoolValue: return otlp::AttributeValue(from.bool_value());
    case pb_common::AnyValue::kIntValue: return otlp::AttributeValue(static_cast<std::int64_t>(from.int_value()));
    case pb_common::AnyValue::kDoubleValue: return otlp::AttributeValue(from.double_value());
    case pb_common::AnyValue::kBytesValue: {
      const auto& bytes = from.bytes_value();
      if (!check_count(problems, where, bytes.size(), limits.transport.max_value_bytes, "bytes")) return {};
      return otlp::AttributeValue(otlp::AttributeValue::Bytes(bytes.begin(), bytes.end()));
    }
    case pb_common::AnyValue::kArrayValue: return convert_array(problems, limits, where, from.array_value(), depth);
    case pb_common::AnyValue::kKvlistValue: return convert_kvlist(problems, limits, where, from.kvlist_value(), depth);
    case pb_common::AnyValue::VALUE_NOT_SET: return {};
  }
  return {};
}

void insert_attribute(Problems& problems, const std::string& where, otlp::Attributes& into, std::string key,
                      otlp::AttributeValue value) {
  if (into.count(key)) {
    problems.note(where, "duplicate attribute key \"" + key.substr(0, 64) + "\"; the first value is kept");
    return;
  }
  into.emplace(std::move(key), std::move(value));
}

std::optional<std::int64_t> integer_attribute(Problems& problems, const std::string& where,
                                              const otlp::Attributes& attributes, std::string_view key) {
  auto it = attributes.find(key);
  if (it == attributes.end()) return std::nullopt;
  if (const auto* i = std::get_if<std::int64_t>(&it->second.value)) return *i;
  if (const auto* s = it->second.as_string()) {
    std::int64_t n = 0;
    auto [end, error] = std::from_chars(s->data(), s->data() + s->size(), n);
    if (error == std::errc() && end == s->data() + s->size() && !s->empty()) {
      problems.note(where + "[\"" + std::string(key) + "\"]", "a string, not an int as the semantic conventions say; read as " +
                                                                   std::to_string(n));
      return n;
    }
  }
  problems.note(where + "[\"" + std::string(key) + "\"]",
                "a " + it->second.type_name() + ", not an int: not read as the " +
                    std::string(key == kProcessPid ? "process" : "thread"));
  return std::nullopt;
}

}  // namespace tracecorr::profiles::detail

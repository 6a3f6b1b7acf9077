#include "tracecorr/otlp_proto.hpp"

namespace tracecorr::otlp {

namespace pb_common = opentelemetry::proto::common::v1;

void to_proto(const AttributeValue& from, pb_common::AnyValue& to) {
  std::visit(
      [&](const auto& v) {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, std::string>) to.set_string_value(v);
        else if constexpr (std::is_same_v<T, bool>) to.set_bool_value(v);
        else if constexpr (std::is_same_v<T, std::int64_t>) to.set_int_value(v);
        else if constexpr (std::is_same_v<T, double>) to.set_double_value(v);
        else if constexpr (std::is_same_v<T, AttributeValue::Bytes>) to.set_bytes_value(std::string(v.begin(), v.end()));
        else if constexpr (std::is_same_v<T, AttributeValue::Array>) {
          auto* array = to.mutable_array_value();
          for (const auto& element : v) to_proto(element, *array->add_values());
        } else if constexpr (std::is_same_v<T, AttributeValue::KvList>) {
          auto* list = to.mutable_kvlist_value();
          for (const auto& kv : v) {
            auto* entry = list->add_values();
            entry->set_key(kv.key);
            to_proto(kv.value, *entry->mutable_value());
          }
        }
      },
      from.value);
}

AttributeValue from_proto(const pb_common::AnyValue& from) {
  switch (from.value_case()) {
    case pb_common::AnyValue::kStringValue: return AttributeValue(from.string_value());
    case pb_common::AnyValue::kBoolValue: return AttributeValue(from.bool_value());
    case pb_common::AnyValue::kIntValue: return AttributeValue(static_cast<std::int64_t>(from.int_value()));
    case pb_common::AnyValue::kDoubleValue: return AttributeValue(from.double_value());
    case pb_common::AnyValue::kBytesValue: {
      const auto& b = from.bytes_value();
      return AttributeValue(AttributeValue::Bytes(b.begin(), b.end()));
    }
    case pb_common::AnyValue::kArrayValue: {
      AttributeValue::Array array;
      array.reserve(static_cast<std::size_t>(from.array_value().values_size()));
      for (const auto& v : from.array_value().values()) array.push_back(from_proto(v));
      return AttributeValue(std::move(array));
    }
    case pb_common::AnyValue::kKvlistValue: return AttributeValue(from_proto(from.kvlist_value().values()));
    case pb_common::AnyValue::VALUE_NOT_SET: return {};
  }
  return {};
}

std::vector<KeyValue> from_proto(const google::protobuf::RepeatedPtrField<pb_common::KeyValue>& from) {
  std::vector<KeyValue> list;
  list.reserve(static_cast<std::size_t>(from.size()));
  for (const auto& kv : from) list.push_back({kv.key(), from_proto(kv.value())});
  return list;
}

}  // namespace tracecorr::otlp

// tracecorr model -> OTLP (binary protobuf and JSON): for tests and for
// fixtures that export spans. Spans sharing resource attributes and scope are
// grouped the way an SDK batches them.
#include <cmath>
#include <nlohmann/json.hpp>

#include "opentelemetry/proto/collector/trace/v1/trace_service.pb.h"
#include "tracecorr/otlp.hpp"
#include "tracecorr/otlp_proto.hpp"

namespace tracecorr::otlp {
namespace {

namespace pb_common = opentelemetry::proto::common::v1;
using json = nlohmann::json;

struct Group {
  const Attributes* resource;
  std::string scope_name, scope_version;
  std::vector<const ReceivedSpan*> spans;
};

// Groups spans by resource, then scope, keeping first-seen order.
std::vector<std::vector<Group>> group(const std::vector<ReceivedSpan>& spans) {
  std::vector<std::vector<Group>> resources;
  for (const auto& span : spans) {
    std::vector<Group>* resource = nullptr;
    for (auto& r : resources)
      if (*r.front().resource == span.resource_attributes()) resource = &r;
    if (!resource) resource = &resources.emplace_back();
    Group* scope = nullptr;
    for (auto& g : *resource)
      if (g.scope_name == span.scope_name() && g.scope_version == span.scope_version()) scope = &g;
    if (!scope)
      scope = &resource->emplace_back(Group{&span.resource_attributes(), span.scope_name(), span.scope_version(), {}});
    scope->spans.push_back(&span);
  }
  return resources;
}

template <typename Repeated>
void to_proto(const Attributes& from, Repeated& to) {
  for (const auto& [key, value] : from) {
    auto* kv = to.Add();
    kv->set_key(key);
    to_proto(value, *kv->mutable_value());
  }
}

std::string bytes_view(const auto& id) { return std::string(reinterpret_cast<const char*>(id.data()), id.size()); }

json to_json(const AttributeValue& from) {
  return std::visit(
      [&](const auto& v) -> json {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, AttributeValue::Empty>) return json::object();
        else if constexpr (std::is_same_v<T, std::string>) return {{"stringValue", v}};
        else if constexpr (std::is_same_v<T, bool>) return {{"boolValue", v}};
        else if constexpr (std::is_same_v<T, std::int64_t>) return {{"intValue", std::to_string(v)}};
        else if constexpr (std::is_same_v<T, double>) {
          if (std::isnan(v)) return {{"doubleValue", "NaN"}};
          if (std::isinf(v)) return {{"doubleValue", v > 0 ? "Infinity" : "-Infinity"}};
          return {{"doubleValue", v}};
        } else if constexpr (std::is_same_v<T, AttributeValue::Bytes>) {
          // Standard base64 with padding, as the protobuf JSON mapping writes it.
          static constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
          std::string text;
          for (std::size_t i = 0; i < v.size(); i += 3) {
            std::uint32_t n = v[i] << 16 | (i + 1 < v.size() ? v[i + 1] << 8 : 0) | (i + 2 < v.size() ? v[i + 2] : 0);
            text += kAlphabet[n >> 18 & 63];
            text += kAlphabet[n >> 12 & 63];
            text += i + 1 < v.size() ? kAlphabet[n >> 6 & 63] : '=';
            text += i + 2 < v.size() ? kAlphabet[n & 63] : '=';
          }
          return {{"bytesValue", text}};
        } else if constexpr (std::is_same_v<T, AttributeValue::Array>) {
          json values = json::array();
          for (const auto& element : v) values.push_back(to_json(element));
          return {{"arrayValue", {{"values", values}}}};
        } else {
          json values = json::array();
          for (const auto& kv : v) values.push_back({{"key", kv.key}, {"value", to_json(kv.value)}});
          return {{"kvlistValue", {{"values", values}}}};
        }
      },
      from.value);
}

json to_json(const Attributes& from) {
  json out = json::array();
  for (const auto& [key, value] : from) out.push_back({{"key", key}, {"value", to_json(value)}});
  return out;
}

}  // namespace

std::string encode_protobuf(const std::vector<ReceivedSpan>& spans) {
  opentelemetry::proto::collector::trace::v1::ExportTraceServiceRequest request;
  for (const auto& resource : group(spans)) {
    auto* rs = request.add_resource_spans();
    to_proto(*resource.front().resource, *rs->mutable_resource()->mutable_attributes());
    for (const auto& scope : resource) {
      auto* ss = rs->add_scope_spans();
      ss->mutable_scope()->set_name(scope.scope_name);
      ss->mutable_scope()->set_version(scope.scope_version);
      for (const ReceivedSpan* span : scope.spans) {
        auto* to = ss->add_spans();
        to->set_trace_id(bytes_view(span->trace_id));
        to->set_span_id(bytes_view(span->span_id));
        if (span->parent_span_id) to->set_parent_span_id(bytes_view(*span->parent_span_id));
        to->set_trace_state(span->trace_state);
        to->set_name(span->name);
        to->set_kind(static_cast<opentelemetry::proto::trace::v1::Span_SpanKind>(span->kind));
        to->set_start_time_unix_nano(span->start_unix_nano);
        to->set_end_time_unix_nano(span->end_unix_nano);
        to->set_flags(span->flags);
        to_proto(span->attributes, *to->mutable_attributes());
        to->set_dropped_attributes_count(span->dropped_attributes_count);
        if (span->status_code || !span->status_message.empty()) {
          to->mutable_status()->set_code(static_cast<opentelemetry::proto::trace::v1::Status_StatusCode>(span->status_code));
          to->mutable_status()->set_message(span->status_message);
        }
      }
    }
  }
  return request.SerializeAsString();
}

std::string encode_json(const std::vector<ReceivedSpan>& spans) {
  json resource_spans = json::array();
  for (const auto& resource : group(spans)) {
    json scope_spans = json::array();
    for (const auto& scope : resource) {
      json out = json::array();
      for (const ReceivedSpan* span : scope.spans) {
        json s = {{"traceId", to_hex(span->trace_id)},
                  {"spanId", to_hex(span->span_id)},
                  {"name", span->name},
                  {"kind", static_cast<std::int32_t>(span->kind)},
                  {"startTimeUnixNano", std::to_string(span->start_unix_nano)},
                  {"endTimeUnixNano", std::to_string(span->end_unix_nano)},
                  {"flags", span->flags},
                  {"attributes", to_json(span->attributes)}};
        if (span->parent_span_id) s["parentSpanId"] = to_hex(*span->parent_span_id);
        if (!span->trace_state.empty()) s["traceState"] = span->trace_state;
        if (span->dropped_attributes_count) s["droppedAttributesCount"] = span->dropped_attributes_count;
        if (span->status_code || !span->status_message.empty())
          s["status"] = {{"code", span->status_code}, {"message", span->status_message}};
        out.push_back(std::move(s));
      }
      scope_spans.push_back({{"scope", {{"name", scope.scope_name}, {"version", scope.scope_version}}}, {"spans", out}});
    }
    resource_spans.push_back(
        {{"resource", {{"attributes", to_json(*resource.front().resource)}}}, {"scopeSpans", scope_spans}});
  }
  return json{{"resourceSpans", resource_spans}}.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace tracecorr::otlp

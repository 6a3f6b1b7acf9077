// Shared by the otlp_*_test.cpp files: sample spans and request builders.
#pragma once

#include "opentelemetry/proto/collector/trace/v1/trace_service.pb.h"
#include "tracecorr/otlp.hpp"

namespace tracecorr::otlp::test_support {

namespace pb_collector = opentelemetry::proto::collector::trace::v1;
namespace pb_common = opentelemetry::proto::common::v1;

inline constexpr char kTraceIdHex[] = "4bf92f3577b34da6a3ce929d0e0e4736";
inline constexpr char kSpanIdHex[] = "00f067aa0ba902b7";
inline constexpr char kParentIdHex[] = "53995c3f42cd8ad8";

inline std::string raw_id(std::string_view hex) {
  std::string bytes(hex.size() / 2, '\0');
  from_hex(hex, std::span<std::uint8_t>(reinterpret_cast<std::uint8_t*>(bytes.data()), bytes.size()));
  return bytes;
}

inline SpanId span_id(std::string_view hex) {
  SpanId id{};
  from_hex(hex, id);
  return id;
}

// A request with one span built directly with the generated protobuf classes
// (independent of tracecorr's encoder).
inline pb_collector::ExportTraceServiceRequest one_span_request() {
  pb_collector::ExportTraceServiceRequest request;
  auto* rs = request.add_resource_spans();
  auto* service = rs->mutable_resource()->add_attributes();
  service->set_key("service.name");
  service->mutable_value()->set_string_value("checkout");
  auto* ss = rs->add_scope_spans();
  ss->mutable_scope()->set_name("tracecorr-test");
  auto* span = ss->add_spans();
  span->set_trace_id(raw_id(kTraceIdHex));
  span->set_span_id(raw_id(kSpanIdHex));
  span->set_parent_span_id(raw_id(kParentIdHex));
  span->set_name("GET /cart");
  span->set_kind(opentelemetry::proto::trace::v1::Span::SPAN_KIND_SERVER);
  span->set_start_time_unix_nano(1'700'000'000'000'000'000ull);
  span->set_end_time_unix_nano(1'700'000'000'500'000'000ull);
  span->set_flags(0x101);
  return request;
}

inline pb_common::AnyValue* add_attribute(pb_collector::ExportTraceServiceRequest& request, const std::string& key) {
  auto* kv = request.mutable_resource_spans(0)->mutable_scope_spans(0)->mutable_spans(0)->add_attributes();
  kv->set_key(key);
  return kv->mutable_value();
}

// The OTLP/JSON form of one span; `attributes` is the JSON array text.
inline std::string one_span_json(std::string_view attributes = "[]", std::string_view span_id_hex = kSpanIdHex) {
  return std::string(R"({"resourceSpans":[{"resource":{"attributes":[{"key":"service.name","value":{"stringValue":"checkout"}}]},)"
                     R"("scopeSpans":[{"scope":{"name":"tracecorr-test"},"spans":[{"traceId":")") +
         kTraceIdHex + R"(","spanId":")" + std::string(span_id_hex) + R"(","parentSpanId":")" + kParentIdHex +
         R"(","name":"GET /cart","kind":2,"startTimeUnixNano":"1700000000000000000","endTimeUnixNano":1700000000500000000,)"
         R"("flags":257,"attributes":)" +
         std::string(attributes) + "}]}]}]}";
}

}  // namespace tracecorr::otlp::test_support

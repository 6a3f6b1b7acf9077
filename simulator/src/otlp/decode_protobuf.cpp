// OTLP binary protobuf -> tracecorr model.
#include <google/protobuf/io/coded_stream.h>

#include "decode_common.hpp"
#include "opentelemetry/proto/collector/trace/v1/trace_service.pb.h"

namespace tracecorr::otlp {
namespace {

namespace pb_common = opentelemetry::proto::common::v1;
namespace pb_trace = opentelemetry::proto::trace::v1;
using detail::DecodeContext;
using detail::field_path;
using detail::index_path;

void convert_attributes(DecodeContext& ctx, const std::string& where,
                        const google::protobuf::RepeatedPtrField<pb_common::KeyValue>& from, Attributes& into,
                        std::size_t depth);

// Our .proto declares text fields as bytes (see common.proto): check here
// what protobuf would have checked, and say where.
const std::string& text(DecodeContext& ctx, const std::string& where, const std::string& raw) {
  detail::check_value_size(ctx, where, raw.size());
  if (auto at = utf8_invalid_at(raw))
    ctx.fatal(where, "invalid UTF-8 at byte " + std::to_string(*at) + " (OTLP strings are UTF-8)");
  return raw;
}

AttributeValue convert_value(DecodeContext& ctx, const std::string& where, const pb_common::AnyValue& from,
                             std::size_t depth) {
  if (depth > ctx.limits.max_nesting_depth) {
    ctx.fatal(where, "values nested more than " + std::to_string(ctx.limits.max_nesting_depth) + " deep",
              RejectReason::LimitExceeded);
    return {};
  }
  switch (from.value_case()) {
    case pb_common::AnyValue::kStringValue: return AttributeValue(text(ctx, where, from.string_value()));
    case pb_common::AnyValue::kBoolValue: return AttributeValue(from.bool_value());
    case pb_common::AnyValue::kIntValue: return AttributeValue(static_cast<std::int64_t>(from.int_value()));
    case pb_common::AnyValue::kDoubleValue: return AttributeValue(from.double_value());
    case pb_common::AnyValue::kBytesValue: {
      detail::check_value_size(ctx, where, from.bytes_value().size());
      const auto& b = from.bytes_value();
      return AttributeValue(AttributeValue::Bytes(b.begin(), b.end()));
    }
    case pb_common::AnyValue::kArrayValue: {
      const auto& values = from.array_value().values();
      if (!detail::check_count(ctx, where, values.size(), ctx.limits.max_array_elements, "array elements")) return {};
      AttributeValue::Array array;
      array.reserve(values.size());
      for (int i = 0; i < values.size() && !ctx.failed(); ++i)
        array.push_back(convert_value(ctx, index_path(where, "arrayValue.values", i), values[i], depth + 1));
      return AttributeValue(std::move(array));
    }
    case pb_common::AnyValue::kKvlistValue: {
      const auto& values = from.kvlist_value().values();
      if (!detail::check_count(ctx, where, values.size(), ctx.limits.max_attributes_per_span, "kvlist entries"))
        return {};
      AttributeValue::KvList list;
      for (int i = 0; i < values.size() && !ctx.failed(); ++i) {
        std::string at = index_path(where, "kvlistValue.values", i);
        list.push_back({text(ctx, at + ".key", values[i].key()), convert_value(ctx, at + ".value", values[i].value(), depth + 1)});
      }
      return AttributeValue(std::move(list));
    }
    case pb_common::AnyValue::VALUE_NOT_SET: return {};
  }
  return {};
}

void convert_attributes(DecodeContext& ctx, const std::string& where,
                        const google::protobuf::RepeatedPtrField<pb_common::KeyValue>& from, Attributes& into,
                        std::size_t depth) {
  if (!detail::check_count(ctx, where, from.size(), ctx.limits.max_attributes_per_span, "attributes")) return;
  for (int i = 0; i < from.size() && !ctx.failed(); ++i) {
    std::string at = where + "[\"" + from[i].key().substr(0, 64) + "\"]";
    text(ctx, at, from[i].key());
    AttributeValue value = convert_value(ctx, at, from[i].value(), depth);
    detail::insert_attribute(ctx, at, into, from[i].key(), std::move(value));
  }
}

// Before protobuf allocates anything: every field of the export counted on the
// wire, walking into the messages the schema names (and into groups, which
// protobuf would keep as unknown fields). A field costs two bytes on the wire
// but up to a few hundred in memory (an empty Span), so a 64 MiB body could
// otherwise become gigabytes. Returns false once the count passes `limit`.
enum class Wire { Request, ResourceSpans, Resource, ScopeSpans, Scope, Span, Status, KeyValue, AnyValue, Array,
                  KvList, Opaque };

Wire field_type(Wire parent, std::uint32_t field) {
  switch (parent) {
    case Wire::Request: return field == 1 ? Wire::ResourceSpans : Wire::Opaque;
    case Wire::ResourceSpans: return field == 1 ? Wire::Resource : field == 2 ? Wire::ScopeSpans : Wire::Opaque;
    case Wire::Resource: return field == 1 ? Wire::KeyValue : Wire::Opaque;
    case Wire::ScopeSpans: return field == 1 ? Wire::Scope : field == 2 ? Wire::Span : Wire::Opaque;
    case Wire::Scope: return field == 3 ? Wire::KeyValue : Wire::Opaque;
    case Wire::Span: return field == 9 ? Wire::KeyValue : field == 15 ? Wire::Status : Wire::Opaque;
    case Wire::KeyValue: return field == 2 ? Wire::AnyValue : Wire::Opaque;
    case Wire::AnyValue: return field == 5 ? Wire::Array : field == 6 ? Wire::KvList : Wire::Opaque;
    case Wire::Array: return field == 1 ? Wire::AnyValue : Wire::Opaque;
    case Wire::KvList: return field == 1 ? Wire::KeyValue : Wire::Opaque;
    default: return Wire::Opaque;
  }
}

struct FieldCounter {
  std::size_t count = 0;
  std::size_t limit;
  std::size_t max_depth;

  // Walks one message's bytes; false when over the limit (malformed bytes
  // stop the walk and are left for protobuf to name).
  bool walk(google::protobuf::io::CodedInputStream& in, Wire type, std::size_t depth, std::uint32_t end_group = 0) {
    while (std::uint32_t tag = in.ReadTag()) {
      if (++count > limit) return false;
      if (end_group && tag == end_group) return true;
      std::uint32_t field = tag >> 3;
      switch (tag & 7) {
        case 0: {
          std::uint64_t v;
          if (!in.ReadVarint64(&v)) return true;
          break;
        }
        case 1: if (!in.Skip(8)) return true; break;
        case 5: if (!in.Skip(4)) return true; break;
        case 2: {
          std::uint32_t length;
          if (!in.ReadVarint32(&length)) return true;
          Wire child = field_type(type, field);
          if (child == Wire::Opaque || depth >= max_depth) {
            if (!in.Skip(static_cast<int>(length))) return true;
            break;
          }
          auto limit_token = in.PushLimit(static_cast<int>(length));
          if (!walk(in, child, depth + 1)) return false;
          in.PopLimit(limit_token);
          break;
        }
        case 3:  // a group: protobuf keeps it as nested unknown fields
          if (depth >= max_depth) return true;  // protobuf's recursion limit refuses it
          if (!walk(in, Wire::Opaque, depth + 1, (field << 3) | 4)) return false;
          break;
        default: return true;  // an end-group without a start, or wire type 6/7: protobuf rejects it
      }
    }
    return true;
  }
};

}  // namespace

DecodedExport decode_protobuf(std::string_view body, const ReceiverLimits& limits) {
  DecodeContext ctx(limits);
  {
    google::protobuf::io::CodedInputStream input(reinterpret_cast<const std::uint8_t*>(body.data()),
                                                 static_cast<int>(std::min<std::size_t>(body.size(), INT32_MAX)));
    FieldCounter counter{0, limits.max_fields_per_request, 8 + 3 * limits.max_nesting_depth};
    if (!counter.walk(input, Wire::Request, 0)) {
      ctx.fatal("", "more than " + std::to_string(limits.max_fields_per_request) +
                        " protobuf fields in one export (counted before decoding)",
                RejectReason::LimitExceeded);
      return std::move(ctx.out);
    }
  }
  opentelemetry::proto::collector::trace::v1::ExportTraceServiceRequest request;
  {
    google::protobuf::io::CodedInputStream input(reinterpret_cast<const std::uint8_t*>(body.data()),
                                                 static_cast<int>(std::min<std::size_t>(body.size(), INT32_MAX)));
    // Request > ResourceSpans > ScopeSpans > Span > KeyValue > AnyValue, then
    // up to three messages per level of nesting (kvlist > KeyValue > AnyValue).
    input.SetRecursionLimit(static_cast<int>(8 + 3 * limits.max_nesting_depth));
    if (body.size() > INT32_MAX || !request.ParseFromCodedStream(&input) || !input.ConsumedEntireMessage()) {
      ctx.fatal("", "body is not a valid binary protobuf ExportTraceServiceRequest (" + std::to_string(body.size()) +
                        " bytes; wrong wire type, truncated field, or nesting deeper than " +
                        std::to_string(limits.max_nesting_depth) + ")");
      return std::move(ctx.out);
    }
  }
  std::size_t span_total = 0;
  for (const auto& rs : request.resource_spans())
    for (const auto& ss : rs.scope_spans()) span_total += static_cast<std::size_t>(ss.spans_size());
  if (!detail::check_count(ctx, "resourceSpans", span_total, limits.max_spans_per_request, "spans"))
    return std::move(ctx.out);

  for (int r = 0; r < request.resource_spans_size() && !ctx.failed(); ++r) {
    const auto& rs = request.resource_spans(r);
    std::string rs_path = index_path("", "resourceSpans", r);
    Attributes resource_attributes;
    convert_attributes(ctx, field_path(rs_path, "resource.attributes"), rs.resource().attributes(),
                       resource_attributes, 0);
    auto resource = std::make_shared<const Attributes>(std::move(resource_attributes));
    for (int s = 0; s < rs.scope_spans_size() && !ctx.failed(); ++s) {
      const auto& ss = rs.scope_spans(s);
      std::string ss_path = index_path(rs_path, "scopeSpans", s);
      auto scope = std::make_shared<const Scope>(Scope{text(ctx, field_path(ss_path, "scope.name"), ss.scope().name()),
                                                       text(ctx, field_path(ss_path, "scope.version"), ss.scope().version())});
      for (int i = 0; i < ss.spans_size() && !ctx.failed(); ++i) {
        const pb_trace::Span& from = ss.spans(i);
        std::string at = index_path(ss_path, "spans", i);
        ReceivedSpan span;
        detail::accept_id(ctx, field_path(at, "traceId"), from.trace_id(), span.trace_id, false);
        detail::accept_id(ctx, field_path(at, "spanId"), from.span_id(), span.span_id, false);
        SpanId parent{};
        if (detail::accept_id(ctx, field_path(at, "parentSpanId"), from.parent_span_id(), parent, true))
          span.parent_span_id = parent;
        span.trace_state = text(ctx, field_path(at, "traceState"), from.trace_state());
        span.name = text(ctx, field_path(at, "name"), from.name());
        span.kind = static_cast<SpanKind>(from.kind());
        span.start_unix_nano = from.start_time_unix_nano();
        span.end_unix_nano = from.end_time_unix_nano();
        span.flags = from.flags();
        convert_attributes(ctx, field_path(at, "attributes"), from.attributes(), span.attributes, 0);
        span.dropped_attributes_count = from.dropped_attributes_count();
        span.status_code = static_cast<std::int32_t>(from.status().code());
        span.status_message = text(ctx, field_path(at, "status.message"), from.status().message());
        span.resource = resource;
        span.scope = scope;
        detail::finish_span(ctx, at, span);
        ctx.out.spans.push_back(std::move(span));
      }
    }
  }
  if (ctx.failed()) ctx.out.spans.clear();  // a rejected export carries no spans
  return std::move(ctx.out);
}

}  // namespace tracecorr::otlp

#include <cmath>
#include <cstdio>

#include "tracecorr/otlp.hpp"

namespace tracecorr::otlp {

std::string_view to_string(AttributeValue::Type type) {
  switch (type) {
    case AttributeValue::Type::Empty: return "empty";
    case AttributeValue::Type::String: return "string";
    case AttributeValue::Type::Bool: return "bool";
    case AttributeValue::Type::Int: return "int";
    case AttributeValue::Type::Double: return "double";
    case AttributeValue::Type::Bytes: return "bytes";
    case AttributeValue::Type::Array: return "array";
    case AttributeValue::Type::KvList: return "kvlist";
  }
  return "unknown";
}

bool AttributeValue::is_string_array() const {
  const Array* array = as_array();
  if (!array) return false;
  for (const auto& element : *array)
    if (element.type() != Type::String) return false;
  return true;
}

std::optional<std::vector<std::string>> AttributeValue::string_array() const {
  if (!is_string_array()) return std::nullopt;
  std::vector<std::string> strings;
  for (const auto& element : *as_array()) strings.push_back(*element.as_string());
  return strings;
}

std::string AttributeValue::type_name() const {
  const Array* array = as_array();
  if (!array) return std::string(to_string(type()));
  if (array->empty()) return "empty-array";
  Type first = array->front().type();
  for (const auto& element : *array)
    if (element.type() != first) return "mixed-array";
  return std::string(to_string(first)) + "-array";
}

namespace {

void append_quoted(std::string& out, std::string_view text) {
  out += '"';
  for (unsigned char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  out += '"';
}

void render(const AttributeValue& value, std::string& out, std::size_t max_chars) {
  if (out.size() > max_chars) return;
  std::visit(
      [&](const auto& v) {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, AttributeValue::Empty>) {
          out += "(empty)";
        } else if constexpr (std::is_same_v<T, std::string>) {
          append_quoted(out, v);
        } else if constexpr (std::is_same_v<T, bool>) {
          out += v ? "true" : "false";
        } else if constexpr (std::is_same_v<T, std::int64_t>) {
          out += std::to_string(v);
        } else if constexpr (std::is_same_v<T, double>) {
          char buf[32];
          std::snprintf(buf, sizeof buf, "%.17g", v);
          out += buf;
        } else if constexpr (std::is_same_v<T, AttributeValue::Bytes>) {
          out += "0x" + to_hex(v);
        } else if constexpr (std::is_same_v<T, AttributeValue::Array>) {
          out += '[';
          for (std::size_t i = 0; i < v.size() && out.size() <= max_chars; ++i) {
            if (i) out += ", ";
            render(v[i], out, max_chars);
          }
          out += ']';
        } else {
          out += '{';
          for (std::size_t i = 0; i < v.size() && out.size() <= max_chars; ++i) {
            if (i) out += ", ";
            append_quoted(out, v[i].key);
            out += ": ";
            render(v[i].value, out, max_chars);
          }
          out += '}';
        }
      },
      value.value);
}

}  // namespace

std::string AttributeValue::to_display(std::size_t max_chars) const {
  std::string out;
  render(*this, out, max_chars);
  if (out.size() > max_chars) {
    out.resize(max_chars);
    out += "...";
  }
  return out;
}

bool AttributeValue::operator==(const AttributeValue& other) const { return value == other.value; }

std::string to_string(SpanKind kind) {
  switch (kind) {
    case SpanKind::Unspecified: return "SPAN_KIND_UNSPECIFIED";
    case SpanKind::Internal: return "SPAN_KIND_INTERNAL";
    case SpanKind::Server: return "SPAN_KIND_SERVER";
    case SpanKind::Client: return "SPAN_KIND_CLIENT";
    case SpanKind::Producer: return "SPAN_KIND_PRODUCER";
    case SpanKind::Consumer: return "SPAN_KIND_CONSUMER";
  }
  return "SPAN_KIND(" + std::to_string(static_cast<std::int32_t>(kind)) + ")";
}

std::string_view to_string(RejectReason reason) {
  switch (reason) {
    case RejectReason::UnsupportedContentType: return "unsupported-content-type";
    case RejectReason::UnsupportedContentEncoding: return "unsupported-content-encoding";
    case RejectReason::BodyTooLarge: return "body-too-large";
    case RejectReason::DecompressedTooLarge: return "decompressed-too-large";
    case RejectReason::MalformedBody: return "malformed-body";
    case RejectReason::InvalidSpan: return "invalid-span";
    case RejectReason::LimitExceeded: return "limit-exceeded";
    case RejectReason::Busy: return "busy";
  }
  return "unknown";
}

const AttributeValue* ReceivedSpan::attribute(std::string_view key) const {
  auto it = attributes.find(key);
  return it == attributes.end() ? nullptr : &it->second;
}

const AttributeValue* ReceivedSpan::resource_attribute(std::string_view key) const {
  const Attributes& all = resource_attributes();
  auto it = all.find(key);
  return it == all.end() ? nullptr : &it->second;
}

const Attributes& ReceivedSpan::resource_attributes() const {
  static const Attributes kNone;
  return resource ? *resource : kNone;
}

const std::string& ReceivedSpan::scope_name() const {
  static const std::string kNone;
  return scope ? scope->name : kNone;
}

const std::string& ReceivedSpan::scope_version() const {
  static const std::string kNone;
  return scope ? scope->version : kNone;
}

std::uint64_t ReceiverCounters::rejected_total() const {
  std::uint64_t total = 0;
  for (const auto& [reason, count] : rejected) total += count;
  return total;
}

std::string ReceiverCounters::describe_foreign() const {
  std::string text = std::to_string(foreign_connections) + " connection" + (foreign_connections == 1 ? "" : "s");
  if (foreign_connections_closed) text += " (" + std::to_string(foreign_connections_closed) + " closed at once)";
  text += " and " + std::to_string(foreign_exports) + " export" + (foreign_exports == 1 ? "" : "s") +
          " from outside the judged process tree";
  if (!foreign_peers.empty()) {
    text += ", from ";
    for (std::size_t i = 0; i < foreign_peers.size(); ++i) text += (i ? "; " : "") + foreign_peers[i];
    if (foreign_peers.size() == kForeignPeersNamed) text += "; and maybe others";
  }
  return text;
}

std::string ExportLosses::describe() const {
  std::string text;
  auto add = [&](std::uint64_t n, const char* one, const char* many) {
    if (n) text += (text.empty() ? "" : ", ") + std::to_string(n) + " " + (n == 1 ? one : many);
  };
  add(abandoned, "connection closed by its exporter before it was accepted",
      "connections closed by their exporter before they were accepted");
  add(cut_short, "request ended by its exporter before it was whole", "requests ended by their exporter before they were whole");
  add(cut, "request cut at the receiver's time limit", "requests cut at the receiver's time limit");
  add(rejected, "export rejected", "exports rejected");
  add(not_kept, "span over the receiver's storage bounds", "spans over the receiver's storage bounds");
  add(listen_drops, "connection attempt dropped at the receiver's full accept queue",
      "connection attempts dropped at the receiver's full accept queue");
  return text.empty() ? "none" : text;
}

}  // namespace tracecorr::otlp

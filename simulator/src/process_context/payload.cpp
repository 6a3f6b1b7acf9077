// The payload: a protobuf ProcessContext, checked on the wire first (every
// length, count and depth bounded, every malformation named with its field
// path and byte offset), then parsed by libprotobuf into typed attributes.
#include <google/protobuf/io/coded_stream.h>

#include <algorithm>
#include <climits>
#include <set>

#include "opentelemetry/proto/processcontext/v1development/process_context.pb.h"
#include "tracecorr/ids.hpp"
#include "tracecorr/otlp_proto.hpp"
#include "tracecorr/process_context.hpp"

namespace tracecorr::process_context {
namespace {

namespace pb_context = opentelemetry::proto::processcontext::v1development;

// ---- The schema, as the wire walk needs it ----

enum class Message { ProcessContext, Resource, KeyValue, AnyValue, ArrayValue, KeyValueList };
enum class Wire : std::uint8_t { Varint = 0, I64 = 1, Len = 2, StartGroup = 3, EndGroup = 4, I32 = 5 };
enum class Content { Scalar, Text, Bytes, Child };

struct FieldSpec {
  std::string_view name;
  Wire wire;
  Content content;
  Message child = Message::ProcessContext;  // Content::Child
  bool list = false;                          // a repeated field counted against max_attributes / max_array_elements
};

std::string_view message_name(Message m) {
  switch (m) {
    case Message::ProcessContext: return "ProcessContext";
    case Message::Resource: return "Resource";
    case Message::KeyValue: return "KeyValue";
    case Message::AnyValue: return "AnyValue";
    case Message::ArrayValue: return "ArrayValue";
    case Message::KeyValueList: return "KeyValueList";
  }
  return "?";
}

// Field numbers of opentelemetry-proto (our .proto files in simulator/proto).
const FieldSpec* field_spec(Message m, std::uint64_t number) {
  static constexpr FieldSpec kContextResource{"resource", Wire::Len, Content::Child, Message::Resource};
  static constexpr FieldSpec kContextAttributes{"attributes", Wire::Len, Content::Child, Message::KeyValue, true};
  static constexpr FieldSpec kResourceAttributes{"attributes", Wire::Len, Content::Child, Message::KeyValue, true};
  static constexpr FieldSpec kResourceDropped{"dropped_attributes_count", Wire::Varint, Content::Scalar};
  static constexpr FieldSpec kKey{"key", Wire::Len, Content::Text};
  static constexpr FieldSpec kValue{"value", Wire::Len, Content::Child, Message::AnyValue};
  static constexpr FieldSpec kAny[] = {
      {"string_value", Wire::Len, Content::Text},
      {"bool_value", Wire::Varint, Content::Scalar},
      {"int_value", Wire::Varint, Content::Scalar},
      {"double_value", Wire::I64, Content::Scalar},
      {"array_value", Wire::Len, Content::Child, Message::ArrayValue},
      {"kvlist_value", Wire::Len, Content::Child, Message::KeyValueList},
      {"bytes_value", Wire::Len, Content::Bytes},
  };
  static constexpr FieldSpec kArrayValues{"values", Wire::Len, Content::Child, Message::AnyValue, true};
  static constexpr FieldSpec kListValues{"values", Wire::Len, Content::Child, Message::KeyValue, true};
  switch (m) {
    case Message::ProcessContext: return number == 1 ? &kContextResource : number == 2 ? &kContextAttributes : nullptr;
    case Message::Resource: return number == 1 ? &kResourceAttributes : number == 2 ? &kResourceDropped : nullptr;
    case Message::KeyValue: return number == 1 ? &kKey : number == 2 ? &kValue : nullptr;
    case Message::AnyValue: return number >= 1 && number <= 7 ? &kAny[number - 1] : nullptr;
    case Message::ArrayValue: return number == 1 ? &kArrayValues : nullptr;
    case Message::KeyValueList: return number == 1 ? &kListValues : nullptr;
  }
  return nullptr;
}

std::string_view wire_name(std::uint64_t wire) {
  switch (wire) {
    case 0: return "varint";
    case 1: return "64-bit";
    case 2: return "length-delimited";
    case 3: return "start-group";
    case 4: return "end-group";
    case 5: return "32-bit";
  }
  return "invalid";
}

// ---- The wire walk ----

// Message nesting the schema allows: ProcessContext > Resource > KeyValue >
// AnyValue, then two or three per level of value nesting; groups in unknown
// fields add their own.
constexpr std::size_t kMaxGroupDepth = 16;

class WireCheck {
 public:
  WireCheck(std::span<const std::uint8_t> bytes, const DecodeLimits& limits) : bytes_(bytes), limits_(limits) {}

  // Checks the fields in [pos_, end) as message `m`; false with error_ set.
  bool message(Message m, std::size_t end, std::size_t value_depth) {
    std::uint32_t occurrences[8] = {};
    while (pos_ < end) {
      if (!one_field(m, end, value_depth, occurrences)) return false;
    }
    return true;
  }

  // One field of message `m` at pos_ (the unit complete_prefix_length counts).
  bool one_field(Message m, std::size_t end, std::size_t value_depth, std::uint32_t (&occurrences)[8]) {
    const std::size_t field_start = pos_;
    std::uint64_t tag = 0;
    if (!varint(end, tag, "field tag")) return false;
    if (++fields_ > limits_.max_fields)
      return too_long(field_start, "more than " + std::to_string(limits_.max_fields) + " protobuf fields");
    const std::uint64_t number = tag >> 3, wire = tag & 7;
    if (number == 0 || number > 0x1fffffff) return malformed(field_start, "field number " + std::to_string(number) + " is invalid");
    const FieldSpec* spec = field_spec(m, number);
    if (spec && wire != static_cast<std::uint64_t>(spec->wire))
      return malformed(field_start, "field " + std::to_string(number) + " (" + std::string(message_name(m)) + "." +
                                        std::string(spec->name) + ") has wire type " + std::to_string(wire) + " (" +
                                        std::string(wire_name(wire)) + "), the schema's is " +
                                        std::to_string(static_cast<int>(spec->wire)) + " (" +
                                        std::string(wire_name(static_cast<std::uint64_t>(spec->wire))) + ")");
    std::uint32_t index = 0;
    if (spec) index = number < 8 ? occurrences[number]++ : 0;
    if (spec) path_.push_back({spec->name, spec->list ? std::optional<std::uint32_t>(index) : std::nullopt});
    bool ok = spec ? known_field(*spec, end, value_depth, index) : unknown_field(number, wire, end, 0, field_start);
    if (ok && spec) path_.pop_back();
    if (!spec && ok) ++unknown_;
    return ok;
  }

  std::size_t pos() const { return pos_; }
  std::size_t unknown_fields() const { return unknown_; }
  const Error& error() const { return error_; }

 private:
  struct Step {
    std::string_view name;
    std::optional<std::uint32_t> index;
  };

  bool known_field(const FieldSpec& spec, std::size_t end, std::size_t value_depth, std::uint32_t index) {
    switch (spec.wire) {
      case Wire::Varint: {
        std::uint64_t v;
        return varint(end, v, "varint value");
      }
      case Wire::I64: return skip(end, 8, "64-bit value");
      default: break;
    }
    // Length-delimited.
    const std::size_t length_at = pos_;
    std::uint64_t length = 0;
    if (!varint(end, length, "length")) return false;
    if (length > end - pos_)
      return malformed(length_at, "length " + std::to_string(length) + " runs past the end of its message (" +
                                      std::to_string(end - pos_) + " bytes left)");
    if (spec.list) {
      const std::size_t bound = spec.child == Message::AnyValue ? limits_.max_array_elements : limits_.max_attributes;
      if (index >= bound)
        return too_long(length_at, "more than " + std::to_string(bound) +
                                       (spec.child == Message::AnyValue ? " array elements" : " attributes") + " in one list");
    }
    const std::size_t body = pos_, body_end = pos_ + static_cast<std::size_t>(length);
    if (spec.content == Content::Text || spec.content == Content::Bytes) {
      if (length > limits_.max_string_bytes)
        return too_long(body, std::to_string(length) + " bytes exceed the " + std::to_string(limits_.max_string_bytes) +
                                  "-byte bound of a string or bytes value");
      if (spec.content == Content::Text) {
        std::string_view text(reinterpret_cast<const char*>(bytes_.data() + body), static_cast<std::size_t>(length));
        if (auto bad = utf8_invalid_at(text))
          return malformed(body + *bad, "invalid UTF-8 at byte " + std::to_string(*bad) + " of the string (protobuf strings are UTF-8)");
      }
      pos_ = body_end;
      return true;
    }
    std::size_t depth = value_depth;
    if (spec.child == Message::ArrayValue || spec.child == Message::KeyValueList) {
      if (++depth > limits_.max_nesting_depth)
        return too_long(body, "attribute values nested more than " + std::to_string(limits_.max_nesting_depth) + " deep");
    }
    if (!message(spec.child, body_end, depth)) return false;
    pos_ = body_end;
    return true;
  }

  // A field the schema does not name: skipped as protobuf would keep it.
  // `at`: where its tag began (pos_ is past it).
  bool unknown_field(std::uint64_t number, std::uint64_t wire, std::size_t end, std::size_t group_depth, std::size_t at) {
    switch (wire) {
      case 0: {
        std::uint64_t v;
        return varint(end, v, "varint value");
      }
      case 1: return skip(end, 8, "64-bit value");
      case 5: return skip(end, 4, "32-bit value");
      case 2: {
        std::uint64_t length = 0;
        if (!varint(end, length, "length")) return false;
        if (length > end - pos_)
          return malformed(at, "length " + std::to_string(length) + " of unknown field " + std::to_string(number) +
                                   " runs past the end of its message (" + std::to_string(end - pos_) + " bytes left)");
        pos_ += static_cast<std::size_t>(length);
        return true;
      }
      case 3: {
        if (group_depth >= kMaxGroupDepth) return too_long(at, "groups nested more than " + std::to_string(kMaxGroupDepth) + " deep");
        for (;;) {
          const std::size_t inner = pos_;
          if (pos_ >= end) return malformed(at, "group " + std::to_string(number) + " is not terminated");
          std::uint64_t tag = 0;
          if (!varint(end, tag, "field tag")) return false;
          if (++fields_ > limits_.max_fields)
            return too_long(inner, "more than " + std::to_string(limits_.max_fields) + " protobuf fields");
          if ((tag & 7) == 4) {
            if ((tag >> 3) != number) return malformed(inner, "end-group " + std::to_string(tag >> 3) + " closes group " + std::to_string(number));
            return true;
          }
          if ((tag >> 3) == 0) return malformed(inner, "field number 0 is invalid");
          if (!unknown_field(tag >> 3, tag & 7, end, group_depth + 1, inner)) return false;
        }
      }
      case 4: return malformed(at, "end-group " + std::to_string(number) + " without a group");
      default: return malformed(at, "wire type " + std::to_string(wire) + " does not exist");
    }
  }

  bool varint(std::size_t end, std::uint64_t& out, std::string_view what) {
    const std::size_t at = pos_;
    out = 0;
    for (unsigned shift = 0; shift < 70; shift += 7) {
      if (pos_ >= end) return malformed(at, "truncated " + std::string(what) + " (varint)");
      const std::uint8_t b = bytes_[pos_++];
      if (shift == 63 && b > 1) return malformed(at, std::string(what) + ": varint longer than 64 bits");
      out |= static_cast<std::uint64_t>(b & 0x7f) << shift;
      if (!(b & 0x80)) return true;
    }
    return malformed(at, std::string(what) + ": varint longer than 10 bytes");
  }

  bool skip(std::size_t end, std::size_t n, std::string_view what) {
    if (end - pos_ < n) return malformed(pos_, "truncated " + std::string(what) + " (" + std::to_string(end - pos_) + " of " + std::to_string(n) + " bytes)");
    pos_ += n;
    return true;
  }

  // "payload byte 12 (resource.attributes[2].value)". Built by appending:
  // GCC 12 warns falsely (-Wrestrict) on "literal" + std::string temporaries.
  std::string where(std::size_t offset) const {
    std::string out = "payload byte ";
    out += std::to_string(offset);
    out += " (";
    if (path_.empty()) out += "ProcessContext";
    for (std::size_t i = 0; i < path_.size(); ++i) {
      if (i) out += '.';
      out += path_[i].name;
      if (path_[i].index) {
        out += '[';
        out += std::to_string(*path_[i].index);
        out += ']';
      }
    }
    out += ')';
    return out;
  }

  bool fail(ErrorKind kind, std::size_t offset, std::string what) {
    error_ = make_error(kind, std::move(what), where(offset));
    return false;
  }
  bool malformed(std::size_t offset, std::string what) { return fail(ErrorKind::kMalformed, offset, std::move(what)); }
  bool too_long(std::size_t offset, std::string what) { return fail(ErrorKind::kTooLong, offset, std::move(what)); }

  std::span<const std::uint8_t> bytes_;
  const DecodeLimits& limits_;
  std::size_t pos_ = 0;
  std::size_t fields_ = 0;
  std::size_t unknown_ = 0;
  std::vector<Step> path_;
  Error error_;
};

}  // namespace

Expected<Payload> decode_payload(std::span<const std::uint8_t> bytes, const DecodeLimits& limits) {
  if (bytes.size() > limits.max_payload_bytes || bytes.size() > INT_MAX)
    return make_error(ErrorKind::kTooLong,
                      std::to_string(bytes.size()) + " bytes exceed the " +
                          std::to_string(std::min<std::size_t>(limits.max_payload_bytes, INT_MAX)) +
                          "-byte payload bound",
                      "payload");
  WireCheck check(bytes, limits);
  if (!check.message(Message::ProcessContext, bytes.size(), 0)) return check.error();

  pb_context::ProcessContext parsed;
  google::protobuf::io::CodedInputStream input(bytes.data(), static_cast<int>(bytes.size()));
  // The walk bounded the nesting: messages at most 4 + 3 per value level deep,
  // groups in unknown fields at most kMaxGroupDepth more.
  input.SetRecursionLimit(static_cast<int>(4 + 3 * limits.max_nesting_depth + kMaxGroupDepth + 1));
  if (!parsed.ParseFromCodedStream(&input) || !input.ConsumedEntireMessage())
    return make_error(ErrorKind::kMalformed, "libprotobuf refused the payload as a ProcessContext", "payload");

  Payload out;
  out.has_resource = parsed.has_resource();
  out.resource = otlp::from_proto(parsed.resource().attributes());
  out.resource_dropped_attributes_count = parsed.resource().dropped_attributes_count();
  out.attributes = otlp::from_proto(parsed.attributes());
  out.unknown_fields = check.unknown_fields();
  return out;
}

std::vector<std::uint8_t> encode_payload(const Payload& payload) {
  pb_context::ProcessContext message;
  auto add = [](const AttributeList& from, auto& to) {
    for (const auto& kv : from) {
      auto* entry = to.Add();
      entry->set_key(kv.key);
      otlp::to_proto(kv.value, *entry->mutable_value());
    }
  };
  if (payload.has_resource || !payload.resource.empty() || payload.resource_dropped_attributes_count) {
    auto* resource = message.mutable_resource();
    add(payload.resource, *resource->mutable_attributes());
    resource->set_dropped_attributes_count(payload.resource_dropped_attributes_count);
  }
  add(payload.attributes, *message.mutable_attributes());
  std::string bytes = message.SerializeAsString();
  return {bytes.begin(), bytes.end()};
}

std::size_t complete_prefix_length(std::span<const std::uint8_t> bytes) {
  const DecodeLimits limits;
  WireCheck check(bytes, limits);
  std::uint32_t occurrences[8] = {};
  std::size_t complete = 0;
  while (check.pos() < bytes.size() && check.one_field(Message::ProcessContext, bytes.size(), 0, occurrences))
    complete = check.pos();
  return complete;
}

std::vector<std::string> duplicate_keys(const AttributeList& list) {
  std::set<std::string_view> seen, reported;
  std::vector<std::string> duplicates;
  for (const auto& kv : list)
    if (!seen.insert(kv.key).second && reported.insert(kv.key).second) duplicates.push_back(kv.key);
  return duplicates;
}

std::vector<std::string> keys_with_prefix(const AttributeList& list, std::string_view prefix) {
  std::vector<std::string> keys;
  for (const auto& kv : list)
    if (kv.key.starts_with(prefix)) keys.push_back(kv.key);
  return keys;
}

const otlp::AttributeValue* find_attribute(const AttributeList& list, std::string_view key) {
  for (const auto& kv : list)
    if (kv.key == key) return &kv.value;
  return nullptr;
}

}  // namespace tracecorr::process_context

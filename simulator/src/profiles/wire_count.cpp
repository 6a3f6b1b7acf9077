#include "wire_count.hpp"

#include <cstdint>

namespace tracecorr::profiles::detail {
namespace {

// The messages of profiles_service.proto and profiles.proto (and the OTLP
// common ones they hold), and what a length-delimited field of each holds.
enum class Wire {
  Request, ResourceProfiles, Resource, ScopeProfiles, Scope, Profile, Sample, Dictionary, Mapping, Location,
  Stack, KeyValueAndUnit, KeyValue, AnyValue, Array, KvList,
  PackedVarint,   // repeated int32 / int64: one element per varint
  PackedFixed64,  // repeated fixed64: one element per 8 bytes
  Opaque,         // bytes, strings, messages with scalars only, unknown fields
};

Wire field_type(Wire parent, std::uint32_t field) {
  switch (parent) {
    case Wire::Request: return field == 1 ? Wire::ResourceProfiles : field == 2 ? Wire::Dictionary : Wire::Opaque;
    case Wire::ResourceProfiles: return field == 1 ? Wire::Resource : field == 2 ? Wire::ScopeProfiles : Wire::Opaque;
    case Wire::Resource: return field == 1 ? Wire::KeyValue : Wire::Opaque;
    case Wire::ScopeProfiles: return field == 1 ? Wire::Scope : field == 2 ? Wire::Profile : Wire::Opaque;
    case Wire::Scope: return field == 3 ? Wire::KeyValue : Wire::Opaque;
    case Wire::Profile: return field == 2 ? Wire::Sample : field == 11 ? Wire::PackedVarint : Wire::Opaque;
    case Wire::Sample:
      return field == 2 || field == 4 ? Wire::PackedVarint : field == 5 ? Wire::PackedFixed64 : Wire::Opaque;
    case Wire::Dictionary:
      switch (field) {
        case 1: return Wire::Mapping;
        case 2: return Wire::Location;
        case 6: return Wire::KeyValueAndUnit;
        case 7: return Wire::Stack;
        default: return Wire::Opaque;  // functions and links hold scalars; strings
      }
    case Wire::Mapping: return field == 5 ? Wire::PackedVarint : Wire::Opaque;
    case Wire::Location: return field == 4 ? Wire::PackedVarint : Wire::Opaque;  // lines hold scalars
    case Wire::Stack: return field == 1 ? Wire::PackedVarint : Wire::Opaque;
    case Wire::KeyValueAndUnit: return field == 2 ? Wire::AnyValue : Wire::Opaque;
    case Wire::KeyValue: return field == 2 ? Wire::AnyValue : Wire::Opaque;
    case Wire::AnyValue: return field == 5 ? Wire::Array : field == 6 ? Wire::KvList : Wire::Opaque;
    case Wire::Array: return field == 1 ? Wire::AnyValue : Wire::Opaque;
    case Wire::KvList: return field == 1 ? Wire::KeyValue : Wire::Opaque;
    default: return Wire::Opaque;
  }
}

class Walker {
 public:
  Walker(std::string_view body, std::size_t limit, std::size_t max_depth)
      : p_(reinterpret_cast<const std::uint8_t*>(body.data())), limit_(limit), max_depth_(max_depth) {}

  // Walks [p_, end) as a message of `type`; false when over the limit.
  bool walk(const std::uint8_t* end, Wire type, std::size_t depth, std::uint32_t end_group = 0) {
    std::uint64_t tag = 0;
    while (p_ < end && varint(end, tag)) {
      if (!add(1)) return false;
      if (end_group && tag == end_group) return true;
      const auto field = static_cast<std::uint32_t>(tag >> 3);
      std::uint64_t skip = 0;
      switch (tag & 7) {
        case 0:
          if (!varint(end, skip)) return true;
          break;
        case 1: skip = 8; break;
        case 5: skip = 4; break;
        case 2: {
          std::uint64_t length = 0;
          if (!varint(end, length) || length > static_cast<std::uint64_t>(end - p_)) return true;
          if (!length_delimited(p_ + length, field_type(type, field), depth)) return false;
          break;
        }
        case 3:  // a group: libprotobuf keeps it as nested unknown fields
          if (depth >= max_depth_) return true;
          if (!walk(end, Wire::Opaque, depth + 1, (field << 3) | 4)) return false;
          break;
        default: return true;  // an end-group without a start, or wire type 6/7: libprotobuf refuses it
      }
      if (skip > static_cast<std::uint64_t>(end - p_)) return true;
      p_ += skip;
    }
    return true;
  }

 private:
  bool length_delimited(const std::uint8_t* field_end, Wire child, std::size_t depth) {
    if (child == Wire::PackedVarint) {
      std::size_t elements = 0;
      for (const std::uint8_t* q = p_; q < field_end; ++q) elements += (*q & 0x80) == 0;
      p_ = field_end;
      return add(elements);
    }
    if (child == Wire::PackedFixed64) {
      std::size_t elements = static_cast<std::size_t>(field_end - p_ + 7) / 8;
      p_ = field_end;
      return add(elements);
    }
    if (child == Wire::Opaque || depth >= max_depth_) {
      p_ = field_end;
      return true;
    }
    if (!walk(field_end, child, depth + 1)) return false;
    p_ = field_end;
    return true;
  }

  bool varint(const std::uint8_t* end, std::uint64_t& out) {
    out = 0;
    for (int shift = 0; shift < 64 && p_ < end; shift += 7) {
      std::uint8_t byte = *p_++;
      out |= static_cast<std::uint64_t>(byte & 0x7f) << shift;
      if (!(byte & 0x80)) return true;
    }
    return false;
  }

  bool add(std::size_t n) {
    count_ += n;
    return count_ <= limit_;
  }

  const std::uint8_t* p_;
  std::size_t count_ = 0;
  std::size_t limit_;
  std::size_t max_depth_;
};

}  // namespace

bool fields_within(std::string_view body, std::size_t limit, std::size_t max_depth) {
  Walker walker(body, limit, max_depth);
  return walker.walk(reinterpret_cast<const std::uint8_t*>(body.data()) + body.size(), Wire::Request, 0);
}

}  // namespace tracecorr::profiles::detail

// Shared by the protobuf and JSON decoders: problem bookkeeping and the checks
// that do not depend on the encoding (id lengths, counts, duplicate keys).
#pragma once

#include <cstring>
#include <string>
#include <string_view>

#include "tracecorr/otlp.hpp"

namespace tracecorr::otlp::detail {

class DecodeContext {
 public:
  explicit DecodeContext(const ReceiverLimits& limits) : limits(limits) {}

  const ReceiverLimits& limits;
  DecodedExport out;

  void fatal(std::string where, std::string what, RejectReason reason = RejectReason::MalformedBody) {
    add({std::move(where), std::move(what), true, reason});
  }
  void note(std::string where, std::string what) { add({std::move(where), std::move(what), false}); }
  bool failed() const { return out.first_fatal.has_value(); }

 private:
  void add(DecodeProblem problem) {
    if (problem.fatal && !out.first_fatal) out.first_fatal = problem;
    if (out.problems.size() < ReceivedRequest::kMaxProblemsKept)
      out.problems.push_back(std::move(problem));
    else
      ++out.problems_not_kept;
  }
};

inline std::string field_path(std::string_view parent, std::string_view field) {
  return parent.empty() ? std::string(field) : std::string(parent) + "." + std::string(field);
}
inline std::string index_path(std::string_view parent, std::string_view field, std::size_t i) {
  return (field.empty() ? std::string(parent) : field_path(parent, field)) + "[" + std::to_string(i) + "]";
}

// Checks a decoded id (raw bytes) and stores it. Required ids (trace, span)
// must be exactly N bytes and not all zero; an optional id (parent) may be
// empty. Returns whether an id is present.
template <std::size_t N>
bool accept_id(DecodeContext& ctx, const std::string& where, std::string_view raw, std::array<std::uint8_t, N>& out,
               bool optional) {
  if (raw.empty() && optional) return false;
  if (raw.size() != N) {
    ctx.fatal(where, std::to_string(raw.size()) + " bytes, an id of this kind has " + std::to_string(N),
              RejectReason::InvalidSpan);
    return false;
  }
  std::memcpy(out.data(), raw.data(), N);
  if (is_zero(out)) {
    if (optional) {
      ctx.note(where, "all-zero id; treated as absent (OTLP sends an empty parent for a root span)");
      return false;
    }
    ctx.fatal(where, "all-zero id is invalid (W3C Trace Context)", RejectReason::InvalidSpan);
    return false;
  }
  return true;
}

inline void check_value_size(DecodeContext& ctx, const std::string& where, std::size_t size) {
  if (size > ctx.limits.max_value_bytes)
    ctx.fatal(where, "value of " + std::to_string(size) + " bytes exceeds the " +
                         std::to_string(ctx.limits.max_value_bytes) + "-byte limit",
              RejectReason::LimitExceeded);
}

// Adds one decoded attribute to a map; the first of duplicate keys wins.
inline void insert_attribute(DecodeContext& ctx, const std::string& where, Attributes& into, std::string key,
                             AttributeValue value) {
  if (into.count(key)) {
    ctx.note(where, "duplicate attribute key \"" + key + "\"; the first value is kept");
    return;
  }
  into.emplace(std::move(key), std::move(value));
}

inline bool check_count(DecodeContext& ctx, const std::string& where, std::size_t count, std::size_t limit,
                        std::string_view what) {
  if (count <= limit) return true;
  ctx.fatal(where, std::to_string(count) + " " + std::string(what) + " exceed the limit of " + std::to_string(limit),
            RejectReason::LimitExceeded);
  return false;
}

// Checks that do not depend on the encoding, once a span is decoded.
inline void finish_span(DecodeContext& ctx, const std::string& where, const ReceivedSpan& span) {
  if (span.end_unix_nano != 0 && span.end_unix_nano < span.start_unix_nano)
    ctx.note(where, "endTimeUnixNano is before startTimeUnixNano");
  auto kind = static_cast<std::int32_t>(span.kind);
  if (kind < 0 || kind > 5) ctx.note(field_path(where, "kind"), "undefined span kind " + std::to_string(kind));
}

}  // namespace tracecorr::otlp::detail

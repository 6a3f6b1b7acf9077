// The profiles decoders' problem bookkeeping and the checks that do not
// depend on the encoding (text, counts, values), shared by the OTLP decoder
// and the JSON-lines reader.
#pragma once

#include <string>
#include <string_view>

#include "opentelemetry/proto/common/v1/common.pb.h"
#include "tracecorr/profiles/decode.hpp"

namespace tracecorr::profiles::detail {

class Problems {
 public:
  explicit Problems(DecodedProfiles& out) : out_(out) {}

  void fatal(std::string where, std::string what, otlp::RejectReason reason = otlp::RejectReason::MalformedBody) {
    add({std::move(where), std::move(what), true, reason});
  }
  void note(std::string where, std::string what) { add({std::move(where), std::move(what), false}); }
  bool failed() const { return out_.first_fatal.has_value(); }

 private:
  void add(otlp::DecodeProblem problem) {
    if (problem.fatal && !out_.first_fatal) out_.first_fatal = problem;
    if (out_.problems.size() < otlp::ReceivedRequest::kMaxProblemsKept)
      out_.problems.push_back(std::move(problem));
    else
      ++out_.problems_not_kept;
  }
  DecodedProfiles& out_;
};

inline std::string field_path(std::string_view parent, std::string_view field) {
  return parent.empty() ? std::string(field) : std::string(parent) + "." + std::string(field);
}
inline std::string index_path(std::string_view parent, std::string_view field, std::size_t i) {
  return field_path(parent, field) + "[" + std::to_string(i) + "]";
}

// A count against its bound; false (and a fatal LimitExceeded) when over.
bool check_count(Problems& problems, const std::string& where, std::size_t count, std::size_t limit,
                 std::string_view what);
// Text as sent (our .proto declares it bytes): within max_value_bytes and
// valid UTF-8, else fatal. Returns it either way.
const std::string& checked_text(Problems& problems, const ProfilesLimits& limits, const std::string& where,
                                const std::string& raw);
// An OTLP AnyValue, bounded (size, elements, nesting), into tracecorr's model.
otlp::AttributeValue convert_value(Problems& problems, const ProfilesLimits& limits, const std::string& where,
                                   const opentelemetry::proto::common::v1::AnyValue& from, std::size_t depth = 0);
// Adds one attribute; the first of duplicate keys wins (a note says so).
void insert_attribute(Problems& problems, const std::string& where, otlp::Attributes& into, std::string key,
                      otlp::AttributeValue value);
// `process.pid` or `thread.id`: an int, or a string of decimal digits (noted).
std::optional<std::int64_t> integer_attribute(Problems& problems, const std::string& where,
                                              const otlp::Attributes& attributes, std::string_view key);

}  // namespace tracecorr::profiles::detail

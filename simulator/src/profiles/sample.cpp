#include "tracecorr/profiles/sample.hpp"

namespace tracecorr::profiles {

std::string_view to_string(Source source) {
  switch (source) {
    case Source::OtlpGrpc: return "otlp-grpc";
    case Source::OtlpHttp: return "otlp-http";
    case Source::JsonLines: return "json-lines";
  }
  return "unknown";
}

std::string_view to_string(Clock clock) { return clock == Clock::Unix ? "unix" : "monotonic"; }

namespace {

const otlp::AttributeValue* find(const std::shared_ptr<const otlp::Attributes>& attributes, std::string_view key) {
  if (!attributes) return nullptr;
  auto it = attributes->find(key);
  return it == attributes->end() ? nullptr : &it->second;
}

// Shared or not, null or empty: the same content.
template <typename T>
bool same_content(const std::shared_ptr<const T>& a, const std::shared_ptr<const T>& b) {
  static const T empty{};
  return (a ? *a : empty) == (b ? *b : empty);
}

}  // namespace

const otlp::AttributeValue* ProfileSample::attribute(std::string_view key) const { return find(attributes, key); }

const otlp::AttributeValue* ProfileSample::resource_attribute(std::string_view key) const {
  return find(resource, key);
}

bool same_observation(const ProfileSample& a, const ProfileSample& b) {
  return a.time == b.time && a.value == b.value && a.pid == b.pid && a.tid == b.tid && a.link == b.link &&
         a.trace_flags == b.trace_flags && same_content(a.attributes, b.attributes) &&
         same_content(a.resource, b.resource) && same_content(a.stack, b.stack) && same_content(a.profile, b.profile);
}

}  // namespace tracecorr::profiles

// Shared by the profiles tests: exports built with the generated protobuf
// classes (independent of tracecorr's encoder), and samples built by hand.
#pragma once

#include <algorithm>
#include <string>
#include <tuple>
#include <vector>

#include "opentelemetry/proto/collector/profiles/v1development/profiles_service.pb.h"
#include "tracecorr/profiles/sample.hpp"

namespace tracecorr::profiles::test_support {

namespace pb = opentelemetry::proto::profiles::v1development;
namespace pb_collector = opentelemetry::proto::collector::profiles::v1development;

inline constexpr char kTraceIdHex[] = "4bf92f3577b34da6a3ce929d0e0e4736";
inline constexpr char kSpanIdHex[] = "00f067aa0ba902b7";
inline constexpr std::uint64_t kT0 = 1'700'000'000'000'000'000ull;

inline std::string raw_id(std::string_view hex) {
  std::string bytes(hex.size() / 2, '\0');
  from_hex(hex, std::span<std::uint8_t>(reinterpret_cast<std::uint8_t*>(bytes.data()), bytes.size()));
  return bytes;
}

inline SampleLink link_of(std::string_view trace_hex, std::string_view span_hex) {
  SampleLink link;
  from_hex(trace_hex, link.trace_id);
  from_hex(span_hex, link.span_id);
  return link;
}

// An export the way the OTel eBPF profiler builds one: a dictionary with its
// zero values, one resource (container.id), one CPU profile whose samples
// carry thread.id and process.pid attributes, a link and aggregated
// timestamps. Tests add to it or break it.
class ExportBuilder {
 public:
  ExportBuilder() {
    auto* d = request.mutable_dictionary();
    d->add_string_table("");
    d->add_mapping_table();
    d->add_location_table();
    d->add_function_table();
    d->add_attribute_table();
    d->add_stack_table();
    auto* zero = d->add_link_table();
    zero->set_trace_id(std::string(16, '\0'));
    zero->set_span_id(std::string(8, '\0'));
    auto* rp = request.add_resource_profiles();
    auto* kv = rp->mutable_resource()->add_attributes();
    kv->set_key("container.id");
    kv->mutable_value()->set_string_value("c0ffee");
    auto* sp = rp->add_scope_profiles();
    sp->mutable_scope()->set_name("otel-ebpf-profiler-test");
    auto* profile = sp->add_profiles();
    profile->mutable_sample_type()->set_type_strindex(string("samples"));
    profile->mutable_sample_type()->set_unit_strindex(string("count"));
    profile->set_time_unix_nano(kT0);
  }

  std::int32_t string(const std::string& text) {
    auto* d = request.mutable_dictionary();
    for (int i = 0; i < d->string_table_size(); ++i)
      if (d->string_table(i) == text) return i;
    d->add_string_table(text);
    return d->string_table_size() - 1;
  }
  std::int32_t int_attribute(const std::string& key, std::int64_t value) {
    auto* a = request.mutable_dictionary()->add_attribute_table();
    a->set_key_strindex(string(key));
    a->mutable_value()->set_int_value(value);
    return request.dictionary().attribute_table_size() - 1;
  }
  std::int32_t string_attribute(const std::string& key, const std::string& value) {
    auto* a = request.mutable_dictionary()->add_attribute_table();
    a->set_key_strindex(string(key));
    a->mutable_value()->set_string_value(value);
    return request.dictionary().attribute_table_size() - 1;
  }
  std::int32_t link(std::string_view trace_hex, std::string_view span_hex) {
    auto* l = request.mutable_dictionary()->add_link_table();
    l->set_trace_id(raw_id(trace_hex));
    l->set_span_id(raw_id(span_hex));
    return request.dictionary().link_table_size() - 1;
  }
  std::int32_t stack(const std::vector<std::uint64_t>& addresses) {
    auto* d = request.mutable_dictionary();
    auto* s = d->add_stack_table();
    for (std::uint64_t address : addresses) {
      d->add_location_table()->set_address(address);
      s->add_location_indices(d->location_table_size() - 1);
    }
    return d->stack_table_size() - 1;
  }
  pb::Profile& profile() { return *request.mutable_resource_profiles(0)->mutable_scope_profiles(0)->mutable_profiles(0); }
  // A sample of thread `tid` of process `pid` (attributes), with `link` and `timestamps`.
  pb::Sample& sample(std::int64_t pid, std::int64_t tid, std::int32_t link_index,
                     const std::vector<std::uint64_t>& timestamps) {
    auto* s = profile().add_samples();
    s->add_attribute_indices(int_attribute("process.pid", pid));
    s->add_attribute_indices(int_attribute("thread.id", tid));
    s->set_link_index(link_index);
    for (std::uint64_t t : timestamps) s->add_timestamps_unix_nano(t);
    return *s;
  }
  std::string bytes() const { return request.SerializeAsString(); }

  pb_collector::ExportProfilesServiceRequest request;
};

// Samples in a stable order, for comparing two lists that hold the same
// observations in another order.
inline std::vector<ProfileSample> sorted(std::vector<ProfileSample> samples) {
  auto key = [](const ProfileSample& s) {
    return std::make_tuple(s.time ? s.time->nanos : 0, s.tid.value_or(0), s.pid.value_or(0), s.value,
                           s.link ? to_hex(s.link->span_id) : std::string());
  };
  std::stable_sort(samples.begin(), samples.end(), [&](const auto& a, const auto& b) { return key(a) < key(b); });
  return samples;
}

}  // namespace tracecorr::profiles::test_support

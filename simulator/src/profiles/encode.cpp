// ProfileSample -> ExportProfilesServiceRequest (see encode.hpp for the shape).
#include <time.h>

#include <map>
#include <tuple>
#include <unordered_map>

#include "encode_message.hpp"
#include "tracecorr/clock_offset.hpp"
#include "tracecorr/otlp_proto.hpp"

namespace tracecorr::profiles {
namespace {

namespace pb = opentelemetry::proto::profiles::v1development;
namespace pb_collector = opentelemetry::proto::collector::profiles::v1development;

// The dictionary, deduplicated, each table's zero value at index 0.
class DictionaryBuilder {
 public:
  explicit DictionaryBuilder(pb::ProfilesDictionary& d) : d_(d) {
    string("");
    d_.add_mapping_table();
    d_.add_location_table();
    d_.add_function_table();
    d_.add_attribute_table();
    d_.add_stack_table();
    auto* zero_link = d_.add_link_table();  // the 16- and 8-byte zero ids OTLP recommends for index 0
    zero_link->set_trace_id(std::string(16, '\0'));
    zero_link->set_span_id(std::string(8, '\0'));
  }

  std::int32_t string(const std::string& text) {
    auto [it, added] = strings_.try_emplace(text, d_.string_table_size());
    if (added) d_.add_string_table(text);
    return it->second;
  }

  std::int32_t attribute(const std::string& key, const otlp::AttributeValue& value) {
    opentelemetry::proto::common::v1::AnyValue any;
    otlp::to_proto(value, any);
    const std::int32_t key_index = string(key);
    auto [it, added] = attributes_.try_emplace({key_index, any.SerializeAsString()}, d_.attribute_table_size());
    if (added) {
      auto* entry = d_.add_attribute_table();
      entry->set_key_strindex(key_index);
      *entry->mutable_value() = std::move(any);
    }
    return it->second;
  }

  std::int32_t link(const std::optional<SampleLink>& link) {
    if (!link) return 0;
    const std::string key(reinterpret_cast<const char*>(link->trace_id.data()), 16);
    auto [it, added] = links_.try_emplace(key + std::string(reinterpret_cast<const char*>(link->span_id.data()), 8),
                                          d_.link_table_size());
    if (added) {
      auto* entry = d_.add_link_table();
      entry->set_trace_id(key);
      entry->set_span_id(std::string(reinterpret_cast<const char*>(link->span_id.data()), 8));
    }
    return it->second;
  }

  std::int32_t stack(const std::shared_ptr<const Stack>& stack) {
    if (!stack || stack->empty()) return 0;
    auto [it, added] = stacks_.try_emplace(*stack, d_.stack_table_size());
    if (added) {
      auto* entry = d_.add_stack_table();
      for (std::uint64_t address : *stack) {
        auto [location, new_location] = locations_.try_emplace(address, d_.location_table_size());
        if (new_location) d_.add_location_table()->set_address(address);
        entry->add_location_indices(location->second);
      }
    }
    return it->second;
  }

 private:
  pb::ProfilesDictionary& d_;
  std::unordered_map<std::string, std::int32_t> strings_;
  std::map<std::pair<std::int32_t, std::string>, std::int32_t> attributes_;
  std::unordered_map<std::string, std::int32_t> links_;
  std::map<Stack, std::int32_t> stacks_;
  std::unordered_map<std::uint64_t, std::int32_t> locations_;
};

// Observations of one identity, written as one Sample at the end.
struct Group {
  pb::Sample* sample = nullptr;
  std::vector<std::uint64_t> timestamps;
  std::vector<std::int64_t> values;
};

class Encoder {
 public:
  Encoder(const EncodeOptions& options, pb_collector::ExportProfilesServiceRequest& out)
      : options_(options), out_(out), dictionary_(*out.mutable_dictionary()) {}

  void add(const ProfileSample& sample) {
    pb::Profile* profile = profile_for(sample);
    const bool timed = sample.time.has_value();
    auto key = std::make_tuple(profile, dictionary_.stack(sample.stack), attribute_indices(sample),
                               dictionary_.link(sample.link), timed);
    auto [it, added] = groups_.try_emplace(std::move(key));
    Group& group = it->second;
    if (added) {
      group.sample = profile->add_samples();
      group.sample->set_stack_index(std::get<1>(it->first));
      for (std::int32_t index : std::get<2>(it->first)) group.sample->add_attribute_indices(index);
      group.sample->set_link_index(std::get<3>(it->first));
    }
    if (timed)
      group.timestamps.push_back(sample.time->clock == Clock::Unix
                                     ? sample.time->nanos
                                     : sample.time->nanos + static_cast<std::uint64_t>(options_.monotonic_to_unix_ns));
    group.values.push_back(sample.value);
  }

  void finish() {
    for (auto& [key, group] : groups_) {
      const bool all_ones = std::all_of(group.values.begin(), group.values.end(), [](std::int64_t v) { return v == 1; });
      for (std::uint64_t t : group.timestamps) group.sample->add_timestamps_unix_nano(t);
      if (!all_ones || group.timestamps.empty())
        for (std::int64_t v : group.values) group.sample->add_values(v);
    }
  }

 private:
  std::vector<std::int32_t> attribute_indices(const ProfileSample& sample);
  pb::Profile* profile_for(const ProfileSample& sample);
  pb::ResourceProfiles* resource_for(const std::shared_ptr<const otlp::Attributes>& resource);

  const EncodeOptions& options_;
  pb_collector::ExportProfilesServiceRequest& out_;
  DictionaryBuilder dictionary_;
  std::map<const otlp::Attributes*, std::vector<std::int32_t>> attribute_sets_;  // by pointer: samples keep them alive
  std::vector<std::pair<otlp::Attributes, pb::ResourceProfiles*>> resources_;
  std::vector<std::tuple<pb::ResourceProfiles*, ProfileInfo, pb::Profile*>> profiles_;
  std::map<std::tuple<pb::Profile*, std::int32_t, std::vector<std::int32_t>, std::int32_t, bool>, Group> groups_;
};

std::vector<std::int32_t> Encoder::attribute_indices(const ProfileSample& sample) {
  std::vector<std::int32_t> indices;
  if (sample.attributes) {
    auto [it, added] = attribute_sets_.try_emplace(sample.attributes.get());
    if (added)
      for (const auto& [key, value] : *sample.attributes) it->second.push_back(dictionary_.attribute(key, value));
    indices = it->second;
  }
  const auto* own_tid = sample.attribute(kThreadId);
  if (sample.tid && !own_tid) indices.push_back(dictionary_.attribute(kThreadId, otlp::AttributeValue(*sample.tid)));
  const auto* resource_pid = sample.resource_attribute(kProcessPid);
  const bool pid_said = sample.attribute(kProcessPid) ||
                        (resource_pid && resource_pid->value == otlp::AttributeValue(sample.pid.value_or(-1)).value);
  if (sample.pid && !pid_said) indices.push_back(dictionary_.attribute(kProcessPid, otlp::AttributeValue(*sample.pid)));
  return indices;
}

pb::ResourceProfiles* Encoder::resource_for(const std::shared_ptr<const otlp::Attributes>& resource) {
  static const otlp::Attributes none;
  const otlp::Attributes& attributes = resource ? *resource : none;
  for (auto& [known, entry] : resources_)
    if (known == attributes) return entry;
  auto* entry = out_.add_resource_profiles();
  for (const auto& [key, value] : attributes) {
    auto* kv = entry->mutable_resource()->add_attributes();
    kv->set_key(key);
    otlp::to_proto(value, *kv->mutable_value());
  }
  resources_.emplace_back(attributes, entry);
  return entry;
}

pb::Profile* Encoder::profile_for(const ProfileSample& sample) {
  pb::ResourceProfiles* resource = resource_for(sample.resource);
  static const ProfileInfo none;
  const ProfileInfo& info = sample.profile ? *sample.profile : none;
  for (auto& [owner, known, profile] : profiles_)
    if (owner == resource && known == info) return profile;
  pb::ScopeProfiles* scope = nullptr;
  for (auto& sp : *resource->mutable_scope_profiles())
    if (sp.scope().name() == info.scope_name && sp.scope().version() == info.scope_version) scope = &sp;
  if (!scope) {
    scope = resource->add_scope_profiles();
    scope->mutable_scope()->set_name(info.scope_name);
    scope->mutable_scope()->set_version(info.scope_version);
  }
  pb::Profile* profile = scope->add_profiles();
  profile->mutable_sample_type()->set_type_strindex(dictionary_.string(info.sample_type));
  profile->mutable_sample_type()->set_unit_strindex(dictionary_.string(info.sample_unit));
  profile->mutable_period_type()->set_type_strindex(dictionary_.string(info.period_type));
  profile->mutable_period_type()->set_unit_strindex(dictionary_.string(info.period_unit));
  profile->set_period(info.period);
  profile->set_time_unix_nano(info.time_unix_nano);
  profile->set_duration_nano(info.duration_nano);
  profiles_.emplace_back(resource, info, profile);
  return profile;
}

}  // namespace

namespace detail {

void encode_into(const std::vector<ProfileSample>& samples, const EncodeOptions& options,
                 pb_collector::ExportProfilesServiceRequest& out) {
  Encoder encoder(options, out);
  for (const auto& sample : samples) encoder.add(sample);
  encoder.finish();
}

}  // namespace detail

std::string encode_profiles(const std::vector<ProfileSample>& samples, const EncodeOptions& options) {
  pb_collector::ExportProfilesServiceRequest request;
  detail::encode_into(samples, options, request);
  return request.SerializeAsString();
}

std::int64_t monotonic_to_unix_offset() { return wall_minus_monotonic().wall_minus_monotonic_ns; }

}  // namespace tracecorr::profiles

// ExportProfilesServiceRequest (binary protobuf) -> ProfileSample: fields
// counted on the wire, parsed by libprotobuf into an arena, then every sample
// unfolded with each dictionary reference checked as it is followed.
#include "tracecorr/profiles/decode.hpp"

#include <google/protobuf/arena.h>
#include <google/protobuf/io/coded_stream.h>

#include <cstring>
#include <unordered_map>

#include "opentelemetry/proto/collector/profiles/v1development/profiles_service.pb.h"
#include "problems.hpp"
#include "wire_count.hpp"

namespace tracecorr::profiles {
namespace {

namespace pb = opentelemetry::proto::profiles::v1development;
namespace pb_collector = opentelemetry::proto::collector::profiles::v1development;
using detail::field_path;
using detail::index_path;
using detail::Problems;
using otlp::RejectReason;

template <typename Table>
std::string table_size(const Table& table, std::string_view name) {
  return "outside the " + std::string(name) + " table (" + std::to_string(table.size()) + " entries)";
}

// Where in the export a reference is followed, made into text only when a
// problem is reported: a string per sample would cost more than the sample.
// "<base>[.<field>][<index>][.<leaf>][<element>]"
struct Where {
  const std::string& base;
  std::string_view field;
  long index = -1;
  std::string_view leaf;
  long element = -1;

  std::string str() const {
    std::string out = base;
    if (!field.empty()) out += (out.empty() ? "" : ".") + std::string(field);
    if (index >= 0) out += "[" + std::to_string(index) + "]";
    if (!leaf.empty()) out += "." + std::string(leaf);
    if (element >= 0) out += "[" + std::to_string(element) + "]";
    return out;
  }
};

// A sample's attributes, and the pid and tid read from them once per set.
struct AttributeSet {
  std::shared_ptr<const otlp::Attributes> attributes;
  std::optional<std::int64_t> pid, tid;
};

// One export's dictionary, each entry checked (and converted) the first time
// a sample names it. Index 0 is each table's zero value, whether or not the
// exporter sent it.
class Dictionary {
 public:
  Dictionary(const pb::ProfilesDictionary& d, const ProfilesLimits& limits, Problems& problems)
      : d_(d), limits_(limits), problems_(problems) {
    if (d.string_table_size() > 0 && !d.string_table(0).empty())
      problems.note("dictionary.stringTable[0]", "not \"\" (OTLP: the first entry MUST be the empty string)");
  }

  std::string text(std::int32_t index, const Where& where) {
    if (index == 0) return {};
    if (index < 0 || index >= d_.string_table_size()) {
      problems_.fatal(where.str(), std::to_string(index) + " is " + table_size(d_.string_table(), "string"));
      return {};
    }
    return detail::checked_text(problems_, limits_, index_path("dictionary", "stringTable", index),
                                d_.string_table(index));
  }

  std::optional<SampleLink> link(std::int32_t index, const Where& where);
  std::shared_ptr<const Stack> stack(std::int32_t index, const Where& where);
  // Keyed by the indices' own bytes in the parsed request (which outlives this).
  const AttributeSet& attributes(const google::protobuf::RepeatedField<std::int32_t>& indices, const Where& where);

 private:
  const otlp::KeyValue* attribute(std::int32_t index, const Where& where);

  const pb::ProfilesDictionary& d_;
  const ProfilesLimits& limits_;
  Problems& problems_;
  std::unordered_map<std::int32_t, std::optional<SampleLink>> links_;
  std::unordered_map<std::int32_t, std::shared_ptr<const Stack>> stacks_;
  std::unordered_map<std::int32_t, otlp::KeyValue> attribute_table_;
  std::unordered_map<std::string_view, AttributeSet> attribute_sets_;
};

std::optional<SampleLink> Dictionary::link(std::int32_t index, const Where& where) {
  if (index == 0) return std::nullopt;
  if (auto it = links_.find(index); it != links_.end()) return it->second;
  if (index < 0 || index >= d_.link_table_size()) {
    problems_.fatal(where.str(), std::to_string(index) + " is " + table_size(d_.link_table(), "link"));
    return std::nullopt;
  }
  const pb::Link& from = d_.link_table(index);
  const std::string at = index_path("dictionary", "linkTable", index);
  std::optional<SampleLink> link;
  if (from.trace_id().empty() && from.span_id().empty()) {
    problems_.note(at, "no trace id and no span id: read as no link (link_index 0 says that)");
  } else if (from.trace_id().size() != 16 || from.span_id().size() != 8) {
    problems_.fatal(at, "trace id of " + std::to_string(from.trace_id().size()) + " bytes and span id of " +
                            std::to_string(from.span_id().size()) + " (OTLP: 16 and 8)");
  } else {
    link.emplace();
    std::memcpy(link->trace_id.data(), from.trace_id().data(), 16);
    std::memcpy(link->span_id.data(), from.span_id().data(), 8);
  }
  links_.emplace(index, link);
  return link;
}

std::shared_ptr<const Stack> Dictionary::stack(std::int32_t index, const Where& where) {
  if (index == 0) return nullptr;
  if (auto it = stacks_.find(index); it != stacks_.end()) return it->second;
  if (index < 0 || index >= d_.stack_table_size()) {
    problems_.fatal(where.str(), std::to_string(index) + " is " + table_size(d_.stack_table(), "stack"));
    return nullptr;
  }
  const auto& locations = d_.stack_table(index).location_indices();
  const std::string at = index_path("dictionary", "stackTable", index);
  auto frames = std::make_shared<Stack>();
  const auto kept = std::min<std::size_t>(static_cast<std::size_t>(locations.size()), limits_.max_stack_frames);
  if (kept < static_cast<std::size_t>(locations.size()))
    problems_.note(at, std::to_string(locations.size()) + " frames; the first " + std::to_string(kept) + " are kept");
  frames->reserve(kept);
  for (std::size_t i = 0; i < kept && !problems_.failed(); ++i) {
    const std::int32_t location = locations[static_cast<int>(i)];
    if (location < 0 || location >= d_.location_table_size())
      problems_.fatal(index_path(at, "locationIndices", i),
                      std::to_string(location) + " is " + table_size(d_.location_table(), "location"));
    else
      frames->push_back(d_.location_table(location).address());
  }
  std::shared_ptr<const Stack> stack = std::move(frames);
  stacks_.emplace(index, stack);
  return stack;
}

const otlp::KeyValue* Dictionary::attribute(std::int32_t index, const Where& where) {
  if (auto it = attribute_table_.find(index); it != attribute_table_.end()) return &it->second;
  if (index <= 0 || index >= d_.attribute_table_size()) {
    problems_.fatal(where.str(), std::to_string(index) + " is " +
                                     (index == 0 ? "the attribute table's zero value, not an attribute"
                                                 : table_size(d_.attribute_table(), "attribute")));
    return nullptr;
  }
  const pb::KeyValueAndUnit& from = d_.attribute_table(index);
  const std::string at = index_path("dictionary", "attributeTable", index);
  const std::string key_at = field_path(at, "keyStrindex");
  otlp::KeyValue kv{text(from.key_strindex(), Where{key_at}), {}};
  if (kv.key.empty() && !problems_.failed()) problems_.note(at, "an attribute with an empty key");
  kv.value = detail::convert_value(problems_, limits_, field_path(at, "value"), from.value());
  if (problems_.failed()) return nullptr;
  return &attribute_table_.emplace(index, std::move(kv)).first->second;
}

const AttributeSet& Dictionary::attributes(const google::protobuf::RepeatedField<std::int32_t>& indices,
                                           const Where& where) {
  static const AttributeSet none;
  if (indices.empty()) return none;
  const std::string_view key(reinterpret_cast<const char*>(indices.data()), indices.size() * sizeof(std::int32_t));
  if (auto it = attribute_sets_.find(key); it != attribute_sets_.end()) return it->second;
  if (!detail::check_count(problems_, where.str(), static_cast<std::size_t>(indices.size()),
                           limits_.transport.max_attributes_per_span, "attributes"))
    return none;
  otlp::Attributes set;
  for (int i = 0; i < indices.size() && !problems_.failed(); ++i) {
    const Where element{where.base, where.field, where.index, where.leaf, i};
    if (const otlp::KeyValue* kv = attribute(indices[i], element))
      detail::insert_attribute(problems_, element.str(), set, kv->key, kv->value);
  }
  if (problems_.failed()) return none;
  AttributeSet entry{std::make_shared<const otlp::Attributes>(std::move(set)), {}, {}};
  const std::string at = where.str();
  entry.pid = detail::integer_attribute(problems_, at, *entry.attributes, kProcessPid);
  entry.tid = detail::integer_attribute(problems_, at, *entry.attributes, kThreadId);
  return attribute_sets_.emplace(key, std::move(entry)).first->second;
}

// Observations a Sample holds (timestamps unfolded), whatever its shape; the
// shape's checks are Unfolder::sample's.
std::size_t observations_of(const pb::Sample& sample) {
  return static_cast<std::size_t>(std::max(sample.timestamps_unix_nano_size(), sample.values_size()));
}

// Walks the export's resources, scopes, profiles and samples.
class Unfolder {
 public:
  Unfolder(const pb_collector::ExportProfilesServiceRequest& request, const ProfilesLimits& limits, DecodedProfiles& out)
      : request_(request), limits_(limits), out_(out), problems_(out), dictionary_(request.dictionary(), limits, problems_) {}

  void run() {
    std::size_t total = 0;
    for (const auto& rp : request_.resource_profiles())
      for (const auto& sp : rp.scope_profiles())
        for (const auto& profile : sp.profiles())
          for (const auto& sample : profile.samples()) total += observations_of(sample);
    if (!detail::check_count(problems_, "resourceProfiles", total, limits_.max_samples_per_export,
                             "samples (timestamps unfolded)"))
      return;
    out_.samples.reserve(total);
    for (int r = 0; r < request_.resource_profiles_size() && !problems_.failed(); ++r) {
      const auto& rp = request_.resource_profiles(r);
      const std::string at = index_path("", "resourceProfiles", r);
      resource_ = resource_attributes(rp.resource().attributes(), field_path(at, "resource.attributes"));
      resource_pid_ = resource_ ? detail::integer_attribute(problems_, field_path(at, "resource.attributes"), *resource_,
                                                            kProcessPid)
                                : std::nullopt;
      for (int s = 0; s < rp.scope_profiles_size() && !problems_.failed(); ++s) {
        const auto& sp = rp.scope_profiles(s);
        const std::string scope_at = index_path(at, "scopeProfiles", s);
        for (int p = 0; p < sp.profiles_size() && !problems_.failed(); ++p)
          profile(sp, sp.profiles(p), index_path(scope_at, "profiles", p));
      }
    }
    if (problems_.failed()) out_.samples.clear();  // a rejected export carries no samples
  }

 private:
  std::shared_ptr<const otlp::Attributes> resource_attributes(
      const google::protobuf::RepeatedPtrField<opentelemetry::proto::common::v1::KeyValue>& from,
      const std::string& where) {
    if (from.empty()) return nullptr;
    if (!detail::check_count(problems_, where, static_cast<std::size_t>(from.size()),
                             limits_.transport.max_attributes_per_span, "attributes"))
      return nullptr;
    otlp::Attributes attributes;
    for (int i = 0; i < from.size() && !problems_.failed(); ++i) {
      const std::string at = where + "[\"" + from[i].key().substr(0, 64) + "\"]";
      std::string key = detail::checked_text(problems_, limits_, at, from[i].key());
      detail::insert_attribute(problems_, at, attributes, std::move(key),
                               detail::convert_value(problems_, limits_, at, from[i].value()));
    }
    return std::make_shared<const otlp::Attributes>(std::move(attributes));
  }

  void profile(const pb::ScopeProfiles& sp, const pb::Profile& from, const std::string& at) {
    ++out_.profiles;
    auto info = std::make_shared<ProfileInfo>();
    info->sample_type = dictionary_.text(from.sample_type().type_strindex(), Where{at, "sampleType.typeStrindex"});
    info->sample_unit = dictionary_.text(from.sample_type().unit_strindex(), Where{at, "sampleType.unitStrindex"});
    info->period_type = dictionary_.text(from.period_type().type_strindex(), Where{at, "periodType.typeStrindex"});
    info->period_unit = dictionary_.text(from.period_type().unit_strindex(), Where{at, "periodType.unitStrindex"});
    info->period = from.period();
    info->time_unix_nano = from.time_unix_nano();
    info->duration_nano = from.duration_nano();
    info->scope_name = detail::checked_text(problems_, limits_, "scope.name", sp.scope().name());
    info->scope_version = detail::checked_text(problems_, limits_, "scope.version", sp.scope().version());
    profile_ = std::move(info);
    for (int i = 0; i < from.samples_size() && !problems_.failed(); ++i) sample(from.samples(i), at, i);
  }

  void sample(const pb::Sample& from, const std::string& profile_at, int index);

  const pb_collector::ExportProfilesServiceRequest& request_;
  const ProfilesLimits& limits_;
  DecodedProfiles& out_;
  Problems problems_;
  Dictionary dictionary_;
  std::shared_ptr<const otlp::Attributes> resource_;
  std::optional<std::int64_t> resource_pid_;
  std::shared_ptr<const ProfileInfo> profile_;
};

void Unfolder::sample(const pb::Sample& from, const std::string& profile_at, int index) {
  const Where at{profile_at, "samples", index};
  const auto timestamps = static_cast<std::size_t>(from.timestamps_unix_nano_size());
  const auto values = static_cast<std::size_t>(from.values_size());
  if (timestamps == 0 && values == 0) {
    problems_.note(at.str(), "neither values nor timestamps (OTLP: a Sample MUST have one): no observation");
    return;
  }
  // Older exporters sent `values: [1]` beside every timestamp of an
  // aggregated sample: each timestamp is one observation of value 1.
  const bool legacy_single_value = values == 1 && timestamps > 1;
  if (timestamps != 0 && values != 0 && timestamps != values && !legacy_single_value) {
    problems_.fatal(at.str(), std::to_string(values) + " values for " + std::to_string(timestamps) +
                                  " timestamps (OTLP: the same number of each, or one of them empty)");
    return;
  }
  if (legacy_single_value)
    problems_.note(at.str(), "one value for " + std::to_string(timestamps) +
                                 " timestamps (an older exporter's shape): each timestamp read as one observation");

  ProfileSample base;
  base.stack = dictionary_.stack(from.stack_index(), Where{profile_at, "samples", index, "stackIndex"});
  base.link = dictionary_.link(from.link_index(), Where{profile_at, "samples", index, "linkIndex"});
  const AttributeSet& set =
      dictionary_.attributes(from.attribute_indices(), Where{profile_at, "samples", index, "attributeIndices"});
  if (problems_.failed()) return;
  base.attributes = set.attributes;
  base.pid = set.pid ? set.pid : resource_pid_;
  base.tid = set.tid;
  base.resource = resource_;
  base.profile = profile_;
  const std::size_t observations = std::max(timestamps, values);
  for (std::size_t i = 0; i < observations; ++i) {
    ProfileSample& sample = out_.samples.emplace_back(base);
    if (timestamps) sample.time = SampleTime{from.timestamps_unix_nano(static_cast<int>(i)), Clock::Unix};
    sample.value = values && !legacy_single_value ? from.values(static_cast<int>(i)) : 1;
  }
}

}  // namespace

DecodedProfiles decode_profiles(std::string_view body, const ProfilesLimits& limits) {
  DecodedProfiles out;
  Problems problems(out);
  // Request > ResourceProfiles > ScopeProfiles > Profile > Sample, the
  // dictionary's tables, then up to three messages per level of value nesting.
  const std::size_t max_depth = 8 + 3 * limits.transport.max_nesting_depth;
  if (body.size() > INT32_MAX) {
    problems.fatal("", "body of " + std::to_string(body.size()) + " bytes is over protobuf's 2 GiB",
                   RejectReason::LimitExceeded);
    return out;
  }
  if (!detail::fields_within(body, limits.max_fields_per_export, max_depth)) {
    problems.fatal("", "more than " + std::to_string(limits.max_fields_per_export) +
                           " protobuf fields (packed elements included) in one export, counted before decoding",
                   RejectReason::LimitExceeded);
    return out;
  }
  google::protobuf::Arena arena;
  auto* request = google::protobuf::Arena::CreateMessage<pb_collector::ExportProfilesServiceRequest>(&arena);
  google::protobuf::io::CodedInputStream input(reinterpret_cast<const std::uint8_t*>(body.data()),
                                               static_cast<int>(body.size()));
  input.SetRecursionLimit(static_cast<int>(max_depth));
  if (!request->ParseFromCodedStream(&input) || !input.ConsumedEntireMessage()) {
    problems.fatal("", "body is not a valid binary protobuf ExportProfilesServiceRequest (" +
                           std::to_string(body.size()) +
                           " bytes; wrong wire type, truncated field, or nesting deeper than " +
                           std::to_string(limits.transport.max_nesting_depth) + ")");
    return out;
  }
  Unfolder(*request, limits, out).run();
  return out;
}

}  // namespace tracecorr::profiles

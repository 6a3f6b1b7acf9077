#include "agent_otlp.hpp"

#include <algorithm>
#include <cstdlib>
#include <initializer_list>
#include <tuple>
#include <utility>

#include "tracecorr/text.hpp"
#if defined(TRACECORR_HAVE_PROFILES)
#include "tracecorr/profiles/exporter.hpp"
#include "tracecorr/profiles/http_route.hpp"
#endif

namespace tracecorr::cli {

namespace {

constexpr char kProfilesEndpointVariable[] = "OTEL_EXPORTER_OTLP_PROFILES_ENDPOINT";
constexpr char kEndpointVariable[] = "OTEL_EXPORTER_OTLP_ENDPOINT";
constexpr char kProfilesProtocolVariable[] = "OTEL_EXPORTER_OTLP_PROFILES_PROTOCOL";
constexpr char kProtocolVariable[] = "OTEL_EXPORTER_OTLP_PROTOCOL";
constexpr char kProfilesPathSuffix[] = "/v1development/profiles";

// The first of `names` the environment sets (to something not empty), with its name.
std::optional<std::pair<std::string, std::string>> first_set(const Environment& env,
                                                             std::initializer_list<const char*> names) {
  for (const char* name : names)
    if (auto value = env(name); value && !value->empty()) return std::pair{*value, std::string(name)};
  return std::nullopt;
}

// A signal's own endpoint is the whole URL (the OTLP exporter specification):
// for HTTP it ends in the profiles path, which the exporter adds itself.
Expected<std::string> without_profiles_path(std::string url, const std::string& from) {
  while (url.size() > 1 && url.back() == '/') url.pop_back();
  const std::string suffix = kProfilesPathSuffix;
  if (url.size() > suffix.size() && url.compare(url.size() - suffix.size(), suffix.size(), suffix) == 0)
    return url.substr(0, url.size() - suffix.size());
  const auto scheme = url.find("://");
  if (url.find('/', scheme == std::string::npos ? 0 : scheme + 3) != std::string::npos)
    return make_error(from + " names a path other than " + suffix + ", the only one tracecorr posts profiles to",
                      printable_text(url.substr(0, 200)));
  return url;
}

}  // namespace

Environment process_environment() {
  return [](const std::string& name) -> std::optional<std::string> {
    const char* value = std::getenv(name.c_str());
    return value ? std::optional<std::string>(value) : std::nullopt;
  };
}

Expected<std::optional<OtlpExportTarget>> otlp_export_target(const OtlpExportArgs& args, const Environment& env) {
  OtlpExportTarget target;
  if (!args.endpoint.empty()) {
    target.endpoint = args.endpoint;
    target.endpoint_from = "--otlp-endpoint";
  } else if (auto set = first_set(env, {kProfilesEndpointVariable, kEndpointVariable})) {
    std::tie(target.endpoint, target.endpoint_from) = *set;
  } else {
    return std::optional<OtlpExportTarget>();
  }
  if (!args.protocol.empty()) {
    target.protocol = args.protocol;
    target.protocol_from = "--otlp-protocol";
  } else if (auto set = first_set(env, {kProfilesProtocolVariable, kProtocolVariable})) {
    std::tie(target.protocol, target.protocol_from) = *set;
  } else {
    target.protocol = "grpc";
    target.protocol_from = "default";
  }
  if (target.protocol != "grpc" && target.protocol != "http/protobuf")
    return make_error("OTLP protocol \"" + printable_text(target.protocol.substr(0, 100)) + "\" (" +
                      target.protocol_from + ") is not spoken: grpc or http/protobuf");
  if (target.endpoint_from == kProfilesEndpointVariable && target.protocol == "http/protobuf") {
    auto base = without_profiles_path(target.endpoint, target.endpoint_from);
    if (!base) return base.error();
    target.endpoint = *base;
  }
  return std::optional<OtlpExportTarget>(std::move(target));
}

#if defined(TRACECORR_HAVE_PROFILES)

struct AgentExport::Impl {
  OtlpExportTarget target;
  std::unique_ptr<profiles::ProfilesExporter> exporter;
};

Expected<std::unique_ptr<AgentExport>> AgentExport::start(const OtlpExportTarget& target) {
  profiles::ExporterOptions options;
  options.endpoint = target.endpoint;
  options.protocol =
      target.protocol == "grpc" ? profiles::ExportProtocol::Grpc : profiles::ExportProtocol::HttpProtobuf;
  if (target.wall_clock) options.profile.period_type = "wall";
  options.profile.period = static_cast<std::int64_t>(1'000'000'000 / std::max(1u, target.frequency_hz));
  auto exporter = profiles::ProfilesExporter::start(std::move(options));
  if (!exporter) return exporter.error();
  auto impl = std::make_unique<Impl>();
  impl->target = target;
  impl->exporter = std::move(*exporter);
  return std::unique_ptr<AgentExport>(new AgentExport(std::move(impl)));
}

void AgentExport::offer(const AgentObservation& o) {
  profiles::ProfileSample s;
  s.time = profiles::SampleTime{o.sample.time_ns, profiles::Clock::Monotonic};
  s.pid = o.sample.pid;
  s.tid = o.sample.tid;
  if (o.context.link) s.link = profiles::SampleLink{o.context.link->trace_id, o.context.link->span_id};
  s.trace_flags = o.context.trace_flags;
  s.attributes = o.context.attributes;
  s.resource = o.resource;
  // Only the frames the sampler took: none are invented.
  if (!o.sample.frames.empty()) s.stack = std::make_shared<const profiles::Stack>(o.sample.frames);
  (void)impl_->exporter->offer(std::move(s));  // a full queue drops and counts
}

void AgentExport::flush() { impl_->exporter->flush(); }

nlohmann::json AgentExport::summary() const {
  const auto c = impl_->exporter->counters();
  return {{"endpoint", impl_->target.endpoint},       {"endpoint_from", impl_->target.endpoint_from},
          {"protocol", impl_->target.protocol},       {"protocol_from", impl_->target.protocol_from},
          {"offered", c.offered},                     {"dropped", c.dropped},
          {"exports", c.exports},                     {"exports_failed", c.exports_failed},
          {"samples_exported", c.samples_exported},   {"samples_failed", c.samples_failed},
          {"last_error", c.last_error.empty() ? nlohmann::json(nullptr) : nlohmann::json(c.last_error)}};
}

#else

struct AgentExport::Impl {};

Expected<std::unique_ptr<AgentExport>> AgentExport::start(const OtlpExportTarget&) {
  return make_error("this tracecorr was built without the OTLP profiles exporter (it needs libgrpc++-dev, "
                    "protobuf-compiler-grpc and libcpp-httplib-dev)");
}
void AgentExport::offer(const AgentObservation&) {}
void AgentExport::flush() {}
nlohmann::json AgentExport::summary() const { return nullptr; }

#endif

AgentExport::AgentExport(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
AgentExport::~AgentExport() = default;

std::string AgentExport::final_line() const {
  const nlohmann::json s = summary();
  if (s.is_null()) return "";
  std::string line = "OTLP profiles to " + s["endpoint"].get<std::string>() + " (" +
                     s["protocol"].get<std::string>() + "): " + std::to_string(s["offered"].get<std::uint64_t>()) +
                     " samples offered, " + std::to_string(s["samples_exported"].get<std::uint64_t>()) +
                     " exported, " + std::to_string(s["dropped"].get<std::uint64_t>()) + " dropped (queue full), " +
                     std::to_string(s["samples_failed"].get<std::uint64_t>()) + " in " +
                     std::to_string(s["exports_failed"].get<std::uint64_t>()) + " failed exports of " +
                     std::to_string(s["exports"].get<std::uint64_t>());
  if (s["last_error"].is_string()) line += "; last error: " + s["last_error"].get<std::string>();
  return line;
}

}  // namespace tracecorr::cli

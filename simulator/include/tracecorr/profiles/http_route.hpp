// OTLP profiles over HTTP/protobuf: POST /v1development/profiles, the path
// the OpenTelemetry Collector's OTLP receiver serves and its otlphttp exporter
// posts to. A route of the OTLP/HTTP receiver (otlp.hpp: ExportRoute), so it
// is served on the traces' port within every bound of that receiver (request
// line, headers, connections, request time, body, bytes in flight, gzip),
// and whatever admission that receiver applies to a connection applies here.
//
//   auto store = std::make_shared<profiles::SampleStore>(limits);
//   otlp::ReceiverOptions options;
//   options.routes.push_back(profiles::http_route(store, limits));
//   auto receiver = otlp::OtlpReceiver::start(options);
//   // OTEL_EXPORTER_OTLP_PROFILES_ENDPOINT = receiver->endpoint() + kProfilesPath
#pragma once

#include <memory>

#include "tracecorr/otlp.hpp"
#include "tracecorr/profiles/decode.hpp"
#include "tracecorr/profiles/store.hpp"

namespace tracecorr::profiles {

inline constexpr char kProfilesPath[] = "/v1development/profiles";

// Binary protobuf only: an OTLP/JSON profile is answered 415 (counted
// Unsupported). Every request, answered or turned away, is recorded in `store`.
std::shared_ptr<otlp::ExportRoute> http_route(std::shared_ptr<SampleStore> store, const ProfilesLimits& limits = {});

}  // namespace tracecorr::profiles

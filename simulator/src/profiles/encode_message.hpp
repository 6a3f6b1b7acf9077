// encode_profiles into the generated message (the gRPC exporter sends it as is).
#pragma once

#include "opentelemetry/proto/collector/profiles/v1development/profiles_service.pb.h"
#include "tracecorr/profiles/encode.hpp"

namespace tracecorr::profiles::detail {

void encode_into(const std::vector<ProfileSample>& samples, const EncodeOptions& options,
                 opentelemetry::proto::collector::profiles::v1development::ExportProfilesServiceRequest& out);

}  // namespace tracecorr::profiles::detail

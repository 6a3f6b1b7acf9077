// The OTLP/gRPC profiles receiver of a build without gRPC (a cross build whose
// sysroot has no libgrpc++): it never starts, and says why, so a profiler told
// to export over gRPC is refused before anything is launched; OTLP/HTTP and
// JSON lines take exports in as in every build.
#include "tracecorr/profiles/grpc_receiver.hpp"

namespace tracecorr::profiles {

struct GrpcProfilesReceiver::Impl {};

Expected<std::unique_ptr<GrpcProfilesReceiver>> GrpcProfilesReceiver::start(std::shared_ptr<SampleStore>,
                                                                            GrpcReceiverOptions) {
  return make_error(ErrorKind::kUnsupported,
                    "this tracecorr was built without gRPC (libgrpc++-dev): take profiles in over http/protobuf",
                    "OTLP/gRPC profiles receiver");
}

bool GrpcProfilesReceiver::built() { return false; }

GrpcProfilesReceiver::GrpcProfilesReceiver(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
GrpcProfilesReceiver::~GrpcProfilesReceiver() = default;
std::uint16_t GrpcProfilesReceiver::port() const { return 0; }
std::string GrpcProfilesReceiver::endpoint() const { return {}; }
GrpcConnectionCounters GrpcProfilesReceiver::connections() const { return {}; }

}  // namespace tracecorr::profiles

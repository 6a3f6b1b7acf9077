#include "tracecorr/profiles/http_route.hpp"

namespace tracecorr::profiles {
namespace {

class ProfilesRoute : public otlp::ExportRoute {
 public:
  ProfilesRoute(std::shared_ptr<SampleStore> store, const ProfilesLimits& limits)
      : store_(std::move(store)), limits_(limits) {}

  std::string path() const override { return kProfilesPath; }

  void handle(otlp::ReceivedRequest& request, const std::string_view* body) override {
    ExportRecord record;
    record.source = Source::OtlpHttp;
    record.received_at = request.received_at;
    record.received_at_system = request.received_at_system;
    record.bytes = request.decoded_bytes;
    DecodedProfiles decoded;
    if (body && request.encoding != otlp::Encoding::Protobuf) {
      refuse(request, otlp::RejectReason::UnsupportedContentType, 415,
             "OTLP/JSON profiles are not read: send application/x-protobuf");
    } else if (body) {
      decoded = decode_profiles(*body, limits_);
      if (!decoded.ok()) {
        std::string message = decoded.first_fatal->message();
        if (const std::size_t more = decoded.problems.size() + decoded.problems_not_kept - 1; more > 0)
          message += " (and " + std::to_string(more) + " more problems)";
        refuse(request, decoded.first_fatal->reason, 400, std::move(message));
      } else {
        request.http_status = 200;
      }
      request.problems = decoded.problems;
    }
    record.outcome = request.rejected ? outcome_of(*request.rejected) : Outcome::Accepted;
    record.message = request.response_message;
    record.problems = std::move(decoded.problems);
    record.profiles = decoded.profiles;
    record.samples = decoded.samples.size();
    store_->record(std::move(record), std::move(decoded.samples));
  }

 private:
  static void refuse(otlp::ReceivedRequest& request, otlp::RejectReason reason, int status, std::string message) {
    request.rejected = reason;
    request.http_status = status;
    request.response_message = std::move(message);
  }

  std::shared_ptr<SampleStore> store_;
  ProfilesLimits limits_;
};

}  // namespace

std::shared_ptr<otlp::ExportRoute> http_route(std::shared_ptr<SampleStore> store, const ProfilesLimits& limits) {
  return std::make_shared<ProfilesRoute>(std::move(store), limits);
}

}  // namespace tracecorr::profiles

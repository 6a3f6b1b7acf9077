// The OTLP profiles exporter: a bounded queue, a thread that batches, and a
// transport (gRPC with the generated stub, HTTP/protobuf with cpp-httplib).
// Without gRPC (TRACECORR_PROFILES_GRPC undefined: a cross build whose
// sysroot has none), HTTP/protobuf only.
#include "tracecorr/profiles/exporter.hpp"

#ifdef TRACECORR_PROFILES_GRPC
#include <grpcpp/grpcpp.h>
#endif
#include <httplib.h>

#include <algorithm>
#include <charconv>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "encode_message.hpp"
#include "google/rpc/status.pb.h"
#include "opentelemetry/proto/collector/profiles/v1development/profiles_service.pb.h"
#ifdef TRACECORR_PROFILES_GRPC
#include "opentelemetry/proto/collector/profiles/v1development/profiles_service.grpc.pb.h"
#endif
#include "tracecorr/profiles/http_route.hpp"

namespace tracecorr::profiles {
namespace {

namespace pb_collector = opentelemetry::proto::collector::profiles::v1development;

struct Endpoint {
  std::string host;  // without brackets
  std::uint16_t port = 0;
};

Expected<Endpoint> parse_endpoint(std::string_view url) {
  const std::string where = "OTLP profiles endpoint \"" + std::string(url.substr(0, 200)) + "\"";
  if (url.rfind("https://", 0) == 0) return make_error(ErrorKind::kUnsupported, "https is not spoken: use http://", where);
  if (url.rfind("http://", 0) == 0) url.remove_prefix(7);
  if (!url.empty() && url.back() == '/') url.remove_suffix(1);
  if (url.find('/') != std::string_view::npos)
    return make_error(ErrorKind::kMalformed, "expected http://host:port with no path", where);
  const std::size_t colon = url.rfind(':');
  if (colon == std::string_view::npos || colon == 0) return make_error(ErrorKind::kMalformed, "no port", where);
  Endpoint endpoint;
  std::string_view host = url.substr(0, colon), port = url.substr(colon + 1);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  unsigned value = 0;
  auto [end, error] = std::from_chars(port.data(), port.data() + port.size(), value);
  if (error != std::errc() || end != port.data() + port.size() || value == 0 || value > 65535)
    return make_error(ErrorKind::kMalformed, "port is not a number from 1 to 65535", where);
  endpoint.host = std::string(host);
  endpoint.port = static_cast<std::uint16_t>(value);
  return endpoint;
}

class Transport {
 public:
  virtual ~Transport() = default;
  virtual Status send(const pb_collector::ExportProfilesServiceRequest& request) = 0;
};

#ifdef TRACECORR_PROFILES_GRPC
class GrpcTransport : public Transport {
 public:
  GrpcTransport(const Endpoint& endpoint, const ExporterOptions& options) : options_(options) {
    const std::string host = endpoint.host.find(':') != std::string::npos ? "[" + endpoint.host + "]" : endpoint.host;
    grpc::ChannelArguments args;
    args.SetMaxSendMessageSize(-1);
    stub_ = pb_collector::ProfilesService::NewStub(
        grpc::CreateCustomChannel(host + ":" + std::to_string(endpoint.port), grpc::InsecureChannelCredentials(), args));
  }

  Status send(const pb_collector::ExportProfilesServiceRequest& request) override {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + options_.timeout);
    for (const auto& [key, value] : options_.headers) context.AddMetadata(lowercase(key), value);
    pb_collector::ExportProfilesServiceResponse response;
    const grpc::Status status = stub_->Export(&context, request, &response);
    if (!status.ok())
      return make_error("gRPC status " + std::to_string(status.error_code()) + ": " + status.error_message().substr(0, 300),
                        "ProfilesService/Export");
    return Ok{};
  }

 private:
  static std::string lowercase(std::string text) {
    std::transform(text.begin(), text.end(), text.begin(), [](unsigned char c) { return std::tolower(c); });
    return text;  // gRPC metadata keys are lower case
  }
  const ExporterOptions& options_;
  std::unique_ptr<pb_collector::ProfilesService::Stub> stub_;
};
#endif

class HttpTransport : public Transport {
 public:
  HttpTransport(const Endpoint& endpoint, const ExporterOptions& options) : client_(endpoint.host, endpoint.port) {
    client_.set_connection_timeout(options.timeout);
    client_.set_read_timeout(options.timeout);
    client_.set_write_timeout(options.timeout);
    client_.set_keep_alive(true);
    for (const auto& [key, value] : options.headers) headers_.emplace(key, value);
  }

  Status send(const pb_collector::ExportProfilesServiceRequest& request) override {
    auto result = client_.Post(kProfilesPath, headers_, request.SerializeAsString(), "application/x-protobuf");
    if (!result) return make_error("HTTP: " + httplib::to_string(result.error()), kProfilesPath);
    if (result->status == 200) return Ok{};
    google::rpc::Status status;  // OTLP/HTTP answers a failure with a google.rpc.Status
    std::string message = status.ParseFromString(result->body) ? std::string(status.message()) : result->body;
    return make_error("HTTP status " + std::to_string(result->status) + ": " + message.substr(0, 300), kProfilesPath);
  }

 private:
  httplib::Client client_;
  httplib::Headers headers_;
};

}  // namespace

struct ProfilesExporter::Impl {
  ExporterOptions options;
  std::unique_ptr<Transport> transport;
  std::int64_t monotonic_to_unix = monotonic_to_unix_offset();
  mutable std::mutex mutex;
  std::condition_variable wake;      // the exporting thread: a batch is full, a flush asked, stopping
  std::condition_variable flushed;   // flush(): the export it asked for is done
  std::vector<ProfileSample> queue;
  std::uint64_t flush_asked = 0, flush_done = 0;
  bool stopping = false;
  ExporterCounters counters;
  std::thread thread;

  void run();
  std::vector<ProfileSample> take(bool everything);  // the caller holds mutex
  void export_batch(std::vector<ProfileSample> batch);
};

void ProfilesExporter::Impl::run() {
  std::unique_lock lock(mutex);
  for (;;) {
    const bool woken = wake.wait_for(lock, options.interval, [&] {
      return stopping || flush_asked != flush_done || queue.size() >= options.max_batch_samples;
    });
    const std::uint64_t asked = flush_asked;
    const bool last = stopping;
    // Woken by full batches alone, only the full batches go: what was offered
    // while this thread woke up waits for its own batch to fill, so a loaded
    // machine sends no extra part-batches.
    const bool everything = !woken || last || asked != flush_done;
    std::vector<ProfileSample> taken = take(everything);
    lock.unlock();
    for (std::size_t start = 0; start < taken.size(); start += options.max_batch_samples) {
      const std::size_t end = std::min(taken.size(), start + options.max_batch_samples);
      export_batch(std::vector<ProfileSample>(std::make_move_iterator(taken.begin() + static_cast<std::ptrdiff_t>(start)),
                                              std::make_move_iterator(taken.begin() + static_cast<std::ptrdiff_t>(end))));
    }
    lock.lock();
    flush_done = asked;
    flushed.notify_all();
    if (last) return;
  }
}

std::vector<ProfileSample> ProfilesExporter::Impl::take(bool everything) {
  std::vector<ProfileSample> taken;
  const std::size_t count =
      everything ? queue.size() : queue.size() / options.max_batch_samples * options.max_batch_samples;
  if (count == queue.size()) {
    taken.swap(queue);
    return taken;
  }
  taken.assign(std::make_move_iterator(queue.begin()), std::make_move_iterator(queue.begin() + static_cast<std::ptrdiff_t>(count)));
  queue.erase(queue.begin(), queue.begin() + static_cast<std::ptrdiff_t>(count));
  return taken;
}

void ProfilesExporter::Impl::export_batch(std::vector<ProfileSample> batch) {
  // Samples that came without a profile get the options' with this batch's time range.
  std::uint64_t first = UINT64_MAX, last = 0;
  for (const auto& sample : batch) {
    if (!sample.time) continue;
    const std::uint64_t t = sample.time->clock == Clock::Unix ? sample.time->nanos
                                                              : sample.time->nanos + static_cast<std::uint64_t>(monotonic_to_unix);
    first = std::min(first, t);
    last = std::max(last, t);
  }
  auto info = std::make_shared<ProfileInfo>(options.profile);
  if (first <= last) {
    info->time_unix_nano = first;
    info->duration_nano = last - first + 1;
  }
  for (auto& sample : batch)
    if (!sample.profile) sample.profile = info;
  pb_collector::ExportProfilesServiceRequest request;
  detail::encode_into(batch, EncodeOptions{monotonic_to_unix}, request);
  const Status sent = transport->send(request);
  std::lock_guard lock(mutex);
  ++counters.exports;
  if (sent) {
    counters.samples_exported += batch.size();
  } else {
    ++counters.exports_failed;
    counters.samples_failed += batch.size();
    counters.last_error = sent.error().message();
  }
}

std::shared_ptr<const otlp::Attributes> process_resource(std::int64_t pid, const otlp::Attributes& context_resource) {
  otlp::Attributes resource = context_resource;
  resource.insert_or_assign(kProcessPid, otlp::AttributeValue(pid));  // what the sampler saw, not what the process says
  return std::make_shared<const otlp::Attributes>(std::move(resource));
}

ProfilesExporter::ProfilesExporter(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

ProfilesExporter::~ProfilesExporter() {
  {
    std::lock_guard lock(impl_->mutex);
    impl_->stopping = true;
  }
  impl_->wake.notify_all();
  if (impl_->thread.joinable()) impl_->thread.join();
}

Expected<std::unique_ptr<ProfilesExporter>> ProfilesExporter::start(ExporterOptions options) {
  auto endpoint = parse_endpoint(options.endpoint);
  if (!endpoint) return endpoint.error();
  auto impl = std::make_unique<Impl>();
  impl->options = std::move(options);
  impl->options.max_batch_samples = std::max<std::size_t>(1, impl->options.max_batch_samples);
  if (impl->options.protocol == ExportProtocol::Grpc) {
#ifdef TRACECORR_PROFILES_GRPC
    impl->transport = std::make_unique<GrpcTransport>(*endpoint, impl->options);
#else
    return make_error(ErrorKind::kUnsupported, "this tracecorr was built without gRPC (libgrpc++-dev): export over "
                      "http/protobuf", "OTLP profiles exporter");
#endif
  } else {
    impl->transport = std::make_unique<HttpTransport>(*endpoint, impl->options);
  }
  Impl* raw = impl.get();
  impl->thread = std::thread([raw] { raw->run(); });
  return std::unique_ptr<ProfilesExporter>(new ProfilesExporter(std::move(impl)));
}

bool ProfilesExporter::offer(ProfileSample sample) {
  bool full_batch = false;
  {
    std::lock_guard lock(impl_->mutex);
    ++impl_->counters.offered;
    if (impl_->queue.size() >= impl_->options.queue_capacity) {
      ++impl_->counters.dropped;
      return false;
    }
    impl_->queue.push_back(std::move(sample));
    full_batch = impl_->queue.size() == impl_->options.max_batch_samples;
  }
  if (full_batch) impl_->wake.notify_one();
  return true;
}

void ProfilesExporter::flush() {
  std::unique_lock lock(impl_->mutex);
  const std::uint64_t asked = ++impl_->flush_asked;
  impl_->wake.notify_one();
  impl_->flushed.wait(lock, [&] { return impl_->flush_done >= asked || impl_->stopping; });
}

ExporterCounters ProfilesExporter::counters() const {
  std::lock_guard lock(impl_->mutex);
  return impl_->counters;
}

}  // namespace tracecorr::profiles

// The OTLP profiles intake (tracecorr/profiles/): a receiver over gRPC
// (ProfilesService/Export) or HTTP/protobuf (POST /v1development/profiles)
// that keeps what it took in a SampleStore, and its samples as Python objects.
#include <pybind11/chrono.h>
#include <pybind11/functional.h>
#include <pybind11/stl.h>

#include "common.hpp"
#if defined(TRACECORR_HAVE_PROFILES)
#include "tracecorr/profiles/grpc_receiver.hpp"
#include "tracecorr/profiles/http_route.hpp"
#include "tracecorr/profiles/store.hpp"
#endif

namespace tracecorr::python {

#if defined(TRACECORR_HAVE_PROFILES)

namespace {

using profiles::ProfileSample;

// One receiver of either transport and the store it records into.
struct PyProfilesReceiver {
  std::shared_ptr<profiles::SampleStore> store;
  std::unique_ptr<profiles::GrpcProfilesReceiver> grpc;
  std::unique_ptr<otlp::OtlpReceiver> http;
  std::string protocol;
  profiles::SampleStore& get() {
    if (!grpc && !http) throw py::value_error("the receiver is closed");
    return *store;
  }
  std::string endpoint() {
    get();
    return grpc ? grpc->endpoint() : http->endpoint();
  }
  std::uint16_t port() {
    get();
    return grpc ? grpc->port() : http->port();
  }
};

std::unique_ptr<PyProfilesReceiver> start_receiver(const std::string& protocol, const std::string& host,
                                                   std::uint16_t port) {
  auto out = std::make_unique<PyProfilesReceiver>();
  out->store = std::make_shared<profiles::SampleStore>();
  out->protocol = protocol;
  if (protocol == "grpc") {
    profiles::GrpcReceiverOptions o;
    o.host = host;
    o.port = port;
    out->grpc = unwrap(profiles::GrpcProfilesReceiver::start(out->store, o));
  } else if (protocol == "http/protobuf") {
    otlp::ReceiverOptions o;
    o.host = host;
    o.port = port;
    o.routes.push_back(profiles::http_route(out->store));
    out->http = unwrap(otlp::OtlpReceiver::start(o));
  } else {
    throw py::value_error("protocol must be 'grpc' or 'http/protobuf', got '" + protocol + "'");
  }
  return out;
}

py::dict counters_to_py(const profiles::IntakeCounters& c) {
  py::dict d;
  d["exports"] = c.exports;
  for (std::size_t i = 0; i < profiles::kOutcomeCount; ++i)
    d[py::str(std::string(profiles::to_string(static_cast<profiles::Outcome>(i))))] = c.outcomes[i];
  d["samples"] = c.samples;
  d["samples_not_kept"] = c.samples_not_kept;
  return d;
}

py::dict export_to_py(const profiles::ExportRecord& r) {
  py::dict d;
  d["index"] = r.index;
  d["source"] = std::string(profiles::to_string(r.source));
  d["peer"] = r.peer;
  d["bytes"] = r.bytes;
  d["profiles"] = r.profiles;
  d["samples"] = r.samples;
  d["outcome"] = std::string(profiles::to_string(r.outcome));
  d["message"] = r.message;
  return d;
}

void bind_sample(py::module_& m) {
  py::class_<ProfileSample>(m, "ProfileSample", "One observation of a profiler's output: a thread seen at one time.")
      .def_property_readonly(
          "time_unix_nano", [](const ProfileSample& s) -> std::optional<std::uint64_t> {
            if (!s.time) return std::nullopt;
            return s.time->nanos;
          },
          "The sample's time (None: an aggregated value without a timestamp); see `clock`")
      .def_property_readonly(
          "clock", [](const ProfileSample& s) -> std::optional<std::string> {
            if (!s.time) return std::nullopt;
            return std::string(profiles::to_string(s.time->clock));
          },
          "'unix' (OTLP) or 'monotonic' (a JSON line that said so)")
      .def_readonly("value", &ProfileSample::value)
      .def_readonly("pid", &ProfileSample::pid, "process.pid: the sample's attribute, else its resource's")
      .def_readonly("tid", &ProfileSample::tid, "thread.id")
      .def_property_readonly("trace_id", [](const ProfileSample& s) -> py::object {
        return s.link ? py::object(to_bytes(s.link->trace_id)) : py::none();
      }, "The link's trace id (16 bytes), None without a link")
      .def_property_readonly("span_id", [](const ProfileSample& s) -> py::object {
        return s.link ? py::object(to_bytes(s.link->span_id)) : py::none();
      }, "The link's span id (8 bytes), None without a link")
      .def_readonly("trace_flags", &ProfileSample::trace_flags, "JSON lines only: OTLP's Link carries none")
      .def_property_readonly("attributes", [](const ProfileSample& s) {
        return s.attributes ? attributes_to_py(*s.attributes) : py::dict();
      }, "dict name -> Python value, thread.id and process.pid included")
      .def_property_readonly("resource", [](const ProfileSample& s) {
        return s.resource ? attributes_to_py(*s.resource) : py::dict();
      })
      .def_property_readonly("stack", [](const ProfileSample& s) {
        return s.stack ? *s.stack : profiles::Stack{};
      }, "Instruction addresses, leaf first (empty: none sent)")
      .def_property_readonly("profile", [](const ProfileSample& s) -> py::object {
        if (!s.profile) return py::none();
        const auto& p = *s.profile;
        py::dict d;
        d["sample_type"] = p.sample_type;
        d["sample_unit"] = p.sample_unit;
        d["period_type"] = p.period_type;
        d["period_unit"] = p.period_unit;
        d["period"] = p.period;
        d["scope_name"] = p.scope_name;
        d["scope_version"] = p.scope_version;
        return d;
      }, "What its profile says of its samples (types, period, scope) as a dict; None for JSON lines")
      .def_property_readonly("source", [](const ProfileSample& s) { return std::string(profiles::to_string(s.source)); })
      .def_readonly("export_index", &ProfileSample::export_index)
      .def("__repr__", [](const ProfileSample& s) {
        return "<ProfileSample pid=" + (s.pid ? std::to_string(*s.pid) : "?") + " tid=" +
               (s.tid ? std::to_string(*s.tid) : "?") + (s.link ? " span=" + to_hex(s.link->span_id) : "") + ">";
      });
}

// Runs `f` on the store with the GIL released.
template <typename F>
auto released(PyProfilesReceiver& r, F f) {
  auto& store = r.get();
  py::gil_scoped_release nogil;
  return f(store);
}

void bind_receiver(py::module_& m) {
  py::class_<PyProfilesReceiver>(m, "ProfilesReceiver",
                                 "OTLP profiles receiver (gRPC or HTTP/protobuf) on a background thread.")
      .def_static("start", &start_receiver, py::arg("protocol") = "grpc", py::arg("host") = "127.0.0.1",
                  py::arg("port") = 0, "Binds (port 0: ephemeral) and serves 'grpc' or 'http/protobuf'.")
      .def_property_readonly("endpoint", &PyProfilesReceiver::endpoint,
                             "http://HOST:PORT, for OTEL_EXPORTER_OTLP_ENDPOINT")
      .def_property_readonly("port", &PyProfilesReceiver::port)
      .def_readonly("protocol", &PyProfilesReceiver::protocol)
      .def("samples", [](PyProfilesReceiver& r) { return released(r, [](auto& s) { return s.samples(); }); },
           "A snapshot of every sample of every accepted export.")
      .def("exports", [](PyProfilesReceiver& r) {
        py::list out;
        for (const auto& e : released(r, [](auto& s) { return s.exports(); })) out.append(export_to_py(e));
        return out;
      }, "Every export received, accepted or not, as dicts.")
      .def("counters", [](PyProfilesReceiver& r) {
        return counters_to_py(released(r, [](auto& s) { return s.counters(); }));
      }, "Exports by outcome and samples, as a dict.")
      .def("wait_for", [](PyProfilesReceiver& r, const std::function<bool(const std::vector<ProfileSample>&)>& predicate,
                          double timeout_s) {
        return released(r, [&](auto& s) {
          return s.wait_for(predicate, std::chrono::milliseconds(static_cast<long long>(timeout_s * 1000)));
        });
      }, py::arg("predicate"), py::arg("timeout"),
           "Blocks (GIL released) until predicate(samples) holds or `timeout` seconds pass; returns whether it held. "
           "The predicate must not call back into the receiver.")
      .def("clear", [](PyProfilesReceiver& r) { released(r, [](auto& s) { s.clear(); }); },
           "Forgets samples, exports and counters.")
      .def("close", [](PyProfilesReceiver& r) {
        py::gil_scoped_release nogil;
        r.grpc.reset();
        r.http.reset();
      }, "Stops serving and joins its threads (idempotent).")
      .def_property_readonly("closed", [](const PyProfilesReceiver& r) { return !r.grpc && !r.http; });
}

}  // namespace

void bind_profiles(py::module_& m) {
  bind_sample(m);
  bind_receiver(m);
  m.attr("HAVE_PROFILES") = true;
}

#else

void bind_profiles(py::module_& m) { m.attr("HAVE_PROFILES") = false; }

#endif

}  // namespace tracecorr::python

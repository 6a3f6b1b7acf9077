// The OTLP/HTTP receiver and its span model; attribute values become Python values.
#include <pybind11/chrono.h>
#include <pybind11/functional.h>
#include <pybind11/stl.h>

#include "common.hpp"
#include "tracecorr/otlp.hpp"

namespace tracecorr::python {

namespace {

using otlp::AttributeValue;

// OTLP AnyValue -> Python: empty None, string str, bool bool, int int, double
// float, bytes bytes, array list, kvlist list of (key, value) tuples (order
// and duplicate keys kept as sent).
py::object to_py(const AttributeValue& v) {
  return std::visit(
      [](const auto& x) -> py::object {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, AttributeValue::Empty>) return py::none();
        else if constexpr (std::is_same_v<T, std::string>) return py::str(x);
        else if constexpr (std::is_same_v<T, bool>) return py::bool_(x);
        else if constexpr (std::is_same_v<T, std::int64_t>) return py::int_(x);
        else if constexpr (std::is_same_v<T, double>) return py::float_(x);
        else if constexpr (std::is_same_v<T, AttributeValue::Bytes>) return to_bytes(x);
        else if constexpr (std::is_same_v<T, AttributeValue::Array>) {
          py::list l;
          for (const auto& e : x) l.append(to_py(e));
          return l;
        } else {
          py::list l;
          for (const auto& kv : x) l.append(py::make_tuple(kv.key, to_py(kv.value)));
          return l;
        }
      },
      v.value);
}

py::dict to_py(const otlp::Attributes& attributes) {
  py::dict d;
  for (const auto& [k, v] : attributes) d[py::str(k)] = to_py(v);
  return d;
}

struct PyReceiver {
  std::unique_ptr<otlp::OtlpReceiver> receiver;
  otlp::OtlpReceiver& get() {
    if (!receiver) throw py::value_error("the receiver is closed");
    return *receiver;
  }
};

}  // namespace

py::dict attributes_to_py(const otlp::Attributes& attributes) { return to_py(attributes); }

void bind_otlp(py::module_& m) {
  py::class_<otlp::ReceivedSpan>(m, "ReceivedSpan", "One span as the receiver decoded it.")
      .def_property_readonly("trace_id", [](const otlp::ReceivedSpan& s) { return to_bytes(s.trace_id); })
      .def_property_readonly("span_id", [](const otlp::ReceivedSpan& s) { return to_bytes(s.span_id); })
      .def_property_readonly("parent_span_id",
                             [](const otlp::ReceivedSpan& s) -> py::object {
                               if (!s.parent_span_id) return py::none();
                               return to_bytes(*s.parent_span_id);
                             },
                             "None for a root span (empty on the wire)")
      .def_readonly("trace_state", &otlp::ReceivedSpan::trace_state)
      .def_readonly("name", &otlp::ReceivedSpan::name)
      .def_property_readonly("kind", [](const otlp::ReceivedSpan& s) { return otlp::to_string(s.kind); })
      .def_readonly("start_unix_nano", &otlp::ReceivedSpan::start_unix_nano)
      .def_readonly("end_unix_nano", &otlp::ReceivedSpan::end_unix_nano)
      .def_readonly("flags", &otlp::ReceivedSpan::flags)
      .def_property_readonly("sampled", &otlp::ReceivedSpan::sampled)
      .def_property_readonly("attributes", [](const otlp::ReceivedSpan& s) { return to_py(s.attributes); },
                             "dict name -> Python value (see attribute_type for the OTLP type)")
      .def_property_readonly("resource_attributes",
                             [](const otlp::ReceivedSpan& s) { return to_py(s.resource_attributes()); })
      .def_readonly("dropped_attributes_count", &otlp::ReceivedSpan::dropped_attributes_count)
      .def_readonly("status_code", &otlp::ReceivedSpan::status_code)
      .def_readonly("status_message", &otlp::ReceivedSpan::status_message)
      .def_property_readonly("scope_name", &otlp::ReceivedSpan::scope_name)
      .def_property_readonly("scope_version", &otlp::ReceivedSpan::scope_version)
      .def_readonly("received_at", &otlp::ReceivedSpan::received_at_system)
      .def_readonly("request_index", &otlp::ReceivedSpan::request_index)
      .def(
          "attribute",
          [](const otlp::ReceivedSpan& s, const std::string& key) -> py::object {
            const auto* v = s.attribute(key);
            return v ? to_py(*v) : py::none();
          },
          py::arg("key"), "The attribute's value, or None when absent (also None for an empty AnyValue).")
      .def(
          "attribute_type",
          [](const otlp::ReceivedSpan& s, const std::string& key) -> std::optional<std::string> {
            const auto* v = s.attribute(key);
            if (!v) return std::nullopt;
            return v->type_name();
          },
          py::arg("key"), "'string-array', 'string', 'int', 'empty-array', 'kvlist', ...; None when absent.")
      .def(
          "resource_attribute",
          [](const otlp::ReceivedSpan& s, const std::string& key) -> py::object {
            const auto* v = s.resource_attribute(key);
            return v ? to_py(*v) : py::none();
          },
          py::arg("key"))
      .def("__repr__", [](const otlp::ReceivedSpan& s) {
        return "<ReceivedSpan " + s.name + " trace=" + to_hex(s.trace_id) + " span=" + to_hex(s.span_id) + ">";
      });

  py::class_<PyReceiver>(m, "OtlpReceiver", "OTLP/HTTP trace receiver (POST /v1/traces) on a background thread.")
      .def_static(
          "start",
          [](const std::string& host, std::uint16_t port) {
            otlp::ReceiverOptions o;
            o.host = host;
            o.port = port;
            auto out = std::make_unique<PyReceiver>();
            out->receiver = unwrap(otlp::OtlpReceiver::start(o));
            return out;
          },
          py::arg("host") = "127.0.0.1", py::arg("port") = 0, "Binds (port 0: ephemeral) and serves.")
      .def_property_readonly("endpoint", [](PyReceiver& r) { return r.get().endpoint(); },
                             "http://HOST:PORT, for OTEL_EXPORTER_OTLP_ENDPOINT")
      .def_property_readonly("traces_url", [](PyReceiver& r) { return r.get().traces_url(); })
      .def_property_readonly("port", [](PyReceiver& r) { return r.get().port(); })
      .def(
          "spans",
          [](PyReceiver& r) {
            auto& rx = r.get();
            py::gil_scoped_release nogil;
            return rx.spans();
          },
          "A snapshot of every span received so far.")
      .def(
          "find_span",
          [](PyReceiver& r, const py::bytes& span_id) {
            auto id = to_id<8>(span_id, "span_id");
            auto& rx = r.get();
            py::gil_scoped_release nogil;
            return rx.find_span(id);
          },
          py::arg("span_id"), "The first span received with this id, or None.")
      .def(
          "counters",
          [](PyReceiver& r) {
            auto& rx = r.get();
            otlp::ReceiverCounters c;
            {
              py::gil_scoped_release nogil;
              c = rx.counters();
            }
            py::dict d;
            d["requests"] = c.requests;
            d["accepted"] = c.accepted;
            d["spans"] = c.spans;
            d["spans_not_kept"] = c.spans_not_kept;
            d["rejected_total"] = c.rejected_total();
            py::dict rejected;
            for (const auto& [reason, n] : c.rejected) rejected[py::str(std::string(otlp::to_string(reason)))] = n;
            d["rejected"] = rejected;
            d["foreign_connections"] = c.foreign_connections;
            d["foreign_exports"] = c.foreign_exports;
            return d;
          },
          "Request and span counters as a dict.")
      .def(
          "wait_for",
          [](PyReceiver& r, const std::function<bool(const std::vector<otlp::ReceivedSpan>&)>& predicate,
             double timeout_s) {
            auto& rx = r.get();
            // The GIL is released while waiting; the predicate takes it back
            // (pybind11's std::function wrapper acquires it) for each check.
            py::gil_scoped_release nogil;
            return rx.wait_for(predicate, std::chrono::milliseconds(static_cast<long long>(timeout_s * 1000)));
          },
          py::arg("predicate"), py::arg("timeout"),
          "Blocks (GIL released) until predicate(spans) is true or `timeout` seconds pass; returns whether it held. "
          "The predicate runs under the receiver's lock: it must not call back into the receiver.")
      .def(
          "clear",
          [](PyReceiver& r) {
            auto& rx = r.get();
            py::gil_scoped_release nogil;
            rx.clear();
          },
          "Forgets received spans, requests and counters.")
      .def(
          "close",
          [](PyReceiver& r) {
            py::gil_scoped_release nogil;
            r.receiver.reset();
          },
          "Stops the server and joins its thread (idempotent).")
      .def_property_readonly("closed", [](const PyReceiver& r) { return !r.receiver; });
}

}  // namespace tracecorr::python

// Elastic v1's registry constants (spec/elastic-v1.json as compiled in) and its wire codecs.
#include <pybind11/operators.h>
#include <pybind11/stl.h>

#include "common.hpp"
#include "elastic_v1/bindings.hpp"
#include "elastic_v1/registry.hpp"
#include "elastic_v1/wire.hpp"
#include "tracecorr/record_layout.hpp"

namespace tracecorr::python {

namespace {

// A read/write bytes property over a fixed-size id member.
template <typename C, std::size_t N>
void id_property(py::class_<C>& cls, const char* name, std::array<std::uint8_t, N> C::*member) {
  cls.def_property(
      name, [member](const C& c) { return to_bytes(c.*member); },
      [member, name](C& c, const py::bytes& b) { c.*member = to_id<N>(b, name); },
      (std::string(name) + " (" + std::to_string(N) + " bytes)").c_str());
}

template <typename C>
void bytes_property(py::class_<C>& cls, const char* name, std::vector<std::uint8_t> C::*member, const char* doc) {
  cls.def_property(
      name, [member](const C& c) { return to_bytes(c.*member); },
      [member](C& c, const py::bytes& b) { c.*member = from_bytes(b); }, doc);
}

}  // namespace

void bind_elastic_v1_wire(py::module_& m) {
  // ---- registry constants ---------------------------------------------------
  py::module_ s = m.def_submodule("spec", "Layout constants generated from the registry.");
#define TC_CONST(name) s.attr(#name) = elastic_v1::spec::name
  TC_CONST(kPointerSize);
  TC_CONST(kUtf8StrMaxLengthRead);
  TC_CONST(kTlsRecordSize);
  TC_CONST(kTlsRecordMinor);
  TC_CONST(kProcessStorageMinor);
  TC_CONST(kMessageHeaderSize);
  TC_CONST(kDefaultDelayMs);
  TC_CONST(kDefaultBufferSize);
  TC_CONST(kStackTraceIdSize);
  TC_CONST(kMsgCorrelationType);
  TC_CONST(kMsgCorrelationMinor);
  TC_CONST(kMsgCorrelationFixedSize);
  TC_CONST(kMsgRegistrationType);
  TC_CONST(kMsgRegistrationMinor);
  TC_CONST(kMsgRegistrationFixedSize);
  TC_CONST(kMsgRegistrationHostIdMaxLength);
#undef TC_CONST
  s.attr("kAttributeName") = std::string(elastic_v1::spec::kAttributeName);
  s.attr("kEnvEnabled") = std::string(elastic_v1::spec::kEnvEnabled);
  s.attr("kEnvSocketDir") = std::string(elastic_v1::spec::kEnvSocketDir);
  s.attr("kEnvBufferSize") = std::string(elastic_v1::spec::kEnvBufferSize);
  s.attr("kLibraryNameRegex") = std::string(elastic_v1::spec::kLibraryNameRegex);
  s.attr("kProcessStorageSymbol") = std::string(elastic_v1::spec::kProcessStorageSymbol);
  s.attr("kTlsSymbol") = std::string(elastic_v1::spec::kTlsSymbol);

  // ---- wire: records and storage ------------------------------------------------
  py::class_<elastic_v1::TlsRecord> tls(m, "TlsRecord", "The 37-byte per-thread correlation record.");
  tls.def(py::init<>())
      .def_readwrite("minor", &elastic_v1::TlsRecord::minor)
      .def_readwrite("valid", &elastic_v1::TlsRecord::valid)
      .def_readwrite("trace_present", &elastic_v1::TlsRecord::trace_present)
      .def_readwrite("trace_flags", &elastic_v1::TlsRecord::trace_flags)
      .def(py::self == py::self);
  id_property(tls, "trace_id", &elastic_v1::TlsRecord::trace_id);
  id_property(tls, "span_id", &elastic_v1::TlsRecord::span_id);
  id_property(tls, "transaction_id", &elastic_v1::TlsRecord::transaction_id);
  m.def(
      "encode_tls_record", [](const elastic_v1::TlsRecord& r) { return to_bytes(elastic_v1::encode_tls_record(r)); },
      py::arg("record"));
  m.def(
      "decode_tls_record", [](const py::bytes& b) { std::string s = b; return unwrap(elastic_v1::decode_tls_record(view(s))); },
      py::arg("data"), "Decodes the layout only (minor and valid are the caller's to judge).");

  m.def("tls_record_layout", &elastic_v1::tls_record_layout, py::return_value_policy::copy,
        "The Elastic v1 thread record's layout (37 bytes, pointer in a TLS slot).");

  py::class_<elastic_v1::ProcessStorage>(m, "ProcessStorage", "The process storage the agent publishes.")
      .def(py::init<>())
      .def_readwrite("minor", &elastic_v1::ProcessStorage::minor)
      .def_readwrite("service_name", &elastic_v1::ProcessStorage::service_name)
      .def_readwrite("service_environment", &elastic_v1::ProcessStorage::service_environment)
      .def_readwrite("socket_file_path", &elastic_v1::ProcessStorage::socket_file_path)
      .def_readonly("encoded_size", &elastic_v1::ProcessStorage::encoded_size)
      .def(py::self == py::self);
  m.def(
      "encode_process_storage", [](const elastic_v1::ProcessStorage& p) { return to_bytes(elastic_v1::encode_process_storage(p)); },
      py::arg("storage"));
  m.def(
      "decode_process_storage",
      [](const py::bytes& b) {
        std::string s = b;
        return unwrap(elastic_v1::decode_process_storage(buffer_source(view(s))));
      },
      py::arg("data"), "Checks layout, length bounds and UTF-8 (PROC-03); TracecorrError otherwise.");

  // ---- wire: messages -------------------------------------------------------------
  py::class_<elastic_v1::Registration> reg(m, "Registration", "Profiler registration message (type 2).");
  reg.def(py::init<>())
      .def_readwrite("minor", &elastic_v1::Registration::minor)
      .def_readwrite("samples_delay_ms", &elastic_v1::Registration::samples_delay_ms)
      .def_property(
          "host_id", [](const elastic_v1::Registration& r) { return py::bytes(r.host_id); },
          [](elastic_v1::Registration& r, const py::object& v) {
            r.host_id = py::isinstance<py::str>(v) ? v.cast<std::string>() : std::string(v.cast<py::bytes>());
          },
          "host-id as bytes (need not be UTF-8: MSG-07); str is accepted when setting")
      .def(py::self == py::self);
  bytes_property(reg, "trailing", &elastic_v1::Registration::trailing, "bytes after the known fields (a later minor)");

  py::class_<elastic_v1::Correlation> corr(m, "Correlation", "CPU profiler trace correlation message (type 1).");
  corr.def(py::init<>())
      .def_readwrite("minor", &elastic_v1::Correlation::minor)
      .def_readwrite("count", &elastic_v1::Correlation::count)
      .def(py::self == py::self);
  id_property(corr, "trace_id", &elastic_v1::Correlation::trace_id);
  id_property(corr, "transaction_id", &elastic_v1::Correlation::transaction_id);
  id_property(corr, "stack_trace_id", &elastic_v1::Correlation::stack_trace_id);
  bytes_property(corr, "trailing", &elastic_v1::Correlation::trailing, "bytes after the known fields (a later minor)");

  py::class_<elastic_v1::UnknownMessage> unk(m, "UnknownMessage", "A message of a type (or minor) the decoder does not know.");
  unk.def(py::init<>())
      .def_readwrite("type", &elastic_v1::UnknownMessage::type)
      .def_readwrite("minor", &elastic_v1::UnknownMessage::minor)
      .def(py::self == py::self);
  bytes_property(unk, "payload", &elastic_v1::UnknownMessage::payload, "bytes after the 4-byte header");

  m.def(
      "encode", [](const elastic_v1::Message& msg) { return to_bytes(elastic_v1::encode(msg)); }, py::arg("message"),
      "The datagram for a Registration, Correlation or UnknownMessage.");
  m.def(
      "decode_message",
      [](const py::bytes& b) {
        std::string s = b;
        return unwrap(elastic_v1::decode_message(view(s)));
      },
      py::arg("datagram"),
      "Decodes as a conforming agent must: too short is a TracecorrError (MSG-04), trailing bytes are kept, "
      "minor 0 of a known type is an UnknownMessage (MSG-05).");
  m.def("minimum_size", &elastic_v1::minimum_size, py::arg("message"),
        "The smallest datagram carrying every field of the message (its size without trailing bytes).");
  m.def("describe", &elastic_v1::describe, py::arg("message"), "One line, ids in hex.");
}

}  // namespace tracecorr::python

// Registry (spec/elastic-v1.json as compiled in), ids, and the wire codecs.
#include <pybind11/operators.h>
#include <pybind11/stl.h>

#include "common.hpp"
#include "tracecorr/conform/result.hpp"
#include "tracecorr/ids.hpp"
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

std::span<const std::uint8_t> view(const std::string& s) {
  return {reinterpret_cast<const std::uint8_t*>(s.data()), s.size()};
}

}  // namespace

void bind_wire(py::module_& m) {
  // ---- registry -------------------------------------------------------------
  py::enum_<Level>(m, "Level", "Requirement level (MUST, SHOULD, MAY).")
      .value("MUST", Level::Must)
      .value("SHOULD", Level::Should)
      .value("MAY", Level::May);
  py::enum_<Role>(m, "Role", "Who a requirement binds: the agent (judged by conform) or the profiler.")
      .value("AGENT", Role::Agent)
      .value("PROFILER", Role::Profiler);

  py::class_<Requirement>(m, "Requirement", "One requirement of the registry.")
      .def_property_readonly("id", [](const Requirement& r) { return std::string(r.id); })
      .def_readonly("level", &Requirement::level)
      .def_property_readonly("area", [](const Requirement& r) { return std::string(r.area); })
      .def_readonly("role", &Requirement::role)
      .def_property_readonly("source", [](const Requirement& r) { return std::string(r.source); })
      .def_property_readonly("summary", [](const Requirement& r) { return std::string(r.summary); })
      .def("__repr__", [](const Requirement& r) { return "<Requirement " + std::string(r.id) + ">"; });

  m.def(
      "requirements", [] { return std::vector<Requirement>(elastic_v1::spec::kRequirements.begin(), elastic_v1::spec::kRequirements.end()); },
      "Every requirement of the registry, in registry order.");
  m.def(
      "find_requirement",
      [](const std::string& id) -> std::optional<Requirement> {
        if (const auto* r = find_requirement(id)) return *r;
        return std::nullopt;
      },
      py::arg("id"), "The requirement with this id, or None.");
  m.def("validate_ids", &conform::validate_ids, py::arg("ids"),
        "The ids that are not in the registry, in the order given (empty: all known).");
  m.def(
      "registry_json", [] { return std::string(elastic_v1::spec::kRegistryJson); },
      "spec/elastic-v1.json as compiled into the library (text; tracecorr.registry() parses it).");

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

  // ---- ids ------------------------------------------------------------------
  m.def(
      "to_hex", [](const py::bytes& b) { std::string s = b; return to_hex(view(s)); }, py::arg("data"),
      "Lower-case hex of the bytes.");
  m.def(
      "from_hex",
      [](const std::string& hex, std::size_t size) {
        std::vector<std::uint8_t> out(size);
        if (!from_hex(hex, out)) throw py::value_error("not " + std::to_string(size) + " bytes of hex: '" + hex + "'");
        return to_bytes(out);
      },
      py::arg("hex"), py::arg("size"), "Exactly `size` bytes from hex text; ValueError otherwise.");
  m.def(
      "base64url_nopad", [](const py::bytes& b) { std::string s = b; return base64url_nopad(view(s)); },
      py::arg("data"), "RFC 4648 section 5 base64url without padding (what the attribute carries).");
  m.def(
      "base64url_decode",
      [](const std::string& text) -> std::optional<py::bytes> {
        auto d = base64url_decode(text);
        if (!d) return std::nullopt;
        return py::bytes(*d);
      },
      py::arg("text"), "Strict decoder of unpadded base64url; None when not canonical.");
  m.def("base64url_problem", [](const std::string& t) { return base64url_problem(t); }, py::arg("text"),
        "Why text is not canonical unpadded base64url, or '' when it is.");
  m.def(
      "utf8_invalid_at", [](const py::bytes& b) { std::string s = b; return utf8_invalid_at(s); }, py::arg("data"),
      "Offset of the first invalid UTF-8 sequence, or None for valid text.");

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

  // ---- record layouts: what samplers read, as data -------------------------------------
  m.attr("RECORD_MAX_BYTES") = kRecordMaxBytes;
  py::class_<RecordLayout>(m, "RecordLayout",
                           "A published record as data: its length (fixed, or a size field), valid byte, fields and "
                           "how it is reached (a pointer in a TLS slot, or in a memory area). Samplers read through one.")
      .def(py::init([](std::string name, std::optional<std::size_t> fixed_size,
                       std::optional<std::tuple<std::size_t, std::size_t, std::size_t>> size_field, std::size_t max_size,
                       std::size_t valid_offset, std::optional<std::vector<std::uint8_t>> valid_values,
                       std::optional<std::size_t> presence_offset,
                       std::vector<std::tuple<std::string, std::size_t, std::size_t>> fields,
                       std::optional<std::size_t> memory_area_pointer_offset) {
             if (fixed_size.has_value() == size_field.has_value())
               throw py::value_error("give exactly one of fixed_size and size_field=(offset, width, header_length)");
             RecordLayout l;
             l.name = std::move(name);
             if (fixed_size) l.length = FixedSize{*fixed_size};
             else l.length = SizeField{std::get<0>(*size_field), std::get<1>(*size_field), std::get<2>(*size_field)};
             l.max_size = max_size;
             l.valid_offset = valid_offset;
             if (valid_values) l.valid_values = ByteValues::of(*valid_values);
             l.presence_offset = presence_offset;
             for (auto& [n, o, sz] : fields) l.fields.push_back({n, o, sz});
             if (memory_area_pointer_offset) l.indirection = PointerInMemoryArea{*memory_area_pointer_offset};
             check(l.check());
             return l;
           }),
           py::arg("name"), py::kw_only(), py::arg("fixed_size") = py::none(), py::arg("size_field") = py::none(),
           py::arg("max_size") = kRecordMaxBytes, py::arg("valid_offset"), py::arg("valid_values") = py::none(),
           py::arg("presence_offset") = py::none(),
           py::arg("fields") = std::vector<std::tuple<std::string, std::size_t, std::size_t>>{},
           py::arg("memory_area_pointer_offset") = py::none(),
           "valid_values None: any non-zero value; memory_area_pointer_offset None: the pointer is in a TLS slot. "
           "TracecorrError when the layout cannot be read as declared.")
      .def_readonly("name", &RecordLayout::name)
      .def_readonly("max_size", &RecordLayout::max_size)
      .def_readonly("valid_offset", &RecordLayout::valid_offset)
      .def_property_readonly("fixed_part", &RecordLayout::fixed_part, "bytes read before the length is known")
      .def_property_readonly("in_tls_slot", [](const RecordLayout& l) { return uses_thread_pointer(l); })
      .def(
          "record_length",
          [](const RecordLayout& l, const py::bytes& b) {
            std::string s = b;
            return unwrap(record_length(l, view(s)));
          },
          py::arg("first_bytes"), "Total length from the first bytes; TracecorrError when truncated or over max_size.")
      .def("__repr__", [](const RecordLayout& l) { return "<RecordLayout " + l.name + ">"; });
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

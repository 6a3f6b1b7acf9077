// The protocol registry (every package's ProtocolSpec, compiled in) and ids.
#include <pybind11/stl.h>

#include "common.hpp"
#include "tracecorr/conform/result.hpp"
#include "tracecorr/ids.hpp"
#include "tracecorr/protocol.hpp"

namespace tracecorr::python {

void bind_registry(py::module_& m) {
  // ---- registry -------------------------------------------------------------
  py::enum_<Level>(m, "Level", "Requirement level (MUST, SHOULD, MAY).")
      .value("MUST", Level::Must)
      .value("SHOULD", Level::Should)
      .value("MAY", Level::May);
  py::enum_<Role>(m, "Role", "Who a requirement binds: the agent (judged by conform) or the profiler.")
      .value("AGENT", Role::Agent)
      .value("PROFILER", Role::Profiler);

  py::class_<Requirement>(m, "Requirement", "One requirement of a protocol's registry.")
      .def_property_readonly("id", [](const Requirement& r) { return std::string(r.id); })
      .def_readonly("level", &Requirement::level)
      .def_property_readonly("area", [](const Requirement& r) { return std::string(r.area); })
      .def_readonly("role", &Requirement::role)
      .def_property_readonly("source", [](const Requirement& r) { return std::string(r.source); })
      .def_property_readonly("summary", [](const Requirement& r) { return std::string(r.summary); })
      .def("__repr__", [](const Requirement& r) { return "<Requirement " + std::string(r.id) + ">"; });

  // Specs are static (generated registries): references stay valid for the module's life.
  py::class_<ProtocolSpec>(m, "ProtocolSpec", "A registered protocol: its id, title, requirements and registry.")
      .def_property_readonly("id", [](const ProtocolSpec& p) { return std::string(p.id); })
      .def_property_readonly("title", [](const ProtocolSpec& p) { return std::string(p.title); })
      .def_property_readonly(
          "requirements",
          [](const ProtocolSpec& p) { return std::vector<Requirement>(p.requirements.begin(), p.requirements.end()); },
          "Its requirements, in registry order.")
      .def_property_readonly(
          "registry_json", [](const ProtocolSpec& p) { return std::string(p.registry_json); },
          "spec/<id>.json as compiled in (text; tracecorr.registry(id) parses it).")
      .def("__repr__", [](const ProtocolSpec& p) { return "<ProtocolSpec " + std::string(p.id) + ">"; });

  m.def("protocols", &tracecorr::protocols, py::return_value_policy::reference,
        "The registered protocols, in registration order.");
  m.def("find_protocol", &tracecorr::find_protocol, py::arg("id"), py::return_value_policy::reference,
        "The registered protocol with this id, or None.");
  m.def(
      "requirements",
      [] {
        std::vector<Requirement> out;
        for (const Requirement* r : all_requirements()) out.push_back(*r);
        return out;
      },
      "Every requirement of every registered protocol, in registry order.");
  m.def(
      "find_requirement",
      [](const std::string& id) -> std::optional<Requirement> {
        if (const auto* r = find_requirement(id)) return *r;
        return std::nullopt;
      },
      py::arg("id"), "The requirement with this id (in any registered protocol), or None.");
  m.def("validate_ids", &conform::validate_ids, py::arg("ids"),
        "The ids no registered protocol defines, in the order given (empty: all known).");

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
      py::arg("data"), "RFC 4648 section 5 base64url without padding.");
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
}

}  // namespace tracecorr::python

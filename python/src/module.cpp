// tracecorr._tracecorr: thin pybind11 bindings over libtracecorr's engine
// and, when built, tracecorr_bpf; each protocol package's bindings
// (python/src/<package>/) in the submodule _tracecorr.<package>.
#include <pybind11/eval.h>

#include "common.hpp"
#include "tracecorr/plugin_registry.hpp"

namespace tracecorr::python {

namespace {
py::object g_error_type;

PluginRegistry<PackageBindings>& package_registry() {
  static PluginRegistry<PackageBindings> r;
  return r;
}
}  // namespace

RegisterPackageBindings::RegisterPackageBindings(const PackageBindings& bindings) {
  package_registry().add(bindings);
}

std::vector<const PackageBindings*> package_bindings() { return package_registry().all(); }

py::object error_type() { return g_error_type; }

void init_error_type(py::module_& m) {
  // A plain Python class so instances carry the three fields of tracecorr::Error.
  py::dict ns;
  py::exec(R"(
class TracecorrError(RuntimeError):
    """A tracecorr::Error: what was wrong, where, and the requirement it breaks (may be empty)."""
    def __init__(self, message, what="", where="", requirement=""):
        super().__init__(message)
        self.what = what
        self.where = where
        self.requirement = requirement
)",
           py::globals(), ns);
  g_error_type = ns["TracecorrError"];
  g_error_type.attr("__module__") = "tracecorr._tracecorr";
  m.attr("TracecorrError") = g_error_type;
}

void raise_error(const Error& e) {
  py::object instance = g_error_type(e.message(), e.what, e.where, e.requirement);
  PyErr_SetObject(g_error_type.ptr(), instance.ptr());
  throw py::error_already_set();
}

std::vector<std::uint8_t> from_bytes(const py::bytes& b) {
  std::string_view s = b;
  return std::vector<std::uint8_t>(s.begin(), s.end());
}

py::object json_to_py(const nlohmann::json& j) {
  static py::object loads = py::module_::import("json").attr("loads");
  return loads(j.dump());
}

}  // namespace tracecorr::python

PYBIND11_MODULE(_tracecorr, m) {
  using namespace tracecorr::python;
  m.doc() = "Thin bindings over libtracecorr: the protocol registry, ids, inspection, sockets, the OTLP "
            "receiver, record layouts, samplers and the conformance runner; each protocol package's own "
            "(codecs, host agent) in the submodule named after it.";
  init_error_type(m);
  bind_registry(m);
  bind_process(m);
  bind_otlp(m);
  bind_sampling(m);
  bind_conform(m);
  bind_profiles(m);
  for (const PackageBindings* package : package_bindings()) {
    py::module_ submodule = m.def_submodule(std::string(package->package).c_str(), std::string(package->doc).c_str());
    package->bind(submodule);
  }
#if defined(TRACECORR_HAVE_BPF)
  m.attr("HAVE_BPF") = true;
#else
  m.attr("HAVE_BPF") = false;
#endif
}

// Helpers shared by the binding translation units: error translation,
// bytes <-> fixed-size ids, JSON -> Python, and the list protocol packages'
// bindings register in. No protocol logic lives here.
#pragma once

#include <pybind11/pybind11.h>

#include <array>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tracecorr/error.hpp"
#include "tracecorr/otlp.hpp"

namespace tracecorr::python {

namespace py = pybind11;

// tracecorr.TracecorrError (a RuntimeError) with .what, .where, .requirement.
py::object error_type();
void init_error_type(py::module_& m);
[[noreturn]] void raise_error(const Error& e);

template <typename T>
T unwrap(Expected<T>&& e) {
  if (!e) raise_error(e.error());
  return std::move(e).value();
}
inline void check(const Status& st) {
  if (!st) raise_error(st.error());
}

inline py::bytes to_bytes(std::span<const std::uint8_t> b) {
  return py::bytes(reinterpret_cast<const char*>(b.data()), b.size());
}
std::vector<std::uint8_t> from_bytes(const py::bytes& b);
// The bytes of a std::string made from Python bytes, without copying.
inline std::span<const std::uint8_t> view(const std::string& s) {
  return {reinterpret_cast<const std::uint8_t*>(s.data()), s.size()};
}

// A fixed-size id from Python bytes; a wrong length is a ValueError naming `field`.
template <std::size_t N>
std::array<std::uint8_t, N> to_id(const py::bytes& b, const char* field) {
  std::string s = b;
  if (s.size() != N)
    throw py::value_error(std::string(field) + " must be " + std::to_string(N) + " bytes, got " +
                          std::to_string(s.size()));
  std::array<std::uint8_t, N> out{};
  for (std::size_t i = 0; i < N; ++i) out[i] = static_cast<std::uint8_t>(s[i]);
  return out;
}

// nlohmann::json -> dict/list/str/int/float/bool/None (via the json module).
py::object json_to_py(const nlohmann::json& j);

// OTLP attributes as a dict name -> Python value (bind_otlp.cpp).
py::dict attributes_to_py(const otlp::Attributes& attributes);

// The engine's bindings, one file each.
void bind_registry(py::module_& m);
void bind_process(py::module_& m);
void bind_otlp(py::module_& m);
void bind_sampling(py::module_& m);
void bind_conform(py::module_& m);
void bind_profiles(py::module_& m);  // empty when tracecorr was built without OTLP profiles

// A protocol package's bindings (python/src/<package>/) register themselves
// from a static initialiser, so the module names no package: module.cpp binds
// each, after the engine's, into its own submodule _tracecorr.<package>.
struct PackageBindings {
  std::string_view package;  // the package folder's name, e.g. "elastic_v1"
  std::string_view doc;      // the submodule's docstring
  void (*bind)(py::module_& submodule);
};
struct RegisterPackageBindings {
  explicit RegisterPackageBindings(const PackageBindings& bindings);
};
std::vector<const PackageBindings*> package_bindings();

}  // namespace tracecorr::python

// Registers Elastic v1's bindings: module.cpp binds them into _tracecorr.elastic_v1.
#include "elastic_v1/bindings.hpp"

namespace tracecorr::python {
namespace {

void bind_elastic_v1(py::module_& m) {
  bind_elastic_v1_wire(m);
  bind_elastic_v1_agent(m);
}

constexpr PackageBindings kElasticV1{"elastic_v1",
                                     "Elastic v1: registry constants, the record, storage and message codecs, and the "
                                     "reference host agent.",
                                     &bind_elastic_v1};
const RegisterPackageBindings kRegistered{kElasticV1};

}  // namespace
}  // namespace tracecorr::python

// Elastic v1's bindings, bound into _tracecorr.elastic_v1 (package.cpp).
#pragma once

#include "common.hpp"

namespace tracecorr::python {

void bind_elastic_v1_wire(py::module_& m);   // registry constants, record and storage codecs, messages
void bind_elastic_v1_agent(py::module_& m);  // the reference host agent and its stack trace ids

}  // namespace tracecorr::python

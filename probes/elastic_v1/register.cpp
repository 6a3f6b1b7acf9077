// Elastic v1 tells the engine what it brings: its requirements and its
// conformance suite. Called before main from the generated
// builtin_protocols.cpp (TRACECORR_PROTOCOLS in the top CMakeLists.txt).
#include "elastic_v1/registry.hpp"
#include "probes.hpp"

namespace tracecorr::elastic_v1 {

void register_protocol() {
  tracecorr::register_protocol(spec::kProtocol);
  conform::register_suite(suite());
}

}  // namespace tracecorr::elastic_v1

// Elastic v1 tells the engine what it brings: its requirements, its
// conformance suite, its inspector and its host agent hook. Called before main from the generated
// builtin_protocols.cpp (TRACECORR_PROTOCOLS in the top CMakeLists.txt).
#include "elastic_v1/agent/hook.hpp"
#include "elastic_v1/registry.hpp"
#include "elastic_v1/inspect/inspect.hpp"
#include "probes.hpp"

namespace tracecorr::elastic_v1 {

void register_protocol() {
  tracecorr::register_protocol(elastic_v1::spec::kProtocol);
  conform::register_suite(suite());
  tracecorr::register_inspector(inspector());
  tracecorr::register_agent_hook(agent::agent_hook());
}

}  // namespace tracecorr::elastic_v1

// Elastic v1 tells the engine what it brings: its requirements, its
// conformance suite, its inspector, its host agent hook and the reader of its figures as older reports saved
// them. Called before main from the generated
// builtin_protocols.cpp (TRACECORR_PROTOCOLS in the top CMakeLists.txt).
#include "elastic_v1/agent/hook.hpp"
#include "elastic_v1/registry.hpp"
#include "elastic_v1/inspect/inspect.hpp"
#include "probes.hpp"
#include "saved_figures.hpp"

namespace tracecorr::elastic_v1 {

void register_protocol() {
  tracecorr::register_protocol(elastic_v1::spec::kProtocol);
  conform::register_suite(suite());
  tracecorr::register_inspector(inspector());
  tracecorr::register_agent_hook(agent::agent_hook());
  report::register_saved_figures_reader(saved_figures_reader());
}

}  // namespace tracecorr::elastic_v1

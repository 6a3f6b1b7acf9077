// The process context package tells the engine what it brings: its
// requirements and its inspector. Called before main from the generated
// builtin_protocols.cpp (TRACECORR_PROTOCOLS in the top CMakeLists.txt).
// No conformance suite yet: `tracecorr conform --protocol otel-process-context`
// says so.
#include "otel_process_context/inspect/inspect.hpp"
#include "otel_process_context/registry.hpp"

namespace tracecorr::otel_process_context {

void register_protocol() {
  tracecorr::register_protocol(spec::kProtocol);
  tracecorr::register_inspector(inspector());
}

}  // namespace tracecorr::otel_process_context

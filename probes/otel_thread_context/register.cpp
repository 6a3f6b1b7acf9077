// The thread context package tells the engine what it brings: its
// requirements and its conformance suite. Called before main from the
// generated builtin_protocols.cpp (TRACECORR_PROTOCOLS in the top
// CMakeLists.txt).
#include "otel_thread_context/registry.hpp"
#include "probes.hpp"

namespace tracecorr::otel_thread_context {

void register_protocol() {
  tracecorr::register_protocol(spec::kProtocol);
  conform::register_suite(suite());
}

}  // namespace tracecorr::otel_thread_context

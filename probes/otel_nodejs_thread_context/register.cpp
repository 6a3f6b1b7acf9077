// The Node.js thread context package tells the engine what it brings: its
// requirements, its conformance suite, its inspector and the protocol the
// host agent samples. Called before main from the generated
// builtin_protocols.cpp (TRACECORR_PROTOCOLS in the top CMakeLists.txt).
#include "otel_nodejs_thread_context/agent/sampled.hpp"
#include "otel_nodejs_thread_context/inspect/inspect.hpp"
#include "otel_nodejs_thread_context/registry.hpp"
#include "probes.hpp"
#include "tracecorr/protocol.hpp"
#include "tracecorr/sampled_protocol.hpp"

namespace tracecorr::otel_nodejs_thread_context {

void register_protocol() {
  tracecorr::register_protocol(spec::kProtocol);
  conform::register_suite(suite());
  tracecorr::register_inspector(inspector());
  tracecorr::register_sampled_protocol(sampled_protocol());
}

}  // namespace tracecorr::otel_nodejs_thread_context

// The thread context package tells the engine what it brings: for now its
// requirements (the registry). Called before main from the generated
// builtin_protocols.cpp (TRACECORR_PROTOCOLS in the top CMakeLists.txt).
#include "otel_thread_context/registry.hpp"

namespace tracecorr::otel_thread_context {

void register_protocol() { tracecorr::register_protocol(spec::kProtocol); }

}  // namespace tracecorr::otel_thread_context

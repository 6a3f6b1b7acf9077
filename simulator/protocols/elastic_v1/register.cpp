// Tells the engine that Elastic v1 exists (called before main from the
// generated builtin_protocols.cpp; see TRACECORR_PROTOCOLS).
#include "elastic_v1/registry.hpp"

namespace tracecorr::elastic_v1 {

void register_protocol() { tracecorr::register_protocol(spec::kProtocol); }

}  // namespace tracecorr::elastic_v1

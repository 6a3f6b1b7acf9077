// OTEP 4947 as a sampled protocol (tracecorr/sampled_protocol.hpp): the host
// agent samples every thread's record in whatever TLS model the variable
// lives, dynamic TLS included, and lists per thread the ids, flags and
// attributes (named through the key map the process context publishes) it
// read. Registered with the package (inspect/register.cpp).
#pragma once

#include "tracecorr/sampled_protocol.hpp"

namespace tracecorr::otel_thread_context {

const SampledProtocol& sampled_protocol();

}  // namespace tracecorr::otel_thread_context

// The Node.js thread context as a sampled protocol (tracecorr/sampled_protocol.hpp):
// the host agent finds `otel_thread_ctx_nodejs_v1` in any TLS model, reads
// each thread's record through the V8 context-map walk (the layout's
// indirection, walk.hpp) while the thread is stopped, and lists per thread
// the ids, flags and attributes (named through the key map of the process
// context) it read. The BPF sampler takes the walk's shape as data
// (RecordWalk::table_walk_shape); a walk made defective for a kill matrix
// (`--reader-defect`) has none, and BPF refuses it, saying so. Registered
// with the package (register.cpp).
#pragma once

#include "tracecorr/sampled_protocol.hpp"

namespace tracecorr::otel_nodejs_thread_context {

const SampledProtocol& sampled_protocol();

}  // namespace tracecorr::otel_nodejs_thread_context

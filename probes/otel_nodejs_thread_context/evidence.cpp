// See evidence.hpp.
#include "evidence.hpp"

#include <algorithm>

namespace tracecorr::otel_nodejs_thread_context {

bool ThreadLookFacts::judges_hash() const {
  if (end == WalkEnd::Record || end == WalkEnd::Detached || end == WalkEnd::NullRecord) return true;
  return std::any_of(violations.begin(), violations.end(), [](const Finding& f) { return f.requirement == "NJS-07"; });
}

bool NodeFacts::any_gate_open() const {
  return std::any_of(threads.begin(), threads.end(), [](const ThreadLookFacts& t) { return t.gate_open; });
}

const NodeFacts* facts(const conform::SessionSet& sessions, const std::string& name) {
  const auto* s = sessions.find(name);
  return s ? s->protocol_as<NodeFacts>() : nullptr;
}

}  // namespace tracecorr::otel_nodejs_thread_context

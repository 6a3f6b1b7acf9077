// reference (NJS-09, 10): the schema and key map in the process context, and
// a process told to run without AsyncContextFrame declaring nothing.
#include "probes.hpp"

#include <algorithm>
#include <functional>
#include <map>

#include "otel_nodejs_thread_context/checks.hpp"
#include "otel_nodejs_thread_context/registry.hpp"

namespace tracecorr::otel_nodejs_thread_context {

std::vector<Finding> judge_reference(const NodeFacts& f) {
  std::vector<Finding> out = check_reference_data(f.reference, f.any_gate_open());
  const bool declared = f.reference && f.reference->schema_version_value;
  if (!f.async_context_frame_off)
    out.push_back(not_applicable("NJS-10", "the process runs with AsyncContextFrame (no --no-async-context-frame in "
                                           "its command line or NODE_OPTIONS)"));
  else if (declared)
    out.push_back(violated("NJS-10", "--no-async-context-frame (in " + *f.async_context_frame_off +
                                         ") and yet the process context declares threadlocal.schema_version"));
  else if (f.any_gate_open())
    out.push_back(violated("NJS-10", "--no-async-context-frame (in " + *f.async_context_frame_off +
                                         ") and yet a thread's gate opened"));
  else if (f.looks > 0)
    out.push_back(met("NJS-10", f.looks, "--no-async-context-frame (in " + *f.async_context_frame_off +
                                             "): no schema declared and no gate opened in " + std::to_string(f.looks) +
                                             " looks"));
  return out;
}


namespace {

class ReferenceProbe final : public SessionProbe {
 public:
  ReferenceProbe() : SessionProbe("reference", {"NJS-09", "NJS-10"}, kLookedSession) {}
  std::vector<Finding> judge_writer(const conform::SessionEvidence&, const NodeFacts& f) const override {
    return judge_reference(f);
  }
};

}  // namespace

std::unique_ptr<conform::Probe> make_reference_probe() { return std::make_unique<ReferenceProbe>(); }

}  // namespace tracecorr::otel_nodejs_thread_context

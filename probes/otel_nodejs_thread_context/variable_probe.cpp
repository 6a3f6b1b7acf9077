// variable (NJS-01..03): the symbol `otel_thread_ctx_nodejs_v1`, its type and
// size, and the relocations that reach it, in the module of the judged
// process (inspect's checks); a schema declared with no such module fails NJS-01.
#include "probes.hpp"

#include <algorithm>
#include <functional>
#include <map>

#include "otel_nodejs_thread_context/checks.hpp"
#include "otel_nodejs_thread_context/registry.hpp"

namespace tracecorr::otel_nodejs_thread_context {
namespace {

const std::vector<std::string> kIds = {"NJS-01", "NJS-02", "NJS-03"};

}  // namespace

std::vector<Finding> judge_variable(const NodeFacts& f) {
  if (f.module) return completed(check_variable(*f.module), kIds, std::string(spec::kTlsSymbol) + " is not a thread-local variable (NJS-01)");
  if (!f.module_error.empty()) return {kit_error("NJS-01", "the process's modules could not be examined: " + f.module_error)};
  if (!f.reference || !f.reference->schema_version_value)  // AsyncContextFrame off, nothing published: NJS-10 alone
    return completed({}, kIds, "no module defines " + std::string(spec::kTlsSymbol) + " and no schema is declared");
  const std::string declared = f.reference->schema_version.value_or("");
  return completed({violated("NJS-01", "the process context declares " + declared + ", but no mapped module defines " +
                                           std::string(spec::kTlsSymbol) + " in its .dynsym")},
                   kIds, "no module defines " + std::string(spec::kTlsSymbol) + " (NJS-01)");
}


namespace {

class VariableProbe final : public SessionProbe {
 public:
  VariableProbe() : SessionProbe("variable", {"NJS-01", "NJS-02", "NJS-03"}, kLookedSession) {}
  std::vector<Finding> judge_writer(const conform::SessionEvidence&, const NodeFacts& f) const override {
    return judge_variable(f);
  }
};

}  // namespace

std::unique_ptr<conform::Probe> make_variable_probe() { return std::make_unique<VariableProbe>(); }

}  // namespace tracecorr::otel_nodejs_thread_context

// variable (TCTX-01..05): the symbol `otel_thread_ctx_v1`, its type and size,
// and the relocations that reach it, in the module the writer published from.
#include "probes.hpp"

#include "judges.hpp"
#include "judging.hpp"
#include "otel_thread_context/checks.hpp"
#include "otel_thread_context/registry.hpp"

namespace tracecorr::otel_thread_context {

std::vector<Finding> judge_variable(const ThreadContextFacts& facts) {
  std::vector<Finding> out;
  if (facts.not_found) {
    for (auto id : kVariableRequirements)
      out.push_back(not_applicable(std::string(id), "no thread-context writer: " + facts.not_found->message()));
    return out;
  }
  if (!facts.module) {
    const std::string why = facts.module_error ? facts.module_error->message() : "the module was not looked for";
    const bool absent = facts.module_error && facts.module_error->kind == ErrorKind::kNotFound;
    for (auto id : kVariableRequirements) {
      if (id == "TCTX-01")
        out.push_back(absent ? violated("TCTX-01", "the process context announces thread context (threadlocal.* keys), "
                                                   "but " + why)
                             : kit_error("TCTX-01", "the process's modules could not be examined: " + why));
      else
        out.push_back(not_applicable(std::string(id), "no module exports " + std::string(spec::kTlsSymbol) + " (TCTX-01)"));
    }
    return out;
  }
  return check_variable(*facts.module);
}

namespace {

// The symbol, its type and size, and the relocations that reach it.
class VariableProbe final : public SessionProbe {
 public:
  VariableProbe() : SessionProbe("variable", requirement_range(1, 5), kSampledSession) {}
  std::vector<Finding> judge(const conform::SessionEvidence&, const ThreadContextFacts& f) const override {
    return judge_variable(f);
  }
};

}  // namespace

std::unique_ptr<conform::Probe> make_variable_probe() { return std::make_unique<VariableProbe>(); }

}  // namespace tracecorr::otel_thread_context

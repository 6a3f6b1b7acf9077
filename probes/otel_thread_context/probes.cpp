// The suite's probe catalogue, one per area (<area>_probe.cpp: each picks the
// session its rules need and hands its plain evidence to the judges beside it).
#include "probes.hpp"

namespace tracecorr::otel_thread_context {

std::vector<std::string> requirement_range(int first, int last, int except) {
  std::vector<std::string> ids;
  for (int i = first; i <= last; ++i)
    if (i != except) ids.push_back("TCTX-" + std::string(i < 10 ? "0" : "") + std::to_string(i));
  return ids;
}

std::vector<std::unique_ptr<conform::Probe>> make_probes() {
  std::vector<std::unique_ptr<conform::Probe>> probes;
  probes.push_back(make_variable_probe());
  probes.push_back(make_reference_probe());
  probes.push_back(make_record_probe());
  probes.push_back(make_detach_probe());
  probes.push_back(make_publication_probe());
  return probes;
}

}  // namespace tracecorr::otel_thread_context

// ELF: the library's name, its two exported symbols and the TLS dialect,
// read with libelf from the file the target actually mapped (elastic_v1/checks.hpp,
// shared with inspect).
#include <elf.h>

#include "judging.hpp"
#include "tracecorr/conform/probe.hpp"
#include "probes.hpp"
#include "scenarios.hpp"
#include "elastic_v1/checks.hpp"
#include "elastic_v1/registry.hpp"

namespace tracecorr::elastic_v1 {

using namespace tracecorr::conform;
namespace {

class ElfProbe final : public Probe {
 public:
  std::string name() const override { return "elf"; }
  std::vector<std::string> requirements() const override { return {"ELF-01", "ELF-02", "ELF-03", "ELF-04"}; }
  std::vector<std::string> sessions() const override { return {kEnabledSession}; }

  std::vector<Finding> judge(const SessionSet& sessions) const override {
    const SessionEvidence* s = sessions.find(kEnabledSession);
    if (!s) return not_run(requirements());
    if (!s->library) {
      // An agent that runs (exports spans) with the feature enabled and maps no
      // library breaks ELF-01. One that shows nothing at all (no span either:
      // not an agent, or lost by the launch) gives nothing to judge, and the
      // run's gate errs on it (exit 3). A misnamed library carrying the
      // symbols is found, and fails ELF-01 on its name.
      std::string why = s->discovery_error ? s->discovery_error->message() : "no agent library found";
      if (s->spans.empty())
        return {not_applicable("ELF-01", "published nothing: no library with the protocol's name or symbols was found, "
                                         "and no span was exported: " + why),
                not_applicable("ELF-02", "no library to examine"), not_applicable("ELF-03", "no library to examine"),
                not_applicable("ELF-04", "no library to examine")};
      return {violated("ELF-01", "no library with the protocol's name or symbols was found, while the agent exported " +
                                     std::to_string(s->spans.size()) + " span(s) with the feature enabled: " + why),
              not_applicable("ELF-02", "no library to examine"), not_applicable("ELF-03", "no library to examine"),
              not_applicable("ELF-04", "no library to examine")};
    }
    return check_library(*s->library);
  }
};

}  // namespace

std::unique_ptr<Probe> make_elf_probe() { return std::make_unique<ElfProbe>(); }

}  // namespace tracecorr::elastic_v1

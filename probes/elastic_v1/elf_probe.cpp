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
      // Nothing of the protocol at all (a library misnamed but carrying its
      // symbols is found, and fails ELF-01 on its name): nothing to judge, and
      // the run's gate errs on a run that judged nothing (exit 3).
      std::string why = s->discovery_error ? s->discovery_error->message() : "no agent library found";
      return {not_applicable("ELF-01", "published nothing: no library with the protocol's name or symbols was found: " + why),
              not_applicable("ELF-02", "no library to examine"), not_applicable("ELF-03", "no library to examine"),
              not_applicable("ELF-04", "no library to examine")};
    }
    return check_library(*s->library);
  }
};

}  // namespace

std::unique_ptr<Probe> make_elf_probe() { return std::make_unique<ElfProbe>(); }

}  // namespace tracecorr::elastic_v1

// ELF: the library's name, its two exported symbols and the TLS dialect,
// read with libelf from the file the target actually mapped.
#include <elf.h>

#include "judging.hpp"
#include "tracecorr/conform/probe.hpp"
#include "probes.hpp"
#include "scenarios.hpp"
#include "elastic_v1/registry.hpp"

namespace tracecorr::elastic_v1 {

using namespace tracecorr::conform;
namespace {

std::string describe_symbol(const elf::Symbol& s) {
  return "type " + elf::describe_type(s.type) + ", binding " +
         (s.binding == STB_GLOBAL ? "GLOBAL" : s.binding == STB_WEAK ? "WEAK" : "LOCAL") + ", visibility " +
         (s.visibility == STV_DEFAULT ? "DEFAULT" : "not DEFAULT") + ", size " + std::to_string(s.size) +
         (s.defined() ? "" : ", undefined (imported, not defined here)");
}

Finding judge_symbol(const std::string& id, const std::optional<elf::Symbol>& sym, std::string_view name,
                     unsigned wanted_type) {
  std::string expected = "type " + elf::describe_type(wanted_type) + ", binding GLOBAL, visibility DEFAULT, size " +
                         std::to_string(elastic_v1::spec::kPointerSize);
  if (!sym) return violated(id, std::string(name) + " is not among the library's dynamic symbols",
                            {text_evidence(std::string(name), expected, "absent")});
  bool ok = sym->defined() && sym->type == wanted_type && sym->binding == STB_GLOBAL &&
            sym->visibility == STV_DEFAULT && sym->size == elastic_v1::spec::kPointerSize;
  auto actual = describe_symbol(*sym);
  if (ok) return met(id, 1, std::string(name) + ": " + actual);
  return violated(id, std::string(name) + " is exported as " + actual, {text_evidence(std::string(name), expected, actual)});
}

class ElfProbe final : public Probe {
 public:
  std::string name() const override { return "elf"; }
  std::vector<std::string> requirements() const override { return {"ELF-01", "ELF-02", "ELF-03", "ELF-04"}; }
  std::vector<std::string> sessions() const override { return {kEnabledSession}; }

  std::vector<Finding> judge(const SessionSet& sessions) const override {
    const SessionEvidence* s = sessions.find(kEnabledSession);
    if (!s) return not_run(requirements());
    if (!s->library) {
      std::string why = s->discovery_error ? s->discovery_error->message() : "no agent library found";
      return {violated("ELF-01", "no library with the protocol's name or symbols was found: " + why),
              not_applicable("ELF-02", "no library to examine"), not_applicable("ELF-03", "no library to examine"),
              not_applicable("ELF-04", "no library to examine")};
    }
    const auto& lib = *s->library;
    std::vector<Finding> out;
    if (lib.name_matches)
      out.push_back(met("ELF-01", 1, lib.path + " matches the name pattern"));
    else
      out.push_back(violated("ELF-01",
                             lib.path + " defines the protocol's symbols, but its name does not match, so profilers "
                                        "will never look at it",
                             {text_evidence("library path", std::string(elastic_v1::spec::kLibraryNameRegex), lib.path)}));
    out.push_back(judge_symbol("ELF-02", lib.elf.process_symbol, elastic_v1::spec::kProcessStorageSymbol, STT_OBJECT));
    out.push_back(judge_symbol("ELF-03", lib.elf.tls, elastic_v1::spec::kTlsSymbol, STT_TLS));
    const auto& access = lib.elf.tls_access;
    std::string relocs;
    for (const auto& r : access.relocations) relocs += (relocs.empty() ? "" : ", ") + r;
    if (access.dialect == elf::TlsDialect::Descriptor && !access.mixed)
      out.push_back(met("ELF-04", 1, "TLS descriptor relocation: " + relocs));
    else
      out.push_back(violated("ELF-04",
                             std::string("the TLS variable is accessed with the ") + elf::to_string(access.dialect) +
                                 " dialect" + (access.mixed ? " (descriptor and traditional relocations both present)" : "") +
                                 "; profilers need a TLS descriptor (compile with " +
                                 (lib.elf.machine == elf::Machine::AArch64 ? "-mtls-dialect=desc" : "-mtls-dialect=gnu2") + ")",
                             {text_evidence("relocations for " + std::string(elastic_v1::spec::kTlsSymbol), "a TLSDESC relocation only",
                                            relocs.empty() ? "none" : relocs)}));
    return out;
  }
};

}  // namespace

std::unique_ptr<Probe> make_elf_probe() { return std::make_unique<ElfProbe>(); }

}  // namespace tracecorr::elastic_v1

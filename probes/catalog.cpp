// The probe catalogue, in registry area order.
#include "probes.hpp"

namespace tracecorr::conform {

const std::vector<std::unique_ptr<Probe>>& all_probes() {
  static const auto probes = [] {
    std::vector<std::unique_ptr<Probe>> p;
    p.push_back(make_elf_probe());
    p.push_back(make_proc_probe());
    p.push_back(make_tls_probe());
    p.push_back(make_sock_probe());
    p.push_back(make_msg_probe());
    p.push_back(make_attr_probe());
    p.push_back(make_defer_probe());
    p.push_back(make_conf_probe());
    p.push_back(make_host_probe());
    return p;
  }();
  return probes;
}

const Probe* probe_for(const std::string& requirement) {
  for (const auto& p : all_probes())
    for (const auto& id : p->requirements())
      if (id == requirement) return p.get();
  return nullptr;
}

std::vector<Finding> not_run(const std::vector<std::string>& ids, const std::string& why) {
  std::vector<Finding> out;
  for (const auto& id : ids)
    out.push_back(not_applicable(id, why.empty() ? "the session this requirement needs did not run (attach mode or --only)" : why));
  return out;
}

}  // namespace tracecorr::conform

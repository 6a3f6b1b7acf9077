#include "tracecorr/inspector.hpp"

#include <cstdio>

#include "tracecorr/text.hpp"
#include "tracecorr/plugin_registry.hpp"

namespace tracecorr {
namespace {

PluginRegistry<Inspector>& registry() {
  static PluginRegistry<Inspector> r;
  return r;
}

}  // namespace

void register_inspector(const Inspector& inspector) { registry().add(inspector); }

std::vector<const Inspector*> inspectors() { return registry().all(); }

std::string findings_text(const std::vector<Finding>& findings) {
  std::string out = "findings\n";
  if (findings.empty()) out += "  none\n";
  for (const auto& f : findings) {
    char head[32];
    std::snprintf(head, sizeof head, "  %-8s %-6s ", f.requirement.c_str(), level_of(f).c_str());
    out += head + tracecorr::printable_text(finding_message(f)) + "\n";
  }
  return out;
}

}  // namespace tracecorr

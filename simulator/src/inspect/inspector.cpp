#include "tracecorr/inspector.hpp"

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

}  // namespace tracecorr

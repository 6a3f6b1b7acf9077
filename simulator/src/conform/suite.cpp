#include "tracecorr/conform/suite.hpp"

#include "tracecorr/plugin_registry.hpp"

namespace tracecorr::conform {
namespace {

PluginRegistry<Suite>& registry() {
  static PluginRegistry<Suite> r;
  return r;
}

}  // namespace

bool ScenarioOptions::judges(std::string_view id_or_area) const {
  if (judged.empty()) return true;
  for (const auto& id : judged)
    if (id == id_or_area || (id.size() > id_or_area.size() && id.compare(0, id_or_area.size(), id_or_area) == 0 &&
                             id[id_or_area.size()] == '-'))
      return true;
  return false;
}

std::string ScenarioOptions::setting(const std::string& name, const std::string& fallback) const {
  auto it = settings.find(name);
  return it == settings.end() ? fallback : it->second;
}

void register_suite(const Suite& suite) { registry().add(suite); }

std::vector<const Suite*> suites() { return registry().all(); }

const Suite* find_suite(std::string_view protocol) {
  for (const auto* s : suites())
    if (s->protocol().id == protocol) return s;
  return nullptr;
}

const Suite* suite_of_requirement(std::string_view requirement) {
  for (const auto* s : suites())
    for (const auto& r : s->protocol().requirements)
      if (r.id == requirement) return s;
  return nullptr;
}

const Probe* probe_for(std::string_view requirement) {
  const Suite* suite = suite_of_requirement(requirement);
  if (!suite) return nullptr;
  for (const auto& p : suite->probes())
    for (const auto& id : p->requirements())
      if (id == requirement) return p.get();
  return nullptr;
}

}  // namespace tracecorr::conform

#include "tracecorr/conform/suite.hpp"

#include <mutex>

namespace tracecorr::conform {
namespace {

struct SuiteRegistry {
  std::mutex mutex;
  std::vector<const Suite*> suites;
};

SuiteRegistry& registry() {
  static SuiteRegistry r;  // function-local: packages register from other translation units' initialisers
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

void register_suite(const Suite& suite) {
  auto& r = registry();
  std::lock_guard lock(r.mutex);
  for (const auto* known : r.suites)
    if (known == &suite) return;
  r.suites.push_back(&suite);
}

std::vector<const Suite*> suites() {
  auto& r = registry();
  std::lock_guard lock(r.mutex);
  return r.suites;
}

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

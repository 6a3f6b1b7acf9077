#include "tracecorr/inspector.hpp"

#include <mutex>

namespace tracecorr {
namespace {

struct InspectorRegistry {
  std::mutex mutex;
  std::vector<const Inspector*> inspectors;
};

InspectorRegistry& registry() {
  static InspectorRegistry r;  // function-local: packages register from other translation units' initialisers
  return r;
}

}  // namespace

void register_inspector(const Inspector& inspector) {
  auto& r = registry();
  std::lock_guard lock(r.mutex);
  for (const auto* known : r.inspectors)
    if (known == &inspector) return;
  r.inspectors.push_back(&inspector);
}

std::vector<const Inspector*> inspectors() {
  auto& r = registry();
  std::lock_guard lock(r.mutex);
  return r.inspectors;
}

}  // namespace tracecorr

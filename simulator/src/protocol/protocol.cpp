#include "tracecorr/protocol.hpp"

#include <cstdio>
#include <cstdlib>
#include <string>

#include "tracecorr/plugin_registry.hpp"

namespace tracecorr {
namespace {

PluginRegistry<ProtocolSpec>& registry() {
  static PluginRegistry<ProtocolSpec> r;
  return r;
}

}  // namespace

void register_protocol(const ProtocolSpec& spec) {
  // Packages register before main, one at a time: the check and the add need no common lock.
  for (const ProtocolSpec* known : registry().all()) {
    if (known == &spec) return;
    for (const Requirement& mine : spec.requirements)
      for (const Requirement& theirs : known->requirements)
        if (mine.id == theirs.id) {
          std::fprintf(stderr, "tracecorr: requirement %s is both %s's and %s's; requirement IDs must be unique\n",
                       std::string(mine.id).c_str(), std::string(spec.id).c_str(), std::string(known->id).c_str());
          std::abort();
        }
  }
  registry().add(spec);
}

std::vector<const ProtocolSpec*> protocols() { return registry().all(); }

const ProtocolSpec* find_protocol(std::string_view id) {
  for (const ProtocolSpec* p : protocols())
    if (p->id == id) return p;
  return nullptr;
}

const ProtocolSpec* protocol_of_requirement(std::string_view id) {
  for (const ProtocolSpec* p : protocols())
    for (const Requirement& r : p->requirements)
      if (r.id == id) return p;
  return nullptr;
}

const Requirement* find_requirement(std::string_view id) {
  for (const ProtocolSpec* p : protocols())
    for (const Requirement& r : p->requirements)
      if (r.id == id) return &r;
  return nullptr;
}

std::size_t requirement_rank(std::string_view id) {
  std::size_t rank = 0;
  for (const ProtocolSpec* p : protocols())
    for (const Requirement& r : p->requirements) {
      if (r.id == id) return rank;
      ++rank;
    }
  return rank;  // unknown ids last
}

std::vector<const Requirement*> all_requirements() {
  std::vector<const Requirement*> out;
  for (const ProtocolSpec* p : protocols())
    for (const Requirement& r : p->requirements) out.push_back(&r);
  return out;
}

}  // namespace tracecorr

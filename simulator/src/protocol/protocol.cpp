#include "tracecorr/protocol.hpp"

#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>

namespace tracecorr {
namespace {

struct Registry {
  std::mutex mutex;
  std::vector<const ProtocolSpec*> specs;
};

// Function-local: packages register from static initialisers in other
// translation units, whose order relative to ours is unspecified.
Registry& registry() {
  static Registry r;
  return r;
}

}  // namespace

void register_protocol(const ProtocolSpec& spec) {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  for (const ProtocolSpec* known : r.specs) {
    if (known == &spec) return;
    for (const Requirement& mine : spec.requirements)
      for (const Requirement& theirs : known->requirements)
        if (mine.id == theirs.id) {
          std::fprintf(stderr, "tracecorr: requirement %s is both %s's and %s's; requirement IDs must be unique\n",
                       std::string(mine.id).c_str(), std::string(spec.id).c_str(), std::string(known->id).c_str());
          std::abort();
        }
  }
  r.specs.push_back(&spec);
}

std::vector<const ProtocolSpec*> protocols() {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  return r.specs;
}

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

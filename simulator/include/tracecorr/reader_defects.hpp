// Reader defects (`tracecorr agent --reader-defect NAME`): for conformance
// kill matrices, the reference reader made to break one reader requirement,
// so that the judge of that requirement is proven able to fail (a probe that
// cannot detect its violation is a defect).
//
// Each plug-in declares the defects its reading code can show
// (SampledProtocol::reader_defects, AgentHook::reader_defects,
// declare_reader_defects for rules the engine's reading implements), each with the
// rule it breaks; the host agent hands the names in force to every part of
// its run (AgentRun::defects, SampledProtocol::locate), and each package turns
// them into its own reading policy (a small struct, conforming by default),
// never a global. Only the host agent is ever given one: `inspect` and
// conform's writer side read with the default, conforming policy.
#pragma once

#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace tracecorr {

// One defect a plug-in can put into its reading code.
struct ReaderDefect {
  std::string name;   // "ignores-valid": the option's value
  std::string rules;  // the ID of the requirement it breaks, as its package spells it
  std::string help;   // what the defective reader does
};

// The defects in force for one run (empty: the conforming reader).
class ReaderDefects {
 public:
  ReaderDefects() = default;
  explicit ReaderDefects(std::set<std::string> names) : names_(std::move(names)) {}
  bool has(std::string_view name) const { return names_.count(std::string(name)) != 0; }
  bool empty() const { return names_.empty(); }
  const std::set<std::string>& names() const { return names_; }

 private:
  std::set<std::string> names_;
};

// For a package whose rules the engine's own reading code implements (the
// process context's, read by the host agent's loop): its defects by name,
// with its rule IDs (`defects` must outlive the program: a static). The
// engine's reading code knows each by its name only.
void declare_reader_defects(const std::vector<ReaderDefect>& defects);

// Every defect the registered plug-ins declare (the host agent's sampled
// protocols and hooks), one entry per name: a name two protocols declare
// (each breaks its own rule) has both rules, joined.
std::vector<ReaderDefect> known_reader_defects();

}  // namespace tracecorr

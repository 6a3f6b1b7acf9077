// The Node.js suite's probes, one per area (<area> in probes.cpp: the
// module's variable, the reference data, each thread's struct, walk and
// record, the records against the exported spans (spans.cpp), and the rules
// this suite does not judge yet), and the suite itself (suite.cpp).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "evidence.hpp"
#include "tracecorr/conform/suite.hpp"

namespace tracecorr::otel_nodejs_thread_context {

// A probe over one session's facts (the engine's SessionFactsProbe): not
// applicable, every requirement, when that session did not run or found no
// writer; a requirement its judge leaves out is not applicable too, with why.
class SessionProbe : public conform::SessionFactsProbe<NodeFacts> {
 public:
  using SessionFactsProbe::SessionFactsProbe;

 protected:
  std::vector<Finding> judge(const conform::SessionEvidence& session, const NodeFacts& facts) const final;
  // The writer was found.
  virtual std::vector<Finding> judge_writer(const conform::SessionEvidence& session, const NodeFacts& facts) const = 0;
};

// One factory per area (<area>_probe.cpp).
std::unique_ptr<conform::Probe> make_variable_probe();   // NJS-01..03
std::unique_ptr<conform::Probe> make_reference_probe();  // NJS-09, 10
std::unique_ptr<conform::Probe> make_thread_probe();     // NJS-06, 07, 08, 11, 12, 19
std::unique_ptr<conform::Probe> make_spans_probe();      // NJS-13, 14, 15
std::unique_ptr<conform::Probe> make_gate_probe();       // NJS-04, 05
std::unique_ptr<conform::Probe> make_elsewhere_probe();  // NJS-16, 17 (through NJS-08), 18

std::vector<std::unique_ptr<conform::Probe>> make_probes();
const conform::Suite& suite();

// `found` with a NotApplicable (`why`) for each of `ids` it does not judge.
std::vector<Finding> completed(std::vector<Finding> found, const std::vector<std::string>& ids, const std::string& why);

// The judges, on plain evidence (tests call them with facts built by hand).
std::vector<Finding> judge_variable(const NodeFacts& facts);   // NJS-01..03
std::vector<Finding> judge_reference(const NodeFacts& facts);  // NJS-09, 10
std::vector<Finding> judge_threads(const NodeFacts& facts);    // NJS-06, 07, 08, 11, 12, 19
// What one store did to a thread's struct, from the state before to the state after.
enum class GateStep {
  kOpening,               // the gate opened over every other field set
  kOpenedOverUnset,       // the gate opened with a field still unset (NJS-04)
  kFilledBehindOpenGate,  // an unset field was set while the gate was open (NJS-04)
  kChangedBehindOpenGate, // a set field changed while the gate was open (NJS-05)
  kClosing,               // the gate closed, nothing else changed
  kOther,                 // anything else (fields set or cleared behind a closed gate)
};
GateStep gate_step(const DiscoveryStruct& before, const DiscoveryStruct& after);
// NJS-04, 05: the watched session's stores into each thread's struct (gate_probe.cpp).
std::vector<Finding> judge_gate(const NodeFacts& facts);
// NJS-13, 14, 15: the looks' records against the spans the writer exported (spans_probe.cpp).
std::vector<Finding> judge_spans(const conform::SessionEvidence& session, const NodeFacts& facts);

}  // namespace tracecorr::otel_nodejs_thread_context

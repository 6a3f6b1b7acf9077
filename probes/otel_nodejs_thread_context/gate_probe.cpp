// gate (NJS-04, 05): the order of the stores into each thread's struct, from
// the watched session's hardware watchpoints (every store, in the order the
// thread made it, the 32 bytes read before the thread ran on).
//
// At a thread's start the gate (`cped_slot`) is stored last: the store that
// opens it leaves every other field set (NJS-04); no field is filled in
// behind an open gate. At its end the gate is cleared first: no field that
// was set changes while the gate is still open (NJS-05). A thread armed with
// its gate already open (it started before the watch could locate its
// struct) shows no opening: only its end is judged. A pass counts the
// openings (closings) seen whole.
#include <map>

#include "otel_nodejs_thread_context/registry.hpp"
#include "probes.hpp"
#include "tracecorr/memory.hpp"

namespace tracecorr::otel_nodejs_thread_context {
namespace {

struct State {
  const watch::SlotPublication* store;
  DiscoveryStruct fields;
};

// Every field but the gate set: what a reader needs behind an open gate.
bool populated(const DiscoveryStruct& d) {
  return d.als_handle != 0 && d.undefined_addr != 0 && d.record_slot_offset != 0;
}

bool others_equal(const DiscoveryStruct& a, const DiscoveryStruct& b) {
  return a.als_handle == b.als_handle && a.als_identity_hash == b.als_identity_hash &&
         a.record_slot_offset == b.record_slot_offset && a.undefined_addr == b.undefined_addr &&
         a.reserved_zero() == b.reserved_zero();
}

// A field set before (non-zero) that this store changed.
bool changed_a_set_field(const DiscoveryStruct& before, const DiscoveryStruct& after) {
  return (before.als_handle != 0 && after.als_handle != before.als_handle) ||
         (before.als_identity_hash != 0 && after.als_identity_hash != before.als_identity_hash) ||
         (before.record_slot_offset != 0 && after.record_slot_offset != before.record_slot_offset) ||
         (before.undefined_addr != 0 && after.undefined_addr != before.undefined_addr);
}

std::string fields_text(const DiscoveryStruct& d) {
  return "cped_slot " + hex_address(d.cped_slot) + ", als_handle " + hex_address(d.als_handle) + ", record_slot_offset " +
         std::to_string(d.record_slot_offset) + ", undefined_addr " + hex_address(d.undefined_addr);
}

Evidence state_evidence(const char* label, const std::string& expected, const DiscoveryStruct& d) {
  return text_evidence(label, expected, fields_text(d));
}

// Each thread's states in order (a state per store, the first as armed).
std::map<pid_t, std::vector<State>> states_by_thread(const watch::SlotWatchReport& report, pid_t judged) {
  std::map<pid_t, std::vector<State>> out;
  for (const auto& p : report.publications) {
    if (p.pid != judged || p.slot_bytes.size() != spec::kDiscoverySize) continue;
    auto d = decode_discovery_struct(p.slot_bytes);
    if (d) out[p.tid].push_back({&p, *d});
  }
  return out;
}

struct GateTally {
  std::size_t openings = 0, closings = 0;
  std::optional<Finding> opening_broken, closing_broken;
};

void judge_thread(pid_t tid, const std::vector<State>& states, GateTally& t) {
  const std::string who = "thread " + std::to_string(tid) + ": ";
  for (std::size_t i = 1; i < states.size(); ++i) {
    const auto& after = states[i].fields;
    switch (gate_step(states[i - 1].fields, after)) {
      case GateStep::kOpening: ++t.openings; break;
      case GateStep::kClosing: ++t.closings; break;
      case GateStep::kOpenedOverUnset:
        if (!t.opening_broken)
          t.opening_broken = violated("NJS-04", who + "the store that opened the gate left fields unset",
                                      {state_evidence("the struct after the gate's store", "every field set", after)});
        break;
      case GateStep::kFilledBehindOpenGate:
        if (!t.opening_broken)
          t.opening_broken = violated("NJS-04", who + "a field was filled in behind an open gate (the gate is to be stored "
                                                      "last)",
                                      {state_evidence("the struct after that store", "the gate stored after every field", after)});
        break;
      case GateStep::kChangedBehindOpenGate:
        if (!t.closing_broken)
          t.closing_broken = violated("NJS-05", who + "a field changed while the gate was still open (the gate is to be "
                                                      "cleared first)",
                                      {state_evidence("the struct after that store", "the gate 0 before any field changes",
                                                      after)});
        break;
      case GateStep::kOther: break;
    }
  }
}

std::string watched_text(const watch::SlotWatchReport& r) { return "the watch: " + r.describe(); }

}  // namespace

GateStep gate_step(const DiscoveryStruct& before, const DiscoveryStruct& after) {
  const bool was_open = before.gate_open(), is_open = after.gate_open();
  if (!was_open && is_open) return populated(after) ? GateStep::kOpening : GateStep::kOpenedOverUnset;
  if (was_open && !is_open) return others_equal(before, after) ? GateStep::kClosing : GateStep::kOther;
  if (was_open && !others_equal(before, after))
    return changed_a_set_field(before, after) ? GateStep::kChangedBehindOpenGate : GateStep::kFilledBehindOpenGate;
  return GateStep::kOther;
}

std::vector<Finding> judge_gate(const NodeFacts& f) {
  auto both = [](const std::string& why) {
    return std::vector<Finding>{not_applicable("NJS-04", why), not_applicable("NJS-05", why)};
  };
  if (!f.gate_watch) return both(f.gate_watch_unavailable.empty() ? "no watch ran" : f.gate_watch_unavailable);
  GateTally t;
  for (const auto& [tid, states] : states_by_thread(*f.gate_watch, f.judged_pid)) judge_thread(tid, states, t);
  std::vector<Finding> out;
  const std::string seen = watched_text(*f.gate_watch);
  if (t.opening_broken) out.push_back(*t.opening_broken);
  else if (t.openings)
    out.push_back(met("NJS-04", t.openings,
                      std::to_string(t.openings) + " gate opening(s) seen store by store, each after every other field (" +
                          seen + ")"));
  else out.push_back(not_applicable("NJS-04", "no thread's gate opened while its struct was watched (" + seen + ")"));
  if (t.closing_broken) out.push_back(*t.closing_broken);
  else if (t.closings)
    out.push_back(met("NJS-05", t.closings,
                      std::to_string(t.closings) +
                          " gate closing(s) seen store by store, each before any other field changed (" + seen + ")"));
  else out.push_back(not_applicable("NJS-05", "no thread's gate closed while its struct was watched (" + seen + ")"));
  return out;
}

namespace {

class GateProbe final : public SessionProbe {
 public:
  GateProbe() : SessionProbe("gate", {"NJS-04", "NJS-05"}, kWatchedSession) {}
  std::vector<Finding> judge_writer(const conform::SessionEvidence&, const NodeFacts& f) const override {
    return judge_gate(f);
  }
};

}  // namespace

std::unique_ptr<conform::Probe> make_gate_probe() { return std::make_unique<GateProbe>(); }

}  // namespace tracecorr::otel_nodejs_thread_context

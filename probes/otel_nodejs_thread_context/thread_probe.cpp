// thread (NJS-06, 07, 08, 11, 12, 19): each thread's struct, walk and record
// as every look found them (inspect's checks), tallied over the looks.
#include "probes.hpp"

#include <algorithm>
#include <functional>
#include <map>

#include "otel_nodejs_thread_context/checks.hpp"
#include "otel_nodejs_thread_context/registry.hpp"

namespace tracecorr::otel_nodejs_thread_context {

namespace {

// One rule over every look of every thread: violated at the first look that
// broke it (with how many did), met on the looks it applied to.
Finding tally(const NodeFacts& f, const std::string& id, const std::function<bool(const ThreadLookFacts&)>& applies,
              const std::string& none_applied) {
  std::size_t applied = 0, broke = 0;
  const Finding* first = nullptr;
  for (const auto& t : f.threads) {
    auto it = std::find_if(t.violations.begin(), t.violations.end(), [&](const Finding& v) { return v.requirement == id; });
    if (it != t.violations.end()) {
      ++broke;
      if (!first) first = &*it;
    }
    if (applies(t) || it != t.violations.end()) ++applied;
  }
  if (first) {
    Finding out = *first;
    out.reason += " (" + std::to_string(broke) + " of " + std::to_string(applied) + " thread looks it applied to)";
    return out;
  }
  if (applied == 0) return not_applicable(id, none_applied + " in " + std::to_string(f.looks) + " looks");
  return met(id, applied, std::to_string(applied) + " thread looks over " + std::to_string(f.looks) + " looks");
}

// NJS-19, a permission: a thread seen with its gate closed between two looks
// that found it open.
Finding gate_reopened(const NodeFacts& f) {
  std::map<pid_t, std::vector<bool>> gates;  // by thread, in look order
  for (const auto& t : f.threads)
    if (t.end) gates[t.tid].push_back(t.gate_open);
  std::size_t seen = 0;
  for (const auto& [tid, g] : gates)
    for (std::size_t i = 1; i + 1 < g.size(); ++i)
      if (g[i - 1] && !g[i] && std::find(g.begin() + static_cast<long>(i), g.end(), true) != g.end()) {
        ++seen;
        break;
      }
  if (seen == 0) return not_applicable("NJS-19", "no thread was seen closing its gate and opening it again");
  return met("NJS-19", seen, std::to_string(seen) + " thread(s) closed their gate for a while and opened it again");
}

}  // namespace

std::vector<Finding> judge_threads(const NodeFacts& f) {
  const std::string no_gate = "no thread's gate was open";
  std::vector<Finding> out;
  out.push_back(tally(f, "NJS-06", [](const auto& t) { return t.judges_struct(); }, no_gate));
  out.push_back(tally(f, "NJS-07", [](const auto& t) { return t.judges_hash(); },
                      "no walk reached the ALS key's bucket chain (no context was attached)"));
  out.push_back(tally(f, "NJS-08", [](const auto& t) { return t.judges_slot(); }, "no walk reached a wrapper"));
  out.push_back(tally(f, "NJS-11", [](const auto& t) { return t.judges_record(); }, "no walk reached a record"));
  out.push_back(tally(f, "NJS-12", [](const auto& t) { return t.judges_record(); }, "no walk reached a record"));
  out.push_back(gate_reopened(f));
  return out;
}


namespace {

class ThreadProbe final : public SessionProbe {
 public:
  ThreadProbe() : SessionProbe("thread", {"NJS-06", "NJS-07", "NJS-08", "NJS-11", "NJS-12", "NJS-19"}, kLookedSession) {}
  std::vector<Finding> judge_writer(const conform::SessionEvidence&, const NodeFacts& f) const override {
    return judge_threads(f);
  }
};

}  // namespace

std::unique_ptr<conform::Probe> make_thread_probe() { return std::make_unique<ThreadProbe>(); }

}  // namespace tracecorr::otel_nodejs_thread_context

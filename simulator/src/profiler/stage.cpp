// Reading a stage writer's journal into its timeline (stage.hpp). The
// journal is the writer's word, written by a process that may be a mutant:
// every member is checked for its type, nothing is trusted to be there.
#include "tracecorr/profiler/stage.hpp"

#include <algorithm>

#include <nlohmann/json.hpp>

namespace tracecorr::profiler::stage {
namespace {

using nlohmann::json;

class Reader {
 public:
  Reader(MemberTruth& truth, const std::vector<std::string>& kept) : truth_(truth), kept_(kept) {}

  void line(std::string_view text, std::size_t number) {
    if (text.empty()) return;
    if (text.size() > kMaxLineBytes) return problem(number, "longer than " + std::to_string(kMaxLineBytes) + " bytes");
    auto j = json::parse(text, nullptr, false);
    if (j.is_discarded() || !j.is_object()) return problem(number, "not a JSON object");
    const auto event = j.value("event", std::string());
    if (event == "state") return state(j, number);
    if (event == "context") return context(j, number);
    if (event == "hazards") return hazards(j);
    if (event == "config" || event == "thread") pid(j);
    if (std::find(kept_.begin(), kept_.end(), event) != kept_.end()) keep(event, text);
  }

 private:
  void problem(std::size_t number, std::string what) {
    if (truth_.problems.size() < kMaxProblems) truth_.problems.push_back("line " + std::to_string(number) + ": " + what);
  }

  static std::optional<std::uint64_t> unsigned_member(const json& j, const char* name) {
    auto it = j.find(name);
    if (it == j.end() || !it->is_number_unsigned()) return std::nullopt;
    return it->get<std::uint64_t>();
  }

  static std::vector<Attribute> attributes(const json& j) {
    std::vector<Attribute> out;
    if (!j.is_array()) return out;
    for (const auto& pair : j)
      if (pair.is_array() && pair.size() == 2 && pair[0].is_string() && pair[1].is_string())
        out.emplace_back(pair[0].get<std::string>(), pair[1].get<std::string>());
    return out;
  }

  static std::vector<std::string> strings(const json& j) {
    std::vector<std::string> out;
    if (!j.is_array()) return out;
    for (const auto& s : j)
      if (s.is_string()) out.push_back(s.get<std::string>());
    return out;
  }

  template <std::size_t N>
  static bool ids(const json& j, const char* name, std::array<std::uint8_t, N>& out) {
    auto it = j.find(name);
    return it != j.end() && it->is_string() && from_hex(it->get<std::string>(), out);
  }

  void pid(const json& j) {
    auto it = j.find("pid");
    if (truth_.pid == 0 && it != j.end() && it->is_number_integer()) truth_.pid = it->get<std::int64_t>();
  }

  void state(const json& j, std::size_t number) {
    auto begun = unsigned_member(j, "t0");
    auto done = unsigned_member(j, "t");
    auto tid = j.find("tid");
    if (!begun || !done || *begun > *done || tid == j.end() || !tid->is_number_integer())
      return problem(number, "a state without t0 <= t and a tid");
    if (truth_.states.size() >= kMaxStates) return problem(number, "more than " + std::to_string(kMaxStates) + " states");
    ThreadState s;
    s.pid = j.contains("pid") && j["pid"].is_number_integer() ? j["pid"].get<std::int64_t>() : truth_.pid;
    s.tid = tid->get<std::int64_t>();
    s.begun_ns = *begun;
    s.done_ns = *done;
    s.hazard = j.contains("hazard") && j["hazard"].is_string() ? j["hazard"].get<std::string>() : "";
    if (!context_of(j, s, number)) return;
    if (j.contains("poison") && j["poison"].is_object()) {
      std::pair<TraceId, SpanId> p{};
      if (ids(j["poison"], "trace_id", p.first) && ids(j["poison"], "span_id", p.second)) s.poison = p;
    }
    if (j.contains("poison_values")) s.poison_values = strings(j["poison_values"]);
    if (truth_.pid == 0) truth_.pid = s.pid;
    truth_.states.push_back(std::move(s));
  }

  bool context_of(const json& j, ThreadState& s, std::size_t number) {
    auto it = j.find("context");
    if (it == j.end() || it->is_null()) return true;
    Context c;
    if (!it->is_object() || !ids(*it, "trace_id", c.trace_id) || !ids(*it, "span_id", c.span_id)) {
      problem(number, "a state whose context has no 32-hex trace_id and 16-hex span_id");
      return false;
    }
    if (auto flags = unsigned_member(*it, "trace_flags"); flags && *flags <= 0xff)
      c.trace_flags = static_cast<std::uint8_t>(*flags);
    if (it->contains("attributes")) c.attributes = attributes((*it)["attributes"]);
    s.context = std::move(c);
    return true;
  }

  void context(const json& j, std::size_t number) {
    auto begun = unsigned_member(j, "t0");
    auto done = unsigned_member(j, "t");
    if (!begun || !done || *begun > *done) return problem(number, "a context without t0 <= t");
    ContextPublication c;
    c.begun_ns = *begun;
    c.done_ns = *done;
    c.published_at = unsigned_member(j, "published_at").value_or(0);
    if (j.contains("resource")) c.resource = attributes(j["resource"]);
    if (j.contains("poison_values")) c.poison_values = strings(j["poison_values"]);
    if (truth_.contexts.size() < kMaxStates) truth_.contexts.push_back(std::move(c));
  }

  void hazards(const json& j) {
    if (j.contains("done")) truth_.hazards_shown = strings(j["done"]);
    if (j.contains("skipped")) truth_.hazards_skipped = strings(j["skipped"]);
  }

  void keep(const std::string& event, std::string_view text) {
    auto& list = truth_.other_events[event];
    if (list.size() < kMaxOtherEvents) list.emplace_back(text);
  }

  MemberTruth& truth_;
  const std::vector<std::string>& kept_;
};

// A state may be seen from when its change began until the next change of
// its thread is complete (a reader can meet the old one's bytes meanwhile).
void close_states(std::vector<ThreadState>& states) {
  std::stable_sort(states.begin(), states.end(), [](const ThreadState& a, const ThreadState& b) {
    return a.tid != b.tid ? a.tid < b.tid : a.done_ns < b.done_ns;
  });
  for (std::size_t i = 0; i + 1 < states.size(); ++i)
    if (states[i].tid == states[i + 1].tid) states[i].until_ns = std::max(states[i + 1].done_ns, states[i].done_ns);
}

void close_contexts(std::vector<ContextPublication>& contexts) {
  std::stable_sort(contexts.begin(), contexts.end(),
                   [](const ContextPublication& a, const ContextPublication& b) { return a.done_ns < b.done_ns; });
  for (std::size_t i = 0; i + 1 < contexts.size(); ++i)
    contexts[i].until_ns = std::max(contexts[i + 1].done_ns, contexts[i].done_ns);
}

}  // namespace

MemberTruth read_journal(std::string_view text, const std::vector<std::string>& other_events_kept) {
  MemberTruth truth;
  Reader reader(truth, other_events_kept);
  std::size_t number = 0;
  while (!text.empty()) {
    auto end = text.find('\n');
    if (end == std::string_view::npos) break;  // a line being written when the journal was read
    reader.line(text.substr(0, end), ++number);
    text.remove_prefix(end + 1);
  }
  close_states(truth.states);
  close_contexts(truth.contexts);
  return truth;
}

std::vector<const ThreadState*> states_around(const MemberTruth& truth, std::int64_t tid, std::uint64_t from_ns,
                                              std::uint64_t to_ns) {
  std::vector<const ThreadState*> out;
  auto first = std::lower_bound(truth.states.begin(), truth.states.end(), tid,
                                [](const ThreadState& s, std::int64_t t) { return s.tid < t; });
  for (auto it = first; it != truth.states.end() && it->tid == tid; ++it)
    if (it->begun_ns <= to_ns && it->until_ns >= from_ns) out.push_back(&*it);
  return out;
}

}  // namespace tracecorr::profiler::stage

// MSG-01 and MSG-08, from the reference APM agent's journal of every datagram
// it received (`message` events, in arrival order) and the samples the
// profiler exported: a profiler's first message to a process is its
// registration; a correlation's count is samples it took, so the counts a
// trace received never add up to more than the samples of it the profiler
// exported (fewer is allowed: datagrams are dropped on a full queue).
#include <map>

#include <nlohmann/json.hpp>

#include "reader.hpp"

namespace tracecorr::elastic_v1::reader {
namespace {

using profiler::MemberEvidence;
using profiler::ReaderEvidence;

struct Message {
  std::string kind;  // "registration", "correlation", ...
  std::string trace_id;
  std::uint64_t count = 0;
};

std::vector<Message> messages(const MemberEvidence& m) {
  std::vector<Message> out;
  auto it = m.truth.other_events.find("message");
  if (it == m.truth.other_events.end()) return out;
  for (const auto& line : it->second) {
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (!j.is_object()) continue;
    Message msg;
    msg.kind = j.value("kind", std::string());
    if (j.contains("trace_id") && j["trace_id"].is_string()) msg.trace_id = j["trace_id"].get<std::string>();
    if (j.contains("count") && j["count"].is_number_unsigned()) msg.count = j["count"].get<std::uint64_t>();
    out.push_back(std::move(msg));
  }
  return out;
}

Finding judge_registration_first(const ReaderEvidence& e) {
  std::size_t talked_to = 0;
  std::vector<std::string> first_not_registration;
  for (const auto* m : elastic_members(e)) {
    auto msgs = messages(*m);
    if (msgs.empty()) continue;
    ++talked_to;
    if (msgs.front().kind != "registration")
      first_not_registration.push_back(m->member.name + " (first: " + msgs.front().kind + ")");
  }
  if (talked_to == 0)
    return not_applicable("MSG-01", "the profiler sent no datagram to the stage's Elastic agents (it may correlate "
                                    "through OTLP profiles only)");
  if (!first_not_registration.empty())
    return violated("MSG-01", "the first message to " + first_not_registration.front() + " was not the registration");
  return met("MSG-01", talked_to, "the first message to each of " + std::to_string(talked_to) +
                                      " Elastic agents was the registration");
}

Finding judge_counts(const ReaderEvidence& e) {
  std::size_t correlations = 0;
  std::vector<Evidence> shown;
  for (const auto* m : elastic_members(e)) {
    std::map<std::string, std::uint64_t> counted, sampled;
    for (const auto& msg : messages(*m))
      if (msg.kind == "correlation") {
        ++correlations;
        counted[msg.trace_id] += msg.count;
        if (msg.count == 0) shown.push_back(Evidence{m->member.name, "count >= 1", "a correlation with count 0", {}, {}});
      }
    for (const auto* s : m->samples)
      if (s->link) ++sampled[to_hex(s->link->trace_id)];
    for (const auto& [trace, n] : counted)
      if (n > sampled[trace] && shown.size() < profiler::kExamplesKept)
        shown.push_back(Evidence{m->member.name + ": trace " + trace,
                                 "at most the " + std::to_string(sampled[trace]) + " samples exported with it",
                                 "counts adding up to " + std::to_string(n), {}, {}});
  }
  if (correlations == 0)
    return not_applicable("MSG-08", "the profiler sent no correlation message to the stage's Elastic agents");
  if (!shown.empty()) return violated("MSG-08", "correlation counts are not the samples the profiler took", shown);
  return met("MSG-08", correlations, std::to_string(correlations) + " correlations, none counting more samples than "
                                                                      "the profiler exported for its trace");
}

class MsgProbe : public profiler::ReaderProbe {
 public:
  std::string name() const override { return "msg"; }
  std::vector<std::string> requirements() const override { return {"MSG-01", "MSG-08"}; }
  std::vector<Finding> judge(const ReaderEvidence& e) const override {
    return {judge_registration_first(e), judge_counts(e)};
  }
};

}  // namespace

std::unique_ptr<profiler::ReaderProbe> make_msg_probe() { return std::make_unique<MsgProbe>(); }

}  // namespace tracecorr::elastic_v1::reader

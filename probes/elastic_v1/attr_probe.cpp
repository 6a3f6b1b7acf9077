// ATTR: the stack trace ids the agent attaches to its transactions, compared
// with exactly what tracecorr sent for each of them.
#include <algorithm>
#include <map>

#include "judging.hpp"
#include "probes.hpp"
#include "scenarios.hpp"
#include "elastic_v1/registry.hpp"

namespace tracecorr::elastic_v1 {

using namespace tracecorr::conform;
namespace {

class AttrProbe final : public Probe {
 public:
  std::string name() const override { return "attr"; }
  std::vector<std::string> requirements() const override {
    return {"ATTR-01", "ATTR-02", "ATTR-03", "ATTR-04", "ATTR-05"};
  }
  std::vector<std::string> sessions() const override { return {kEnabledSession}; }

  std::vector<Finding> judge(const SessionSet& sessions) const override {
    const SessionEvidence* s = sessions.find(kEnabledSession);
    if (!s) return not_run(requirements());
    SpanIndex spans(*s);
    if (spans.spans().empty()) return not_run(requirements(), "no spans were received");
    auto sent = facts(*s).sent_messages;

    // The transactions tracecorr sent correlations for, with the first send.
    std::map<std::pair<TraceId, SpanId>, std::chrono::system_clock::time_point> targeted;
    for (const auto& m : sent)
      if (m.transaction && m.expected_count && *m.expected_count > 0) {
        auto [it, inserted] = targeted.try_emplace(*m.transaction, read_by(m));
        it->second = std::min(it->second, read_by(m));
      }

    std::vector<Finding> out;
    // ATTR-01
    {
      std::size_t exported = 0, with = 0, early = 0;
      const otlp::ReceivedSpan* example = nullptr;
      for (const auto& [key, first_sent] : targeted) {
        const auto* t = spans.transaction(key.first, key.second);
        if (!t) continue;
        if (t->attribute(elastic_v1::spec::kAttributeName)) {
          ++exported, ++with;
        } else if (forwarded_before_taken_up(spans, *t, first_sent)) {
          ++early;  // forwarded before the agent could have read the first message
        } else {
          ++exported;
          if (!example) example = t;
        }
      }
      std::string also = early ? " (" + std::to_string(early) + " exported before the first message could be read, not judged)" : "";
      if (!exported)
        out.push_back(not_applicable("ATTR-01", "none of the transactions correlations were sent for was exported" + also));
      else if (with == exported)
        out.push_back(met("ATTR-01", with, std::to_string(with) + " correlated transactions carry the attribute" + also));
      else
        out.push_back(violated("ATTR-01", std::to_string(exported - with) + " of " + std::to_string(exported) +
                                              " correlated transactions lack " + std::string(elastic_v1::spec::kAttributeName) + also,
                               {span_evidence(*example, "attribute present", "absent")}));
    }
    // ATTR-02, ATTR-03, ATTR-05: every span carrying the attribute.
    std::size_t carrying = 0;
    std::optional<Finding> type_bad, encoding_bad, placement_bad;
    for (const auto& sp : spans.spans()) {
      auto ids = attribute_ids(sp);
      if (!ids.present) continue;
      ++carrying;
      if (!ids.string_array && !type_bad)
        type_bad = violated("ATTR-02", "the attribute is a " + ids.type_name + ", not a string array",
                            {span_evidence(sp, "string-array", ids.type_name + ": " +
                                                                   sp.attribute(elastic_v1::spec::kAttributeName)->to_display())});
      if (ids.string_array && !ids.problems.empty() && !encoding_bad)
        encoding_bad = violated("ATTR-03", ids.problems.front(),
                                {span_evidence(sp, "base64url without padding, 22 characters", ids.problems.front())});
      if (spans.is_child(sp) && !placement_bad)
        placement_bad = violated("ATTR-05", "a child span carries the attribute",
                                 {span_evidence(sp, "only transactions (local roots) carry it", "child span carries it")});
    }
    std::string none = "no exported span carried the attribute";
    out.push_back(type_bad ? *type_bad
                           : carrying ? met("ATTR-02", carrying, std::to_string(carrying) + " attributes, all string arrays")
                                      : not_applicable("ATTR-02", none));
    out.push_back(encoding_bad ? *encoding_bad
                               : carrying ? met("ATTR-03", carrying, "every element is canonical unpadded base64url of 16 bytes")
                                          : not_applicable("ATTR-03", none));
    // ATTR-04: exact multisets, for the correlation traffic.
    if (type_bad) {
      out.push_back(not_applicable("ATTR-04", "the attribute is not a string array (ATTR-02), so counts cannot be read"));
    } else {
      auto check = check_counts(sent, spans, [](const SentMessage& m) { return m.requirement == "ATTR-04"; });
      if (!check.mismatches.empty()) {
        std::vector<Evidence> ev;
        for (std::size_t i = 0; i < check.mismatches.size() && i < kMaxExamples; ++i)
          ev.push_back(mismatch_evidence(check.mismatches[i]));
        out.push_back(violated("ATTR-04", std::to_string(check.mismatches.size()) + " of " +
                                              std::to_string(check.checked) + " stack ids appear a wrong number of times",
                               ev));
      } else if (check.checked) {
        out.push_back(met("ATTR-04", check.checked, std::to_string(check.checked) + " (transaction, stack id) counts exactly as sent"));
      } else {
        out.push_back(not_applicable("ATTR-04", "no correlated transaction was exported"));
      }
    }
    out.push_back(placement_bad ? *placement_bad
                                : carrying ? met("ATTR-05", carrying, std::to_string(carrying) + " spans carry the attribute, all transactions")
                                           : not_applicable("ATTR-05", none));
    return out;
  }
};

}  // namespace

std::unique_ptr<Probe> make_attr_probe() { return std::make_unique<AttrProbe>(); }

}  // namespace tracecorr::elastic_v1

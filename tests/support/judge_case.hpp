// The table of a protocol's judge tests (tests/unit/<package>/judges_test.cpp):
// a case builds sessions' evidence by hand, the probe covering its
// requirement judges it, and check() compares the finding with what the case
// expects. One harness for every package, so their judge tables read alike.
#pragma once

#include <gtest/gtest.h>

#include <cstddef>
#include <functional>
#include <ostream>
#include <string>
#include <string_view>

#include "tracecorr/conform/probe.hpp"
#include "tracecorr/conform/suite.hpp"
#include "tracecorr/finding.hpp"

namespace tracecorr::judge_tests {

using Outcome = Finding::Outcome;

struct JudgeCase {
  std::string name;         // the test's own name
  std::string requirement;  // the verdict checked
  std::function<void(conform::SessionSet&)> build;
  Outcome expected;
  std::string reason_has;         // a phrase the reason must contain ("" : any)
  std::string evidence_has = "";  // a phrase some evidence item's label, expected or actual must contain ("" : any)
  std::size_t evidence_count = 0;  // a Met's count, when the case states it (0: any above 0)
};

inline void PrintTo(const JudgeCase& c, std::ostream* os) { *os << c.requirement << " " << c.name; }

// How an outcome reads in a failure message: the verdict it becomes.
inline std::string_view outcome_name(Outcome o) { return to_string(conform::verdict_of(o)); }

inline Finding judge_one(const JudgeCase& c) {
  conform::SessionSet set;
  c.build(set);
  const conform::Probe* probe = conform::probe_for(c.requirement);
  if (!probe) {
    ADD_FAILURE() << "no probe covers " << c.requirement;
    return {};
  }
  for (auto& f : probe->judge(set))
    if (f.requirement == c.requirement) return f;
  ADD_FAILURE() << probe->name() << " gave no finding for " << c.requirement;
  return {};
}

inline void check(const JudgeCase& c) {
  const Finding f = judge_one(c);
  EXPECT_EQ(outcome_name(f.outcome), outcome_name(c.expected)) << c.requirement << ": " << f.reason;
  if (!c.reason_has.empty()) EXPECT_NE(f.reason.find(c.reason_has), std::string::npos) << c.requirement << ": " << f.reason;
  if (!c.evidence_has.empty()) {
    std::string shown;
    for (const auto& e : f.evidence) shown += e.label + " | " + e.expected + " | " + e.actual + "\n";
    EXPECT_NE(shown.find(c.evidence_has), std::string::npos) << c.requirement << " evidence:\n" << shown;
  }
  // No pass without evidence: a Met always states what it rests on.
  if (f.outcome == Outcome::Met) EXPECT_GT(f.evidence_count, 0u) << c.requirement << ": " << f.reason;
  if (c.evidence_count) EXPECT_EQ(f.evidence_count, c.evidence_count) << c.requirement << ": " << f.reason;
}

inline std::string case_name(const testing::TestParamInfo<JudgeCase>& info) { return info.param.name; }

}  // namespace tracecorr::judge_tests

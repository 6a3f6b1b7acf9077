// conform::starved_of_events: which findings a starved session turns from a
// skip into an error, and what that error says.
#include <gtest/gtest.h>

#include "tracecorr/conform/probe.hpp"

namespace tracecorr::conform {
namespace {

SessionSet one_session(std::optional<RunQueueWait> wait) {
  SessionEvidence e;
  e.name = "watched";
  e.run_queue_wait = wait;
  SessionSet set;
  set.add(std::move(e));
  return set;
}

const RunQueueWait kStarved{2, 7000, 3600, 6000};  // 2 threads, 7 s of 12 s waited: more than half
const RunQueueWait kBusy{2, 5000, 2600, 6000};     // 5 s of 12 s: not starved

TEST(StarvedOfEvents, AnUnseenEventInAStarvedSessionIsAnErrorWithTheFigures) {
  auto reason = starved_of_events(not_seen("X-01", "no span ended"), one_session(kStarved), {"watched"});
  ASSERT_TRUE(reason.has_value());
  EXPECT_EQ(reason->rfind("inconclusive: no span ended, in session watched whose target was starved of CPU (", 0), 0u)
      << *reason;
  EXPECT_NE(reason->find(kStarved.describe()), std::string::npos) << *reason;
}

TEST(StarvedOfEvents, LeavesEveryOtherFindingAndSessionAlone) {
  // Not applicable by the target's design: a skip whatever the machine did.
  EXPECT_EQ(starved_of_events(not_applicable("X-01", "no socket"), one_session(kStarved), {"watched"}), std::nullopt);
  // A session that was busy but had its CPU half the time or more.
  EXPECT_EQ(starved_of_events(not_seen("X-01", "no span ended"), one_session(kBusy), {"watched"}), std::nullopt);
  EXPECT_EQ(starved_of_events(not_seen("X-01", "no span ended"), one_session(std::nullopt), {"watched"}), std::nullopt);
  // A starved session the requirement does not read, or none that ran.
  EXPECT_EQ(starved_of_events(not_seen("X-01", "no span ended"), one_session(kStarved), {"sampled"}), std::nullopt);
  // A verdict reached despite it.
  Finding judged = met("X-01", 3, "three windows");
  judged.for_want_of_events = true;
  EXPECT_EQ(starved_of_events(judged, one_session(kStarved), {"watched"}), std::nullopt);
}

}  // namespace
}  // namespace tracecorr::conform

// Elastic v1's reading of the engine's error kinds, and the shared checks'
// wording as inspect shows it (the judge suites cover their verdicts).
#include <gtest/gtest.h>

#include "elastic_v1/checks.hpp"
#include "elastic_v1/inspect/inspect.hpp"

namespace tracecorr::elastic_v1 {
namespace {

TEST(ElasticChecks, SocketErrorKindsMapToTheirRequirements) {
  EXPECT_EQ(requirement_of_socket_error(make_error(ErrorKind::kNotFound, "x")), "SOCK-02");
  EXPECT_EQ(requirement_of_socket_error(make_error(ErrorKind::kNotHeld, "x")), "SOCK-02");
  EXPECT_EQ(requirement_of_socket_error(make_error(ErrorKind::kNotASocket, "x")), "SOCK-01");
  EXPECT_EQ(requirement_of_socket_error(make_error(ErrorKind::kWrongType, "x")), "SOCK-01");
  // Not the target's fault: no requirement.
  EXPECT_EQ(requirement_of_socket_error(make_error(ErrorKind::kPermission, "x")), "");
  EXPECT_EQ(requirement_of_socket_error(make_error(ErrorKind::kGone, "x")), "");
}

TEST(ElasticChecks, ASocketNobodyConnectedToIsJudgedByItsFactsAlone) {
  SocketFacts f;
  f.is_socket = true;
  f.datagram = true;
  f.bound_by_target = true;
  f.target_nonblocking = true;
  f.owner = f.target_uid = 1000;
  f.mode = 0755;
  auto findings = check_socket("/tmp/agent.sock", f, std::nullopt, std::nullopt);
  ASSERT_EQ(findings.size(), 4u);
  for (const auto& x : findings) EXPECT_EQ(x.outcome, Finding::Outcome::Met) << x.requirement << ": " << x.reason;
  // A connection that failed is SOCK-02's, with the error in its evidence.
  findings = check_socket("/tmp/agent.sock", f, make_error(ErrorKind::kNotHeld, "refused"), false);
  EXPECT_EQ(findings[1].requirement, "SOCK-02");
  EXPECT_EQ(findings[1].outcome, Finding::Outcome::Violated);
  EXPECT_NE(finding_message(findings[1]).find("connect: refused"), std::string::npos) << finding_message(findings[1]);
}

}  // namespace
}  // namespace tracecorr::elastic_v1

// A RunResult covering every verdict, for the report and gate tests.
#pragma once

#include "tracecorr/conform/result.hpp"

namespace tracecorr::conform::test_support {

inline RequirementResult result(std::string_view id, Verdict verdict, std::string reason = "") {
  auto r = make_result(id);
  if (!r.ok()) throw std::runtime_error(r.error().message());
  r->verdict = verdict;
  r->reason = reason.empty() ? std::string(to_string(verdict)) : std::move(reason);
  r->probe = "test-probe";
  r->duration = std::chrono::milliseconds(12);
  r->repeat_command = shell_join({"tracecorr", "conform", "--only", std::string(id), "--", "java", "-jar", "app jar"});
  return std::move(*r);
}

// Every verdict, and evidence with hostile bytes: control characters, invalid
// UTF-8, XML metacharacters, a NUL and a terminal escape.
inline RunResult sample_run() {
  RunResult run;
  run.tool_version = "0.1.0-test";
  run.target = {"java -jar 'app jar'", 4242, "x86_64"};
  run.protocol = "elastic-v1";
  run.personality = "java";
  run.started = std::chrono::system_clock::time_point(std::chrono::seconds(1'700'000'000));
  run.finished = run.started + std::chrono::seconds(3);
  run.results.push_back(result("ELF-01", Verdict::Pass));
  RequirementResult attr = result("ATTR-02", Verdict::Fail, "the stack trace ids attribute is a string, not a string-array");
  attr.evidence.push_back({"span 00f067aa0ba902b7 attribute", "string-array", "string \"YLQguzhR2dR6y5M9vnA5mw\"", {}, {}});
  std::string hostile = std::string("<tag attr=\"x\">&amp; \x01\x02\x1b[31m red \xff\xfe nul:", 36) + std::string(1, '\0') + " ]]> end";
  attr.evidence.push_back({hostile, hostile, hostile,
                           {0x01, 0x00, 0x01, 0x00, 0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 0xa3, 0xce, 0x92,
                            0x9d, 0x0e, 0x0e, 0x47, 0x36, 0xff},
                           {{0, 2, "message_type", "1 (correlation)"}, {2, 2, "minor_version", "1"},
                            {4, 16, "trace_id", "4bf92f3577b34da6a3ce929d0e0e4736"}, {20, 1, hostile, hostile}}});
  run.results.push_back(std::move(attr));
  run.results.push_back(result("MSG-05", Verdict::Warn, "unknown message type 0xffff stopped correlation"));
  run.results.push_back(result("CONF-02", Verdict::Skip, "the agent does not support auto mode"));
  run.results.push_back(result("TLS-07", Verdict::Error, "ptrace: Operation not permitted"));
  run.counters = {{"messages_sent", 17}, {"spans_received", 5}};
  return run;
}

}  // namespace tracecorr::conform::test_support

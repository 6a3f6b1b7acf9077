// OTEP 4719's own stage members: the thread-context writer (model tlsdesc)
// held on one busy span, its process context damaged once published
// (--context-damage) in the ways a reader must not take (PCTXR-02: a wrong
// signature, an unsupported version) or must survive (PCTXR-05: payload_size
// past any bound). The republished, poisoned contexts of PCTXR-01/03/04 are
// the thread-context stage's members' own.
#include <filesystem>

#include "reader.hpp"

namespace tracecorr::otel_process_context::reader {
namespace {

struct Damage {
  const char* option;  // --context-damage
  const char* hazard;  // what its journal announces
  const char* layout;
};

constexpr Damage kDamages[] = {
    {"signature", "context_wrong_signature", "process context signature \"OTEL-CTX\" (a foreign or broken writer)"},
    {"version", "context_wrong_version", "process context version 3 (not one this reader knows)"},
    {"payload-size", "context_invalid", "process context payload_size past any reader's bound, after a good one"},
};

}  // namespace

std::vector<profiler::StageMember> stage(const profiler::StageOptions& o, const std::string& protocol) {
  const std::string program = o.fixtures_dir + "/otel_thread_context/reference/tlsdesc/otel-tctx-writer";
  if (!std::filesystem::exists(program)) return {};
  std::vector<profiler::StageMember> members;
  for (const auto& d : kDamages) {
    profiler::StageMember m;
    m.name = std::string("otel-process-context/damaged-") + d.option;
    m.protocol = protocol;
    m.layout = d.layout;
    // One busy thread holding one span (a CPU-time sampler sees it); no key
    // appended and no republication, so the damage stays. Its own service
    // name: a sample carrying it read this member's damaged context.
    m.argv = {program,        "--state-journal", "--hold",     "--threads",      "1",
              "--busy-percent", "100",            "--no-export", "--duration",     "600",
              "--service-name", std::string("tracecorr-damaged-") + d.option, "--context-damage", d.option};
    m.hazards = {d.hazard};
    members.push_back(std::move(m));
  }
  return members;
}

}  // namespace tracecorr::otel_process_context::reader

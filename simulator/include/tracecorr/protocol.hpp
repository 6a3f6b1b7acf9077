// What the engine knows of a protocol: its name, its requirements and its
// registry as written. Nothing here names a protocol.
//
// A protocol package (simulator/protocols/<name>/) fills a ProtocolSpec from
// its generated registry and registers it; the program's list of packages is
// TRACECORR_PROTOCOLS in the top CMakeLists.txt, which generates the one file
// that registers them before main (builtin_protocols.cpp). Requirement IDs are
// unique across the registered protocols: register_protocol refuses a clash.
#pragma once
#include <cstddef>
#include <span>
#include <string_view>
#include <vector>

namespace tracecorr {

enum class Level { Must, Should, May };
// Which side of a protocol a requirement binds: the one inside the
// application, which `tracecorr conform` judges (Elastic's agent, a process
// context's writer), or the one outside that reads it (a profiler). Each
// registry names its two roles in its own words (Requirement::role_name).
enum class Role { Agent, Profiler };

struct Requirement {
  std::string_view id;  // "AREA-NN", stable
  Level level;
  std::string_view area;
  Role role;
  std::string_view role_name;  // the registry's word for the role: "agent", "writer", "reader", ...
  std::string_view source;  // the section of the protocol's text it comes from
  std::string_view summary;
  // Judged by what tracecorr sends to the target (messages, requests), not by
  // watching it: not judged when nothing may be sent (--observe-only).
  bool judged_by_sending = false;
  // Its verdict rests on when the target exports (spans): an exporter that
  // batches coarser than the delays judged makes it an error, not a verdict.
  bool timed_by_export = false;
};

// The registry's own spelling: "MUST", "SHOULD", "MAY"; the engine's side
// names "agent", "profiler" (reports use them).
constexpr std::string_view to_string(Level level) {
  switch (level) {
    case Level::Must: return "MUST";
    case Level::Should: return "SHOULD";
    case Level::May: return "MAY";
  }
  return {};
}
constexpr std::string_view to_string(Role role) {
  switch (role) {
    case Role::Agent: return "agent";
    case Role::Profiler: return "profiler";
  }
  return {};
}

struct ProtocolSpec {
  std::string_view id;     // "elastic-v1": the package's folder name with '-' for '_'
  std::string_view title;  // for people
  std::span<const Requirement> requirements;
  std::string_view registry_json;  // the registry file as written (tracecorr list --json)
};

// Adds a protocol (idempotent for the same spec). A requirement ID another
// registered protocol already uses is a programming error: it aborts with
// both names, at start-up, before anything could be judged under the wrong one.
void register_protocol(const ProtocolSpec& spec);

// The registered protocols, in registration order.
std::vector<const ProtocolSpec*> protocols();
const ProtocolSpec* find_protocol(std::string_view id);

// The requirement with this id in any registered protocol, or nullptr: for
// ids that arrive as data (expectations files, reports read back).
const Requirement* find_requirement(std::string_view id);
const ProtocolSpec* protocol_of_requirement(std::string_view id);

// Registry order across protocols (protocol by protocol, then as listed):
// the order every report uses. Unknown ids sort last.
std::size_t requirement_rank(std::string_view id);

// Every requirement of every registered protocol, in requirement_rank order.
std::vector<const Requirement*> all_requirements();

}  // namespace tracecorr

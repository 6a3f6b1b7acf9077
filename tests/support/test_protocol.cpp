// The engine tests' protocol (test_protocol.hpp): its registry as a package's
// spec/<id>.json would write it, read into a ProtocolSpec and registered
// before main. Compiled into the engine's unit-test binary only.
#include "test_protocol.hpp"

#include <deque>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace tracecorr::test_support {
namespace {

constexpr const char* kRegistryJson = R"json({
  "protocol": "tracecorr-test",
  "protocol_version": 1,
  "areas": {
    "LOAD": "the library: its name and symbols",
    "SLOT": "the per-thread slot",
    "WIRE": "messages",
    "NAME": "the span attribute",
    "OPTS": "options",
    "PEER": "the peer's identity"
  },
  "requirements": [
    {"id": "LOAD-01", "level": "MUST", "area": "LOAD", "role": "agent", "source": "Loading", "summary": "The library's file name matches the registered pattern."},
    {"id": "LOAD-02", "level": "MUST", "area": "LOAD", "role": "agent", "source": "Loading", "summary": "The library exports the process symbol."},
    {"id": "LOAD-03", "level": "MUST", "area": "LOAD", "role": "agent", "source": "Loading", "summary": "The library's TLS symbol is thread-local."},
    {"id": "SLOT-07", "level": "SHOULD", "area": "SLOT", "role": "agent", "source": "Thread Slot", "summary": "The slot is at a static offset from the thread pointer."},
    {"id": "WIRE-05", "level": "SHOULD", "area": "WIRE", "role": "agent", "source": "Messages", "summary": "Messages of an unknown type are ignored."},
    {"id": "NAME-02", "level": "MUST", "area": "NAME", "role": "agent", "source": "Span Attribute", "summary": "The type of `test.stack_ids` is string-array."},
    {"id": "OPTS-02", "level": "MAY", "area": "OPTS", "role": "agent", "source": "Options", "summary": "An automatic mode may be offered."},
    {"id": "PEER-01", "level": "MUST", "area": "PEER", "role": "agent", "source": "Peers", "summary": "A registration's peer id is adopted."},
    {"id": "PEER-02", "level": "SHOULD", "area": "PEER", "role": "agent", "source": "Peers", "summary": "The agent's own peer id is kept, with a warning."}
  ]
})json";

Level level_of(const std::string& text) {
  if (text == "MUST") return Level::Must;
  if (text == "SHOULD") return Level::Should;
  if (text == "MAY") return Level::May;
  throw std::invalid_argument("test registry: level " + text);
}

}  // namespace

const ProtocolSpec& test_protocol() {
  // Requirements hold string_views: their text lives as long as the program.
  static std::deque<std::string> text;
  static const std::vector<Requirement> requirements = [] {
    std::vector<Requirement> out;
    auto keep = [](const nlohmann::json& value) -> std::string_view { return text.emplace_back(value.get<std::string>()); };
    const auto registry = nlohmann::json::parse(kRegistryJson);
    for (const auto& r : registry.at("requirements"))
      out.push_back({keep(r.at("id")), level_of(r.at("level").get<std::string>()), keep(r.at("area")),
                     r.at("role") == "agent" ? Role::Agent : Role::Profiler, keep(r.at("role")), keep(r.at("source")),
                     keep(r.at("summary"))});
    return out;
  }();
  static const ProtocolSpec spec{kTestProtocolId, kTestProtocolTitle, requirements, kRegistryJson};
  return spec;
}

namespace {
[[maybe_unused]] const bool registered = [] {
  register_protocol(test_protocol());
  return true;
}();
}  // namespace

}  // namespace tracecorr::test_support

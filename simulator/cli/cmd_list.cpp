// tracecorr list: the requirement registry, with the probe that checks each one.
#include <nlohmann/json.hpp>

#include <cstdio>

#include "command.hpp"
#include "tracecorr/spec_registry.hpp"

namespace tracecorr::cli {
namespace {

const char* level_name(spec::Level l) {
  switch (l) {
    case spec::Level::Must: return "MUST";
    case spec::Level::Should: return "SHOULD";
    case spec::Level::May: return "MAY";
  }
  return "?";
}

int run_list(bool json) {
  if (json) {
    auto registry = nlohmann::json::parse(spec::kRegistryJson);
    std::puts(registry.dump(2).c_str());
    return kExitOk;
  }
  for (const auto& r : spec::kRequirements) {
    std::printf("%-8s %-6s %-8s %.*s\n", std::string(r.id).c_str(), level_name(r.level),
                r.role == spec::Role::Agent ? "agent" : "profiler", static_cast<int>(r.summary.size()),
                r.summary.data());
  }
  return kExitOk;
}

RegisterCommand list_command("list", "Print the requirement registry (IDs, levels, words, layouts)",
                             [](CLI::App& app) -> std::function<int()> {
                               auto json = std::make_shared<bool>(false);
                               app.add_flag("--json", *json, "Print the whole machine-readable registry");
                               return [json] { return run_list(*json); };
                             });

}  // namespace
}  // namespace tracecorr::cli

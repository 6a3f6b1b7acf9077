// tracecorr list: the requirement registry, with the probe that checks each one.
#include <nlohmann/json.hpp>

#include <cstdio>
#include <string>
#include <string_view>

#include "command.hpp"
#include "probes/probe.hpp"
#include "elastic_v1/registry.hpp"

namespace tracecorr::cli {
namespace {

// The probe's file, e.g. probes/msg_probe.cpp, or "-" (a profiler-side
// requirement tracecorr's own host agent follows, not something to judge).
std::string probe_name(std::string_view id) {
  const auto* probe = conform::probe_for(std::string(id));
  return probe ? probe->name() : "-";
}

int run_list(bool json) {
  if (json) {
    auto registry = nlohmann::json::parse(elastic_v1::spec::kRegistryJson);
    for (auto& r : registry["requirements"]) {
      const auto* probe = conform::probe_for(r["id"].get<std::string>());
      r["probe"] = probe ? nlohmann::json("probes/" + probe->name() + "_probe.cpp") : nlohmann::json(nullptr);
    }
    std::puts(registry.dump(2).c_str());
    return kExitOk;
  }
  std::printf("%-8s %-6s %-8s %-6s %s\n", "ID", "LEVEL", "ROLE", "PROBE", "REQUIREMENT");
  for (const auto& r : elastic_v1::spec::kRequirements) {
    std::printf("%-8s %-6s %-8s %-6s %.*s\n", std::string(r.id).c_str(), std::string(to_string(r.level)).c_str(),
                std::string(to_string(r.role)).c_str(), probe_name(r.id).c_str(),
                static_cast<int>(r.summary.size()), r.summary.data());
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

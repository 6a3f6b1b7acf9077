// tracecorr list: the requirement registry, with the probe that checks each one.
#include <nlohmann/json.hpp>

#include <cstdio>
#include <string>
#include <string_view>

#include "command.hpp"
#include "tracecorr/conform/suite.hpp"
#include "tracecorr/protocol.hpp"
#ifdef TRACECORR_HAVE_PROFILES
#include "tracecorr/profiler/reader_suite.hpp"
#endif

namespace tracecorr::cli {
namespace {

// The probe judging a requirement: a writer-side probe (its name and file,
// probes/elastic_v1/msg_probe.cpp) or a reader-side one (profiler mode:
// probes/<protocol>/reader/<name>_probe.cpp); empty when none.
struct ProbeRef {
  std::string name;
  std::string subfolder;  // "" or "reader/"
  const conform::Probe* writer = nullptr;
};

ProbeRef probe_of(std::string_view id) {
  if (const auto* probe = conform::probe_for(id)) return {probe->name(), "", probe};
#ifdef TRACECORR_HAVE_PROFILES
  if (const auto* probe = profiler::reader_probe_for(id)) return {probe->name(), "reader/", nullptr};
#endif
  return {};
}

std::string probe_name(std::string_view id) {
  auto probe = probe_of(id);
  return probe.name.empty() ? "-" : probe.name;
}

std::string probe_file(const ProtocolSpec& protocol, const ProbeRef& probe) {
  std::string folder(protocol.id);
  for (auto& c : folder)
    if (c == '-') c = '_';
  return "probes/" + folder + "/" + probe.subfolder + probe.name + "_probe.cpp";
}

// The registry as written, each requirement with the file of the probe that
// checks it and the sessions (launches) `conform --only ID` runs for it.
nlohmann::json registry_with_probes(const ProtocolSpec& protocol) {
  auto registry = nlohmann::json::parse(protocol.registry_json);
  for (auto& r : registry["requirements"]) {
    const auto id = r["id"].get<std::string>();
    const auto probe = probe_of(id);
    r["probe"] = probe.name.empty() ? nlohmann::json(nullptr) : nlohmann::json(probe_file(protocol, probe));
    r["sessions"] = probe.writer ? nlohmann::json(probe.writer->sessions_for(id)) : nlohmann::json::array();
  }
  return registry;
}

int run_list(bool json, const std::string& only_protocol) {
  std::vector<const ProtocolSpec*> chosen;
  for (const auto* p : protocols())
    if (only_protocol.empty() || p->id == only_protocol) chosen.push_back(p);
  if (chosen.empty()) {
    std::fprintf(stderr, "tracecorr list: unknown protocol \"%s\"\n", only_protocol.c_str());
    return kExitUsage;
  }
  if (json) {
    // One protocol: its registry (what the Python package and tools read).
    // Several: an array of them.
    nlohmann::json out = nlohmann::json::array();
    for (const auto* p : chosen) out.push_back(registry_with_probes(*p));
    std::puts((chosen.size() == 1 ? out.front() : out).dump(2).c_str());
    return kExitOk;
  }
  for (const auto* p : chosen) {
    if (chosen.size() > 1) std::printf("%s (%s)\n", std::string(p->title).c_str(), std::string(p->id).c_str());
    std::printf("%-8s %-6s %-8s %-6s %s\n", "ID", "LEVEL", "ROLE", "PROBE", "REQUIREMENT");
    for (const auto& r : p->requirements)
      std::printf("%-8s %-6s %-8s %-6s %.*s\n", std::string(r.id).c_str(), std::string(to_string(r.level)).c_str(),
                  std::string(r.role_name).c_str(), probe_name(r.id).c_str(),
                  static_cast<int>(r.summary.size()), r.summary.data());
  }
  return kExitOk;
}

RegisterCommand list_command("list", "Print the requirement registries (IDs, levels, words, layouts)",
                             [](CLI::App& app) -> std::function<int()> {
                               auto json = std::make_shared<bool>(false);
                               auto protocol = std::make_shared<std::string>();
                               app.add_flag("--json", *json, "Print the whole machine-readable registry");
                               app.add_option("--protocol", *protocol, "Only this protocol's requirements");
                               return [json, protocol] { return run_list(*json, *protocol); };
                             });

}  // namespace
}  // namespace tracecorr::cli

#include <cstdio>
#include <exception>
#include <map>
#include <string>

#include "command.hpp"

namespace tracecorr::cli {
std::vector<CommandInfo>& registered_commands() {
  static std::vector<CommandInfo> commands;
  return commands;
}
}  // namespace tracecorr::cli

int main(int argc, char** argv) {
  using namespace tracecorr::cli;
  using namespace tracecorr;  // exit codes
  CLI::App app{"tracecorr: conformance kit and host-agent simulator for profiler-to-tracer trace correlation"};
  app.require_subcommand(1);
  // "tracecorr X.Y.Z", the first line help2man reads for the man pages' version.
  app.set_version_flag("--version", std::string("tracecorr ") + TRACECORR_VERSION);
  std::map<CLI::App*, std::function<int()>> runners;
  for (auto& c : registered_commands()) {
    CLI::App* sub = app.add_subcommand(c.name, c.description);
    runners[sub] = c.setup(*sub);
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return kExitUsage;
  }
  for (auto* sub : app.get_subcommands()) {
    try {
      return runners.at(sub)();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "tracecorr %s: %s\n", sub->get_name().c_str(), e.what());
      return kExitEnvironment;
    }
  }
  return kExitUsage;
}

// Each `tracecorr` subcommand lives in its own cmd_*.cpp and registers itself
// here, so adding a command touches no other file.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <string>
#include <vector>

#include "tracecorr/exit_code.hpp"

namespace tracecorr::cli {


// Declares the subcommand's options on `app` and returns what runs it.
using CommandSetup = std::function<std::function<int()>(CLI::App& app)>;

struct CommandInfo {
  std::string name;
  std::string description;
  CommandSetup setup;
};

std::vector<CommandInfo>& registered_commands();

struct RegisterCommand {
  RegisterCommand(std::string name, std::string description, CommandSetup setup) {
    registered_commands().push_back({std::move(name), std::move(description), std::move(setup)});
  }
};

}  // namespace tracecorr::cli

// tracecorr conform: judges an agent against every requirement of a protocol.
//
//   tracecorr conform [options] -- CMD ARGS...   launch mode (restarts CMD per session)
//   tracecorr conform [options] --pid PID        attach mode (one session, no restarts)
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>

#include "command.hpp"
#include "tracecorr/conform/runner.hpp"
#include "tracecorr/conform/expectations.hpp"
#include "tracecorr/report/report.hpp"

namespace tracecorr::cli {
namespace {

using namespace tracecorr::conform;

struct ConformArgs {
  std::vector<std::string> command;
  int pid = 0;
  std::string junit, json, html, expect, only, protocol, gdbstub;
  bool strict = false, update_expectations = false, quiet = false, observe_only = false;
  // The suites' own options (conform::SuiteOption), as given on the command line.
  std::map<std::string, std::optional<std::string>> suite_settings;
  double duration = 0;
  unsigned jobs = 0;
  int otlp_port = 0;
  double discovery_ceiling = 0;  // seconds; 0: DiscoveryLimits' default
};

std::vector<std::string> split_ids(const std::string& text) {
  std::vector<std::string> ids;
  std::stringstream in(text);
  std::string id;
  while (std::getline(in, id, ','))
    if (!id.empty()) ids.push_back(id);
  return ids;
}

// The expected duration of the main session's phases, which --duration scales.
constexpr double kDefaultMainSessionSeconds = 5.0;

int run_conform(const ConformArgs& a) {
  if (a.command.empty() == (a.pid == 0)) {
    std::fprintf(stderr, "tracecorr conform: give either --pid PID or -- CMD ARGS...\n");
    return kExitUsage;
  }
  if (a.pid && a.otlp_port == 0)
    std::fprintf(stderr,
                 "tracecorr conform: attach mode without --otlp-port: the agent exports elsewhere, so span-based "
                 "requirements will be skipped\n");
  RunOptions o;
  o.target.command = a.command;
  if (a.pid) o.target.pid = a.pid;
  o.target.gdbstub = a.gdbstub;
  o.target.otlp_port = static_cast<std::uint16_t>(a.otlp_port);
  o.only = split_ids(a.only);
  o.strict = a.strict;
  o.jobs = a.jobs;
  o.protocol = a.protocol;
  o.progress = a.quiet ? nullptr : stderr;
  o.scenario.observe_only = a.observe_only;
  // The suites' options as given; the runner keeps the chosen suite's and adds their defaults.
  for (const auto& [name, value] : a.suite_settings)
    if (value) o.scenario.settings[name] = *value;
  if (a.observe_only && !a.pid) {
    std::fprintf(stderr, "tracecorr conform: --observe-only is for attach mode (--pid)\n");
    return kExitUsage;
  }
  if (a.duration > 0) o.scenario.time_scale = a.duration / kDefaultMainSessionSeconds;
  if (a.discovery_ceiling > 0)
    o.target.discovery.ceiling = std::chrono::milliseconds(static_cast<long long>(a.discovery_ceiling * 1000));

  std::optional<Expectations> expectations;
  if (!a.expect.empty() && (std::filesystem::exists(a.expect) || !a.update_expectations)) {
    auto loaded = load_expectations(a.expect);
    if (!loaded) {
      std::fprintf(stderr, "tracecorr conform: %s\n", loaded.error().message().c_str());
      return kExitUsage;
    }
    expectations = *loaded;
    std::vector<std::string> listed;
    for (const auto& e : expectations->expected_failures) listed.push_back(e.id);
    if (auto unknown = validate_ids(listed); !unknown.empty()) {
      std::fprintf(stderr, "tracecorr conform: %s lists unknown requirement %s\n", a.expect.c_str(),
                   unknown.front().c_str());
      return kExitUsage;
    }
  }

  auto run = run_conformance(o);
  if (!run) {
    std::fprintf(stderr, "tracecorr conform: %s\n", printable_text(run.error().message()).c_str());
    // A target that publishes nothing tracecorr knows is the environment's fault, not the command line's.
    return run.error().kind == ErrorKind::kNotFound && run.error().where == "--protocol auto" ? kExitEnvironment : kExitUsage;
  }
  if (expectations) apply_expectations(*run, *expectations);

  report::ConsoleOptions console;
  console.color = report::use_color(stdout);
  std::fputs(report::render_console(*run, console).c_str(), stdout);
  std::fflush(stdout);
  auto write = [](const std::string& path, const std::string& text) {
    if (path.empty()) return true;
    if (auto st = report::write_text_file(path, text); !st) {
      std::fprintf(stderr, "tracecorr conform: %s\n", st.error().message().c_str());
      return false;
    }
    return true;
  };
  if (!write(a.junit, report::render_junit(*run)) || !write(a.json, report::render_json(*run))) return kExitEnvironment;
  if (!a.html.empty() && !write(a.html, report::render_html(*run))) return kExitEnvironment;
  if (a.update_expectations) {
    if (a.expect.empty()) {
      std::fprintf(stderr, "tracecorr conform: --update-expectations needs --expect FILE\n");
      return kExitUsage;
    }
    if (!write(a.expect, update_expectations(*run, expectations.value_or(Expectations{})))) return kExitEnvironment;
    std::fprintf(stderr, "tracecorr conform: wrote %s\n", a.expect.c_str());
    return kExitOk;
  }
  return exit_code(*run, a.strict);
}

RegisterCommand conform_command(
    "conform", "Judge an agent against every requirement of the spec (launch: -- CMD ARGS..., attach: --pid PID)",
    [](CLI::App& app) -> std::function<int()> {
      auto a = std::make_shared<ConformArgs>();
      app.add_option("--pid", a->pid, "Attach to a running agent (no restarts: probes needing other settings skip)");
      app.add_option("--junit", a->junit, "Write a JUnit XML report");
      app.add_option("--json", a->json, "Write a JSON report (schema: spec/report-schema-v2.json)");
      app.add_option("--html", a->html, "Write a self-contained HTML report (verdicts, evidence, pictures)");
      app.add_flag("--strict", a->strict, "A missed SHOULD fails the gate");
      app.add_option("--only", a->only, "Comma-separated requirement ids or areas (ELF,TLS,...) to judge (see tracecorr list)");
      app.add_flag("--observe-only", a->observe_only,
                   "Attach mode: send the agent nothing; requirements judged by messages are skipped");
      app.add_option("--protocol", a->protocol,
                     "The protocols to judge, comma-separated (see tracecorr list), or auto (the default): every one "
                     "the target publishes, found by a trial launch; a protocol named that judges nothing is an error");
      // Each protocol suite's own options; one flag per name.
      for (const auto* suite : suites())
        for (const auto& option : suite->options())
          if (!a->suite_settings.count(option.name)) {
            auto& value = a->suite_settings[option.name];
            app.add_option("--" + option.name, value,
                           option.help + " [" + std::string(suite->protocol().id) + "]");
          }
      app.add_option("--expect", a->expect, "Expectations file: ids expected to fail, each with a reason");
      app.add_flag("--update-expectations", a->update_expectations, "Rewrite --expect with the current failures");
      app.add_option("--duration", a->duration, "Seconds for the main session's phases (default 5; longer is steadier)");
      app.add_option("--discovery-ceiling", a->discovery_ceiling,
                     "Seconds discovery waits at most, however the target progresses (default 300; it ends sooner on "
                     "the target's own CPU and idle time)");
      app.add_option("--jobs", a->jobs, "Sessions run at once (default: two per CPU, one when the machine is already busy); reports keep the session order");
      app.add_option("--gdbstub", a->gdbstub, "HOST:PORT of qemu-user's gdbstub, for arm64 agents under qemu-aarch64 -g");
      app.add_option("--otlp-port", a->otlp_port, "Fixed port for tracecorr's OTLP receiver (attach mode)");
      app.add_flag("--quiet", a->quiet, "No progress lines on stderr");
      app.add_option("command", a->command, "The agent's command line (after --)");
      return [a] { return run_conform(*a); };
    });

}  // namespace
}  // namespace tracecorr::cli

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
#ifdef TRACECORR_HAVE_PROFILES
#include "tracecorr/profiler/run.hpp"
#endif

namespace tracecorr::cli {
namespace {

using namespace tracecorr::conform;

// A duration option given in seconds (a fraction allowed), as the options structs hold it.
std::chrono::milliseconds from_seconds(double seconds) {
  return std::chrono::milliseconds(static_cast<long long>(seconds * 1000));
}

// Profiler mode (--profiler): the reader side judged.
struct ProfilerArgs {
  bool enabled = false;
  int pid = 0;
  std::string protocol = "http/protobuf";
  int grpc_port = 0, http_port = 0;
  std::string json_lines, fixtures;
  std::size_t samples = 0;
  double max_stage = 0, min_stage = 0, tolerance_ms = 0;
  int stage_nice = 0;
  std::vector<std::string> stage_members;
};

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
  double discovery_cpu = 0;      // seconds of the target's CPU time; 0: DiscoveryLimits' default
  ProfilerArgs profiler;
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

// Expectations applied, reports written, the gate's exit code: the same for
// both sides (an agent's run and a profiler's).
int finish_run(RunResult& run, const ConformArgs& a, const std::optional<Expectations>& expectations) {
  if (expectations) apply_expectations(run, *expectations);

  report::ConsoleOptions console;
  console.color = report::use_color(stdout);
  std::fputs(report::render_console(run, console).c_str(), stdout);
  std::fflush(stdout);
  auto write = [](const std::string& path, const std::string& text) {
    if (path.empty()) return true;
    if (auto st = report::write_text_file(path, text); !st) {
      std::fprintf(stderr, "tracecorr conform: %s\n", st.error().message().c_str());
      return false;
    }
    return true;
  };
  if (!write(a.junit, report::render_junit(run)) || !write(a.json, report::render_json(run))) return kExitEnvironment;
  if (!a.html.empty() && !write(a.html, report::render_html(run))) return kExitEnvironment;
  if (a.update_expectations) {
    if (a.expect.empty()) {
      std::fprintf(stderr, "tracecorr conform: --update-expectations needs --expect FILE\n");
      return kExitUsage;
    }
    if (!write(a.expect, update_expectations(run, expectations.value_or(Expectations{})))) return kExitEnvironment;
    std::fprintf(stderr, "tracecorr conform: wrote %s\n", a.expect.c_str());
    return kExitOk;
  }
  return exit_code(run, a.strict);
}

// --expect's file, read and checked; false: a usage error was printed.
bool load_expected(const ConformArgs& a, std::optional<Expectations>& expectations) {
  if (a.expect.empty() || (!std::filesystem::exists(a.expect) && a.update_expectations)) return true;
  auto loaded = load_expectations(a.expect);
  if (!loaded) {
    std::fprintf(stderr, "tracecorr conform: %s\n", loaded.error().message().c_str());
    return false;
  }
  expectations = *loaded;
  std::vector<std::string> listed;
  for (const auto& e : expectations->expected_failures) listed.push_back(e.id);
  if (auto unknown = validate_ids(listed); !unknown.empty()) {
    std::fprintf(stderr, "tracecorr conform: %s lists unknown requirement %s\n", a.expect.c_str(), unknown.front().c_str());
    return false;
  }
  return true;
}

int run_conform_profiler(const ConformArgs& a);

int run_conform(const ConformArgs& a) {
  if (a.profiler.enabled || a.profiler.pid) return run_conform_profiler(a);
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
    o.target.discovery.ceiling = from_seconds(a.discovery_ceiling);
  if (a.discovery_cpu > 0)
    o.target.discovery.cpu = from_seconds(a.discovery_cpu);

  std::optional<Expectations> expectations;
  if (!load_expected(a, expectations)) return kExitUsage;

  auto run = run_conformance(o);
  if (!run) {
    std::fprintf(stderr, "tracecorr conform: %s\n", printable_text(run.error().message()).c_str());
    // A target that publishes nothing tracecorr knows is the environment's fault, not the command line's.
    return run.error().kind == ErrorKind::kNotFound && run.error().where == "--protocol auto" ? kExitEnvironment : kExitUsage;
  }
  return finish_run(*run, a, expectations);
}

#ifdef TRACECORR_HAVE_PROFILES
#if defined(__aarch64__)
constexpr char kArch[] = "arm64";  // the fixtures folder's name (fixtures/CMakeLists.txt)
#else
constexpr char kArch[] = "x86_64";
#endif

// Where the stage's writers are: --fixtures, else next to the binary (a build
// tree: build/bin/../fixtures/ARCH), else the package's.
std::string fixtures_dir(const std::string& given, const std::string& arch) {
  if (!given.empty()) return given;
  std::error_code ec;
  auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  auto beside = exe.parent_path().parent_path() / "fixtures" / arch;
  if (!ec && std::filesystem::is_directory(beside, ec)) return beside.string();
  return "/usr/lib/tracecorr/fixtures/" + arch;
}

int run_conform_profiler(const ConformArgs& a) {
  const auto& p = a.profiler;
  profiler::ProfilerRunOptions o;
  o.command = a.command;
  if (p.pid) o.profiler_pid = p.pid;
  if (o.command.empty() == !o.profiler_pid) {
    std::fprintf(stderr, "tracecorr conform --profiler: give either --profiler-pid PID or -- PROFILER ARGS...\n");
    return kExitUsage;
  }
  o.otlp_protocol = p.protocol;
  o.grpc_port = static_cast<std::uint16_t>(p.grpc_port);
  o.http_port = static_cast<std::uint16_t>(p.http_port);
  o.json_lines = p.json_lines;
  o.protocols = split_ids(a.protocol == "auto" ? "" : a.protocol);
  o.only = split_ids(a.only);
  o.strict = a.strict;
  o.stage.arch = kArch;
  o.stage.fixtures_dir = fixtures_dir(p.fixtures, o.stage.arch);
  if (p.samples) o.samples_per_member = p.samples;
  o.stage_nice = p.stage_nice;
  o.stage.members = p.stage_members;
  if (p.max_stage > 0) o.max_stage = from_seconds(p.max_stage);
  if (p.min_stage > 0) o.min_observed = from_seconds(p.min_stage);
  if (p.tolerance_ms > 0) o.tolerance = std::chrono::milliseconds(static_cast<long long>(p.tolerance_ms));
  o.progress = a.quiet ? nullptr : stderr;
  std::optional<Expectations> expectations;
  if (!load_expected(a, expectations)) return kExitUsage;
  auto run = profiler::run_profiler_conformance(o);
  if (!run) {
    std::fprintf(stderr, "tracecorr conform --profiler: %s\n", printable_text(run.error().message()).c_str());
    return kExitUsage;
  }
  run->target.arch = o.stage.arch;
  return finish_run(*run, a, expectations);
}
#else
int run_conform_profiler(const ConformArgs&) {
  std::fprintf(stderr, "tracecorr conform --profiler: this build has no OTLP profiles intake (gRPC and cpp-httplib)\n");
  return kExitEnvironment;
}
#endif

void add_profiler_options(CLI::App& app, ProfilerArgs& p) {
  app.add_flag("--profiler", p.enabled,
               "Judge a profiler (the reader side): launch it (-- PROFILER ARGS...) with OTEL_EXPORTER_OTLP_* naming "
               "tracecorr's receiver, run a stage of writers, judge its samples");
  app.add_option("--profiler-pid", p.pid, "Profiler mode on a running profiler (export to --grpc-port/--http-port)");
  app.add_option("--profiler-protocol", p.protocol, "grpc or http/protobuf (default): what the launched profiler is told");
  app.add_option("--grpc-port", p.grpc_port, "Profiler mode: fixed port of the OTLP/gRPC profiles receiver");
  app.add_option("--http-port", p.http_port, "Profiler mode: fixed port of the OTLP/HTTP profiles receiver");
  app.add_option("--json-lines", p.json_lines, "Profiler mode: also read samples as JSON lines (docs/json-lines.md) from this file, FIFO or -");
  app.add_option("--fixtures", p.fixtures, "Profiler mode: the stage's writers (default: beside the binary, else /usr/lib/tracecorr/fixtures/ARCH)");
  app.add_option("--stage-samples", p.samples, "Profiler mode: samples per stage member before the stage ends (default 40)");
  app.add_option("--stage-nice", p.stage_nice,
                 "Profiler mode: the stage's writers run at this niceness (1-19; an emulated or small machine whose "
                 "CPUs they fill: the intake and the profiler keep up)")
      ->check(CLI::Range(0, 19));
  app.add_option("--stage-member", p.stage_members,
                 "Profiler mode: stage only this member (repeatable; named as in the report's notes, e.g. "
                 "otel-thread-context/tlsdesc-dlopen-dynamic): one layout looked into, or a defect shown quickly")
      ->allow_extra_args(false);  // one name each time: the profiler's command follows --
  app.add_option("--max-stage", p.max_stage, "Profiler mode: seconds the stage runs at most (default 45)");
  app.add_option("--min-stage", p.min_stage,
                 "Profiler mode: seconds the stage runs at least from the profiler's first sample, however soon every "
                 "member has its samples (default 6: several of each member's hazard cycles)")
      ->check(CLI::PositiveNumber);
  app.add_option("--tolerance-ms", p.tolerance_ms, "Profiler mode: how far a sample's time may be from the state it reports (default 20)");
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
      app.add_option("--discovery-cpu", a->discovery_cpu,
                     "Seconds of CPU time the target may run without publishing before discovery ends (default "
                     "30: far more than an agent needs to load; more for an application that works long before it "
                     "loads its agent)")
          ->check(CLI::PositiveNumber);
      app.add_option("--jobs", a->jobs, "Sessions run at once (default: two per CPU, one when the machine is already busy); reports keep the session order");
      app.add_option("--gdbstub", a->gdbstub, "HOST:PORT of qemu-user's gdbstub, for arm64 agents under qemu-aarch64 -g");
      app.add_option("--otlp-port", a->otlp_port, "Fixed port for tracecorr's OTLP receiver (attach mode)");
      app.add_flag("--quiet", a->quiet, "No progress lines on stderr");
      add_profiler_options(app, a->profiler);
      app.add_option("command", a->command, "The agent's command line (after --)");
      return [a] { return run_conform(*a); };
    });

}  // namespace
}  // namespace tracecorr::cli

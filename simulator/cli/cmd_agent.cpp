// tracecorr agent: the engine's host agent (the profiler side of every
// protocol it samples); each protocol's hook brings its own options.
#include <signal.h>
#include <sys/utsname.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <set>

#include "agent_otlp.hpp"
#include "command.hpp"
#include "tracecorr/host_agent.hpp"
#include "tracecorr/reader_defects.hpp"
#include "tracecorr/report/flames.hpp"
#include "tracecorr/report/report.hpp"
#include "tracecorr/sampler.hpp"
#if defined(TRACECORR_HAVE_BPF)
#include "bpf_sampler.hpp"
#endif

namespace tracecorr::cli {

namespace {

std::atomic<bool> g_stop{false};
void on_signal(int) { g_stop.store(true); }

struct AgentArgs {
  std::vector<int> pids;
  bool all = false;
  unsigned frequency = 99;
  double duration_s = 0;  // 0: until SIGINT/SIGTERM
  AgentSettings settings;  // the hooks' options, by name (only those given)
  std::string reader = "bpf";
  std::string json_path;
  std::string html_path;
  bool quiet = false;
  OtlpExportArgs otlp;
  std::vector<std::string> reader_defects;  // --reader-defect: conformance kill matrices only
};

// Passes the host agent's sampler through, keeping what it delivers (up to a
// bound, and only for --html: a sample with its stack is up to a kilobyte) so
// --html can draw the agent's own samples as flame graphs.
class RecordingSampler final : public Sampler {
 public:
  static constexpr std::size_t kMaxKept = 200000;
  RecordingSampler(Sampler& inner, bool keep) : inner_(inner), keep_(keep) {}
  std::string name() const override { return inner_.name(); }
  using Sampler::track;
  using Sampler::untrack;
  Status track(pid_t pid, LayoutSlot slot, const RecordLayout& layout, PointerSite site) override {
    return inner_.track(pid, slot, layout, site);
  }
  Status track_process_context(pid_t pid, std::optional<std::uint64_t> header_address) override {
    return inner_.track_process_context(pid, header_address);
  }
  Status untrack(pid_t pid, LayoutSlot slot) override { return inner_.untrack(pid, slot); }
  Expected<std::size_t> poll(const Callback& callback, std::chrono::milliseconds timeout) override {
    return inner_.poll(
        [&](const Sample& s) {
          if (keep_ && kept_.size() < kMaxKept) kept_.push_back(s);
          callback(s);
        },
        timeout);
  }
  bool backlog() const override { return inner_.backlog(); }
  void stop_sampling() override { inner_.stop_sampling(); }
  SamplerCounters counters() const override { return inner_.counters(); }
  const std::vector<Sample>& kept() const { return kept_; }

 private:
  Sampler& inner_;
  bool keep_;
  std::vector<Sample> kept_;
};

// The page of an agent run: no requirement is judged, only the pictures of
// its samples. Frames are named now, while the sampled processes still run.
// Only the samples of processes whose protocol names a trace in its records
// (AgentPart::trace_of: Elastic v1's) are drawn, per trace.
conform::RunResult agent_page(const AgentArgs& a, const RecordingSampler& recorded, const HostAgent& host,
                              const nlohmann::json& summary) {
  conform::RunResult run;
  run.tool_version = std::string(conform::kToolVersion);
  run.target.description = a.all ? std::string("every agent process (--all)") : "tracecorr agent --pid";
  for (int pid : a.pids) run.target.description += " " + std::to_string(pid);
  run.personality = summary.value("personality", std::string());
  struct utsname host_name {};
  if (uname(&host_name) == 0) run.target.arch = host_name.machine;
  conform::StackSamples samples;
  samples.source = "tracecorr agent's own " + recorded.name() + " sampler at " + std::to_string(a.frequency) +
                   " Hz" + (recorded.name() == "bpf" ? " per CPU (on-CPU samples)" : " per thread (wall clock)") +
                   "; the trace is the one the thread's record named when it was sampled";
  std::map<pid_t, std::unique_ptr<Symbolizer>> symbolizers;
  for (const auto& s : recorded.kept()) {
    const watch::ActiveTraceOf* trace_of = host.trace_of(s);
    if (!trace_of) continue;
    auto& symbols = symbolizers[s.pid];
    if (!symbols) symbols = std::make_unique<Symbolizer>(s.pid);
    samples.samples.push_back(report::stack_sample_of(s, *symbols, *trace_of));
  }
  // Captioned in the words of the protocol of the first process drawn.
  conform::StacksCaption caption;
  for (const auto& s : recorded.kept())
    if (host.trace_of(s)) {
      caption = host.stacks_caption(s);
      break;
    }
  run.figures.stacks = report::stacks_figure_of(samples, std::move(caption));
  run.counters["samples"] = recorded.kept().size();
  return run;
}

Expected<std::unique_ptr<Sampler>> make_sampler(const AgentArgs& a) {
  auto defect = [&](const char* name) {
    return std::find(a.reader_defects.begin(), a.reader_defects.end(), name) != a.reader_defects.end();
  };
  if (a.reader == "ptrace") {
    PtraceSamplerOptions o;
    o.frequency_hz = a.frequency;
    o.reads_running_thread = defect("reads-running-thread");
    o.context_identity_check = !defect("any-signature");
    return make_ptrace_sampler(o);
  }
  for (const char* samplers : {"reads-running-thread", "any-signature"})
    if (defect(samplers))  // not built into the BPF reader: refused rather than ignored
      return make_error("--reader-defect " + std::string(samplers) + " is the ptrace reader's: run with --reader ptrace");
#if defined(TRACECORR_HAVE_BPF)
  bpf::BpfSamplerOptions o;
  o.frequency_hz = a.frequency;
  auto s = bpf::make_bpf_sampler(o);
  if (!s)
    return make_error(s.error().message() + "\n  The ptrace reader needs no BPF and no BTF: run again with --reader ptrace",
                      "");
  return s;
#else
  return make_error("this tracecorr was built without the BPF sampler (TRACECORR_BPF=OFF or no libbpf/bpftool); "
                    "use --reader ptrace");
#endif
}

Status write_json(const std::string& path, const nlohmann::json& summary) {
  if (path == "-") {
    std::puts(summary.dump(2).c_str());
    return Ok{};
  }
  std::ofstream out(path);
  out << summary.dump(2) << "\n";
  if (!out) return make_error("cannot write " + path);
  return Ok{};
}

// The processes named, checked, and the options every protocol shares; an exit code when they are wrong.
std::optional<int> agent_options(const AgentArgs& a, HostAgentOptions& o) {
  if (a.pids.empty() && !a.all) {
    std::fprintf(stderr, "tracecorr agent: name processes with --pid PID, or --all\n");
    return kExitUsage;
  }
  for (int pid : a.pids) {
    if (pid <= 0 || (::kill(pid, 0) != 0 && errno == ESRCH)) {
      std::fprintf(stderr, "tracecorr agent: pid %d: no such process\n", pid);
      return kExitEnvironment;
    }
    o.pids.push_back(pid);
  }
  o.all = a.all;
  o.frequency_hz = a.frequency;
  if (a.duration_s > 0) o.duration = std::chrono::milliseconds(static_cast<long long>(a.duration_s * 1000));
  o.log = a.quiet ? nullptr : stderr;
  o.reader_defects = ReaderDefects(std::set<std::string>(a.reader_defects.begin(), a.reader_defects.end()));
  return std::nullopt;
}

// A defective reader is never mistaken for the reference: said first and last, whatever --quiet says.
void warn_defective(const AgentArgs& a) {
  if (a.reader_defects.empty()) return;
  std::string names;
  for (const auto& d : known_reader_defects())
    if (std::find(a.reader_defects.begin(), a.reader_defects.end(), d.name) != a.reader_defects.end())
      names += (names.empty() ? "" : ", ") + d.name + " (" + d.rules + ")";
  std::fprintf(stderr,
               "tracecorr agent: WARNING: THIS READER IS DEFECTIVE ON PURPOSE (--reader-defect %s): it breaks what "
               "it is told to, for conformance kill matrices; never use its output as a profiler's\n",
               names.c_str());
}

// The summary written where asked (--html, --json); an exit code when it could not be.
std::optional<int> write_outputs(const AgentArgs& a, const HostAgent& host, const RecordingSampler& recording,
                                 std::chrono::system_clock::time_point started, nlohmann::json& summary) {
  if (!a.html_path.empty()) {
    auto page = agent_page(a, recording, host, summary);
    page.started = started;
    page.finished = std::chrono::system_clock::now();
    if (auto written = report::write_text_file(a.html_path, report::render_html(page)); !written) {
      std::fprintf(stderr, "tracecorr agent: %s\n", written.error().message().c_str());
      return kExitEnvironment;
    }
  }
  report::make_utf8(summary);  // paths read from targets may not be UTF-8
  if (a.json_path.empty()) return std::nullopt;
  if (auto written = write_json(a.json_path, summary); !written) {
    std::fprintf(stderr, "tracecorr agent: %s\n", written.error().message().c_str());
    return kExitEnvironment;
  }
  return std::nullopt;
}

// The OTLP profiles export, when asked for (flags or environment): every
// observation offered to it. An exit code when it cannot be started.
std::optional<int> start_export(const AgentArgs& a, HostAgentOptions& o, std::unique_ptr<AgentExport>& exporter) {
  auto target = otlp_export_target(a.otlp, process_environment());
  if (target && !*target) return std::nullopt;
  if (target) {
    (*target)->frequency_hz = a.frequency;
    (*target)->wall_clock = a.reader == "ptrace";
    auto started = AgentExport::start(**target);
    if (started) {
      exporter = std::move(*started);
      o.observe = [sink = exporter.get()](const AgentObservation& observation) { sink->offer(observation); };
      return std::nullopt;
    }
    target = started.error();
  }
  std::fprintf(stderr, "tracecorr agent: OTLP export: %s\n", printable_text(target.error().message()).c_str());
  return kExitUsage;
}

// What was offered is sent (within the exporter's bounds), then counted in the summary and said.
void finish_export(const AgentArgs& a, AgentExport* exporter, nlohmann::json& summary) {
  if (!exporter) return;
  exporter->flush();
  summary["otlp_export"] = exporter->summary();
  if (!a.quiet) std::fprintf(stderr, "tracecorr agent: %s\n", printable_text(exporter->final_line()).c_str());
}

int run_agent(const AgentArgs& a) {
  HostAgentOptions o;
  if (auto refused = agent_options(a, o)) return *refused;
  std::unique_ptr<AgentExport> exporter;
  if (auto refused = start_export(a, o, exporter)) return *refused;
  auto sampler = make_sampler(a);
  if (!sampler) {
    std::fprintf(stderr, "tracecorr agent: %s reader unavailable: %s\n", a.reader.c_str(),
                 sampler.error().message().c_str());
    return kExitEnvironment;
  }
  warn_defective(a);
  RecordingSampler recording(**sampler, !a.html_path.empty());
  HostAgent host(o, recording);
  if (auto added = host.add_registered_parts(a.settings); !added) {
    std::fprintf(stderr, "tracecorr agent: %s\n", added.error().message().c_str());
    return kExitUsage;
  }
  auto started = std::chrono::system_clock::now();
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);

  Status st = host.run(g_stop);
  auto summary = host.summary();
  finish_export(a, exporter.get(), summary);
  warn_defective(a);
  if (auto failed = write_outputs(a, host, recording, started, summary)) return *failed;
  if (!st) {
    std::fprintf(stderr, "tracecorr agent: sampling failed: %s\n", st.error().message().c_str());
    return kExitEnvironment;
  }
  // A process named with --pid that gave nothing to correlate is the run's
  // failure (exit 1), not a silent success: the user pointed us at it.
  auto nothing = host.nothing_readable();
  for (const auto& why : nothing)
    std::fprintf(stderr, "tracecorr agent: nothing sampled: %s\n",
                 printable_text(why).c_str());  // paths and errors come from the target
  return nothing.empty() ? kExitOk : kExitFailure;
}

// --reader-defect: each defect the registered protocols declare, by name, with the rule it breaks.
void add_reader_defect_option(CLI::App& app, std::vector<std::string>& defects) {
  std::string help =
      "For conformance kill matrices: make the reference reader break one reader requirement (repeatable):";
  std::vector<std::string> names;
  for (const auto& d : known_reader_defects()) {
    help += "\n  " + d.name + " [" + d.rules + "]: " + d.help;
    names.push_back(d.name);
  }
  app.add_option("--reader-defect", defects, help)->type_name("NAME")->check(CLI::IsMember(names));
}

// Each hook's settings as options of the command (--<name>), kept in `settings` when given.
void add_hook_options(CLI::App& app, AgentSettings& settings) {
  for (const AgentHook* hook : agent_hooks())
    for (const AgentSetting& s : hook->settings()) {
      auto* option = app.add_option_function<std::string>(
          "--" + s.name, [&settings, name = s.name](const std::string& value) { settings[name] = value; },
          s.help + " [" + std::string(hook->id()) + "]");
      if (!s.type_name.empty()) option->type_name(s.type_name);
      if (!s.choices.empty()) option->check(CLI::IsMember(s.choices));
    }
}

RegisterCommand agent_command(
    "agent", "Run the host agent: sample the processes that publish a protocol it reads, as each protocol's profiler",
    [](CLI::App& app) -> std::function<int()> {
      auto a = std::make_shared<AgentArgs>();
      app.footer(
          "A sampled process that also publishes an OpenTelemetry process context (OTEP 4719) has its header read\n"
          "with every sample: the summary (--json: process_context, per process) counts the samples per resource\n"
          "(service.name, service.instance.id) and per publication (its timestamp), and those taken while the\n"
          "context was being written (timestamp 0) or whose publication was replaced before it could be read.\n"
          "A process that publishes a protocol whose records are only read (OTEP 4947's thread context) is\n"
          "sampled in every TLS model (dynamic TLS included): --json lists per thread the records read\n"
          "(ids, valid, flags, attributes named through the process context's key map, sample counts) and how\n"
          "often each status was seen (record_pointer_null: no context; tls_block_not_allocated: the thread\n"
          "has not touched the module's TLS yet). Nothing is sent to such a process. A protocol that acts on\n"
          "its samples (sends correlations, say) brings its own options, marked with its protocol's id.\n"
          "With --otlp-endpoint (or OTEL_EXPORTER_OTLP_PROFILES_ENDPOINT / OTEL_EXPORTER_OTLP_ENDPOINT; the flags\n"
          "win) every sample of a process a protocol holds is exported as one OTLP profiles observation: pid,\n"
          "thread.id, its time, a link (trace id, span id) when its record carried a valid context (none\n"
          "otherwise), the record's attributes, the sampled stack when there is one, and a resource of\n"
          "process.pid and the OTel process context's resource attributes. Sampling never waits for the\n"
          "network: a full queue drops and counts; the summary (--json: otlp_export) counts what was offered,\n"
          "exported, dropped and failed, with the last error. A refusing endpoint is not the run's failure.");
      app.add_option("--pid", a->pids, "Process to sample (repeatable)");
      app.add_flag("--all", a->all, "Every process that publishes a protocol the agent reads (rescanned every 500 ms)");
      app.add_option("--frequency", a->frequency, "Samples per second (per CPU for bpf, per thread for ptrace)")
          ->check(CLI::Range(1u, 100000u));
      app.add_option("--duration", a->duration_s, "Seconds to run (default: until SIGINT/SIGTERM)")
          ->check(CLI::NonNegativeNumber);
      add_hook_options(app, a->settings);
      app.add_option("--reader", a->reader, "bpf (perf_event + BPF, needs BTF and CAP_BPF/CAP_PERFMON) or ptrace")
          ->check(CLI::IsMember({"bpf", "ptrace"}));
      app.add_option("--json", a->json_path,
                     "Write the final summary as JSON to FILE ('-': stdout): per process its correlations and, when it "
                     "publishes an OTel process context, the samples per resource");
      app.add_option("--html", a->html_path, "Write an HTML page with flame graphs of the samples, per trace");
      app.add_flag("--quiet", a->quiet, "No live summary on stderr");
      app.add_option("--otlp-endpoint", a->otlp.endpoint,
                     "Export every sample as OTLP profiles to http://HOST:PORT (default: "
                     "OTEL_EXPORTER_OTLP_PROFILES_ENDPOINT, else OTEL_EXPORTER_OTLP_ENDPOINT; neither: no export)");
      app.add_option("--otlp-protocol", a->otlp.protocol,
                     "grpc (ProfilesService/Export) or http/protobuf (POST /v1development/profiles) (default: "
                     "OTEL_EXPORTER_OTLP_PROFILES_PROTOCOL, else OTEL_EXPORTER_OTLP_PROTOCOL, else grpc)")
          ->check(CLI::IsMember({"grpc", "http/protobuf"}));
      add_reader_defect_option(app, a->reader_defects);
      return [a] { return run_agent(*a); };
    });

}  // namespace
}  // namespace tracecorr::cli

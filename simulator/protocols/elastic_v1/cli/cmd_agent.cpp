// tracecorr agent: the reference host agent (profiler side of the protocol).
#include <signal.h>
#include <sys/utsname.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <set>

#include "command.hpp"
#include "tracecorr/report/report.hpp"
#include "elastic_v1/agent/host_agent.hpp"
#include "elastic_v1/registry.hpp"
#include "probes/elastic_v1/scenarios.hpp"
#include "tracecorr/report/flames.hpp"
#include "tracecorr/report/report.hpp"
#include "tracecorr/sampler.hpp"
#if defined(TRACECORR_HAVE_BPF)
#include "bpf_sampler.hpp"
#endif

namespace tracecorr::cli {

namespace agent = tracecorr::elastic_v1::agent;
namespace {

std::atomic<bool> g_stop{false};
void on_signal(int) { g_stop.store(true); }

struct AgentArgs {
  std::vector<int> pids;
  bool all = false;
  unsigned frequency = 99;
  double duration_s = 0;  // 0: until SIGINT/SIGTERM
  std::uint32_t samples_delay_ms = 1000;
  std::string host_id;
  std::string personality = "spec";
  unsigned flush_interval_ms = 0;  // 0: derived from samples-delay-ms
  std::string reader = "bpf";
  std::string json_path;
  std::string html_path;
  bool quiet = false;
};

// Passes the host agent's sampler through, keeping what it delivers (up to a
// bound, and only for --html: a sample with its stack is up to a kilobyte) so
// --html can draw the agent's own samples as flame graphs.
class RecordingSampler final : public Sampler {
 public:
  static constexpr std::size_t kMaxKept = 200000;
  RecordingSampler(Sampler& inner, bool keep) : inner_(inner), keep_(keep) {}
  std::string name() const override { return inner_.name(); }
  Status track(pid_t pid, const RecordLayout& layout, PointerSite site) override {
    return inner_.track(pid, layout, site);
  }
  Status track_process_context(pid_t pid, std::optional<std::uint64_t> header_address) override {
    return inner_.track_process_context(pid, header_address);
  }
  Status untrack(pid_t pid) override { return inner_.untrack(pid); }
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
// Only the Elastic processes' samples are drawn: their transaction is read by
// Elastic's record layout, which another protocol's records do not have.
conform::RunResult agent_page(const AgentArgs& a, const RecordingSampler& recorded, const std::set<pid_t>& elastic) {
  conform::RunResult run;
  run.tool_version = std::string(conform::kToolVersion);
  run.target.description = a.all ? std::string("every agent process (--all)") : "tracecorr agent --pid";
  for (int pid : a.pids) run.target.description += " " + std::to_string(pid);
  run.personality = a.personality;
  struct utsname host {};
  if (uname(&host) == 0) run.target.arch = host.machine;
  conform::StackSamples samples;
  samples.source = "tracecorr agent's own " + recorded.name() + " sampler at " + std::to_string(a.frequency) +
                   " Hz" + (recorded.name() == "bpf" ? " per CPU (on-CPU samples)" : " per thread (wall clock)") +
                   "; the transaction is the one in the thread's record when it was sampled";
  std::map<pid_t, std::unique_ptr<Symbolizer>> symbolizers;
  for (const auto& s : recorded.kept()) {
    if (!elastic.count(s.pid)) continue;
    auto& symbols = symbolizers[s.pid];
    if (!symbols) symbols = std::make_unique<Symbolizer>(s.pid);
    samples.samples.push_back(conform::stack_sample_of(s, *symbols, elastic_v1::active_trace()));
  }
  run.figures.flames = conform::flame_graphs_of(samples);
  run.counters["samples"] = recorded.kept().size();
  return run;
}

Expected<std::unique_ptr<Sampler>> make_sampler(const AgentArgs& a) {
  if (a.reader == "ptrace") {
    PtraceSamplerOptions o;
    o.frequency_hz = a.frequency;
    return make_ptrace_sampler(o);
  }
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

int run_agent(const AgentArgs& a) {
  if (a.pids.empty() && !a.all) {
    std::fprintf(stderr, "tracecorr agent: name processes with --pid PID, or --all\n");
    return kExitUsage;
  }
  agent::AgentOptions o;
  if (!agent::parse_personality(a.personality, o.personality)) {
    std::fprintf(stderr, "tracecorr agent: unknown personality '%s' (spec, ebpf-profiler)\n", a.personality.c_str());
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
  o.samples_delay_ms = a.samples_delay_ms;
  o.host_id = a.host_id;
  o.flush_interval = std::chrono::milliseconds(a.flush_interval_ms);
  if (o.personality == agent::Personality::Spec && a.flush_interval_ms >= a.samples_delay_ms &&
      a.flush_interval_ms != 0) {
    std::fprintf(stderr,
                 "tracecorr agent: --flush-interval %u ms is not below --samples-delay-ms %u: agents could export "
                 "transactions before their correlations arrive. Leave --flush-interval out (it is derived: a fifth "
                 "of samples-delay-ms, at most 1000 ms) or shorten it\n",
                 a.flush_interval_ms, a.samples_delay_ms);
    return kExitUsage;
  }
  if (a.duration_s > 0) o.duration = std::chrono::milliseconds(static_cast<long long>(a.duration_s * 1000));
  o.log = a.quiet ? nullptr : stderr;

  auto sampler = make_sampler(a);
  if (!sampler) {
    std::fprintf(stderr, "tracecorr agent: %s reader unavailable: %s\n", a.reader.c_str(),
                 sampler.error().message().c_str());
    return kExitEnvironment;
  }
  auto started = std::chrono::system_clock::now();
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);

  RecordingSampler recording(**sampler, !a.html_path.empty());
  agent::HostAgent host(o, recording);
  Status st = host.run(g_stop);
  auto summary = host.summary();
  if (!a.html_path.empty()) {
    std::set<pid_t> elastic;
    for (const auto& p : summary["processes"])
      if (p["protocol"].is_string() && p["protocol"].get<std::string>() == elastic_v1::spec::kProtocol.id)
        elastic.insert(p["pid"].get<pid_t>());
    auto page = agent_page(a, recording, elastic);
    page.started = started;
    page.finished = std::chrono::system_clock::now();
    if (auto written = conform::write_text_file(a.html_path, conform::render_html(page)); !written) {
      std::fprintf(stderr, "tracecorr agent: %s\n", written.error().message().c_str());
      return kExitEnvironment;
    }
  }
  conform::make_utf8(summary);  // paths read from targets may not be UTF-8
  if (!a.json_path.empty()) {
    if (a.json_path == "-") {
      std::puts(summary.dump(2).c_str());
    } else {
      std::ofstream out(a.json_path);
      out << summary.dump(2) << "\n";
      if (!out) {
        std::fprintf(stderr, "tracecorr agent: cannot write %s\n", a.json_path.c_str());
        return kExitEnvironment;
      }
    }
  }
  if (!st) {
    std::fprintf(stderr, "tracecorr agent: sampling failed: %s\n", st.error().message().c_str());
    return kExitEnvironment;
  }
  // A process named with --pid that gave nothing to correlate is the run's
  // failure (exit 1), not a silent success: the user pointed us at it.
  auto nothing = host.nothing_readable();
  for (const auto& why : nothing)
    std::fprintf(stderr, "tracecorr agent: nothing sampled: %s\n",
                 conform::printable_text(why).c_str());  // paths and errors come from the target
  return nothing.empty() ? kExitOk : kExitFailure;
}

RegisterCommand agent_command(
    "agent", "Run the reference host agent: sample agent processes and send them correlations",
    [](CLI::App& app) -> std::function<int()> {
      auto a = std::make_shared<AgentArgs>();
      app.footer(
          "A sampled process that also publishes an OpenTelemetry process context (OTEP 4719) has its header read\n"
          "with every sample: the summary (--json: process_context, per process) counts the samples per resource\n"
          "(service.name, service.instance.id) and per publication (its timestamp), and those taken while the\n"
          "context was being written (timestamp 0) or whose publication was replaced before it could be read.\n"
          "A process without the agent library that publishes an OpenTelemetry thread context (OTEP 4947) is\n"
          "sampled too, in every TLS model (dynamic TLS included): --json lists per thread the records read\n"
          "(ids, valid, flags, attributes named through the process context's key map, sample counts) and how\n"
          "often each status was seen (record_pointer_null: no context; tls_block_not_allocated: the thread\n"
          "has not touched the module's TLS yet). Nothing is sent to such a process.");
      app.add_option("--pid", a->pids, "Process to correlate, or whose thread contexts to sample (repeatable)");
      app.add_flag("--all", a->all, "Every process that maps the agent library or publishes a thread context (rescanned every 500 ms)");
      app.add_option("--frequency", a->frequency, "Samples per second (per CPU for bpf, per thread for ptrace)")
          ->check(CLI::Range(1u, 100000u));
      app.add_option("--duration", a->duration_s, "Seconds to run (default: until SIGINT/SIGTERM)")
          ->check(CLI::NonNegativeNumber);
      app.add_option("--samples-delay-ms", a->samples_delay_ms, "samples-delay-ms in the registration message (default 1000, the spec's default)");
      app.add_option("--host-id", a->host_id, "host-id in the registration message");
      app.add_option("--personality", a->personality,
                     "spec: registration + aggregated counts; ebpf-profiler: no registration, one message per sample")
          ->check(CLI::IsMember({"spec", "ebpf-profiler"}));
      app.add_option("--flush-interval", a->flush_interval_ms,
                     "Spec: milliseconds a transaction goes unsampled before its counts are sent (a thread seen "
                     "leaving it sends them at once; default: a fifth of --samples-delay-ms, at most 1000; must be "
                     "below it)")
          ->check(CLI::Range(1u, 3600000u));
      app.add_option("--reader", a->reader, "bpf (perf_event + BPF, needs BTF and CAP_BPF/CAP_PERFMON) or ptrace")
          ->check(CLI::IsMember({"bpf", "ptrace"}));
      app.add_option("--json", a->json_path,
                     "Write the final summary as JSON to FILE ('-': stdout): per process its correlations and, when it "
                     "publishes an OTel process context, the samples per resource");
      app.add_option("--html", a->html_path, "Write an HTML page with flame graphs of the samples, per transaction");
      app.add_flag("--quiet", a->quiet, "No live summary on stderr");
      return [a] { return run_agent(*a); };
    });

}  // namespace
}  // namespace tracecorr::cli

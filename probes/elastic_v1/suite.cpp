// Elastic v1's conformance suite (conform::Suite): its sessions, scenarios,
// probes and notes, registered with the engine by register_protocol().
#include <filesystem>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>

#include "channel.hpp"
#include "elastic_v1/registry.hpp"
#include "figures.hpp"
#include "probes.hpp"
#include "scenarios.hpp"
#include "elastic_v1/agent/correlation.hpp"
#include "elastic_v1/library.hpp"
#include "tracecorr/discovery.hpp"

namespace tracecorr::elastic_v1 {
namespace {

// The default host-id of the registration attach mode leaves in force: the
// machine id (what OpenTelemetry's host.id detector reports), else empty.
std::string machine_id() {
  std::ifstream in("/etc/machine-id");
  std::string id;
  if (!in || !std::getline(in, id) || id.size() > 64) return "";
  return id;
}

// The socket capacity note: what the agent absorbs and what a profiler
// sending one message per sample would lose at 20 Hz and 1 kHz per CPU here.
std::string capacity_note(const std::optional<SocketCapacity>& cap, bool sent_anything) {
  if (!cap)
    return sent_anything ? "agent socket capacity: not measured (no connection to the agent's socket)"
                         : "agent socket capacity: not measured (this run sent the agent nothing)";
  const long cpus = std::max(1L, sysconf(_SC_NPROCESSORS_ONLN));
  const double rate = cap->per_second();
  auto loss = [&](double hz) {
    double offered = hz * static_cast<double>(cpus);
    double lost = offered > rate ? 100.0 * (1.0 - rate / offered) : 0.0;
    char buf[160];
    std::snprintf(buf, sizeof buf, "at %g Hz per CPU on %ld CPUs it offers %.0f/s and would lose %s%.0f%%", hz, cpus,
                  offered, cap->capped && lost == 0 ? "" : "about ", lost);
    return std::string(buf);
  };
  char head[200];
  std::snprintf(head, sizeof head,
                "agent socket capacity (informational): %llu datagrams accepted before the first EAGAIN, then %s%.0f/s "
                "while refilling it each time it had room, over %.2f s",
                static_cast<unsigned long long>(cap->burst), cap->capped ? "at least " : "", rate, cap->window_s);
  return std::string(head) + "; a profiler sending one message per sample (the OTel eBPF profiler): " + loss(20) +
         ", " + loss(1000);
}

// What the report says of the socket directory: where it was made besides
// tracecorr's root, and, when the agent published nothing, its words about it.
void note_socket_dir(const Session& session, RunResult& run) {
  const auto evidence = std::static_pointer_cast<const SessionFacts>(channel(session).evidence());
  const auto& f = *evidence;
  const std::string prefix = "session " + session.settings().name + ": ";
  for (const auto& where : f.socket_dir_roots) run.notes.push_back(prefix + "socket directory " + f.socket_dir + " " + where);
  if (!f.socket_dir_complaint && !(f.socket_dir_unusable && !f.storage())) return;
  std::string note = prefix + "the agent published nothing";
  if (f.socket_dir_unusable) note += "; the socket directory tracecorr gave it could not serve it: " + *f.socket_dir_unusable;
  if (f.socket_dir_complaint) note += "; it said of " + f.socket_dir + ": \"" + *f.socket_dir_complaint + "\"";
  run.notes.push_back(note);
}

class ElasticSuite final : public Suite {
 public:
  const ProtocolSpec& protocol() const override { return elastic_v1::spec::kProtocol; }

  std::vector<SuiteOption> options() const override {
    return {{"personality", "How tracecorr's host agent sends correlations: spec or ebpf-profiler", "spec"},
            {"samples-delay-ms",
             "Attach mode: the samples-delay-ms of the registration left in force when the run ends (default 1000)",
             ""},
            {"host-id", "Attach mode: the host-id of the registration left in force (default: /etc/machine-id)", ""},
            {"socket-dir",
             "Launch mode: the directory each session's socket directory for the agent is made in (default /tmp); "
             "name one the agent's own root shows at the same path when it runs in a container",
             ""}};
  }

  Status check(const ScenarioOptions& options) const override {
    auto parsed = parse_settings(options);
    if (!parsed) return parsed.error();
    return Ok{};
  }

  const std::vector<std::unique_ptr<Probe>>& probes() const override {
    static const auto probes = [] {
      std::vector<std::unique_ptr<Probe>> p;
      p.push_back(make_elf_probe());
      p.push_back(make_proc_probe());
      p.push_back(make_tls_probe());
      p.push_back(make_sock_probe());
      p.push_back(make_msg_probe());
      p.push_back(make_attr_probe());
      p.push_back(make_defer_probe());
      p.push_back(make_conf_probe());
      p.push_back(make_host_probe());
      return p;
    }();
    return probes;
  }

  std::vector<std::string> session_names() const override { return all_session_names(); }
  std::string attach_session() const override { return kEnabledSession; }

  Expected<std::unique_ptr<Session>> open_session(const TargetSpec& target, const std::string& name,
                                                  const ScenarioOptions& options) const override {
    return Session::open(target, session_settings(name, options),
                         std::make_unique<Channel>(storage_wait(name), settings_of(options).socket_dir_parent));
  }

  Status run_scenario(Session& session, const ScenarioOptions& options) const override {
    return elastic_v1::run_scenario(session, options);
  }

  Published published(pid_t pid) const override {
    LibraryCache cache;
    auto found = discover_process(pid, discovery_options(), cache);
    // A misnamed library with the symbols too: ELF-01 judges its name.
    return {found && found->has_value() ? Published::Kind::Readable : Published::Kind::No, ""};
  }
  // No library in any session, and no span exported either: not an agent (or
  // one the launch lost). An agent that exports spans with the feature
  // enabled but never maps the library fails ELF-01 instead.
  std::string published_nothing(const SessionSet& sessions) const override {
    std::string why;
    for (const auto& name : all_session_names()) {
      const SessionEvidence* s = sessions.find(name);
      if (!s) continue;
      if (s->library || !s->spans.empty()) return {};
      if (why.empty())
        why = "session " + name + ": " + (s->discovery_error ? s->discovery_error->message() : "no agent library found");
    }
    return why.empty() ? why : why + "; and no span was exported in any session";
  }
  bool reads_thread_pointers() const override { return true; }

  void session_closed(const Session& session, const ScenarioOptions& options, RunResult& run) const override {
    const auto& name = session.settings().name;
    const auto& ch = channel(session);
    note_socket_dir(session, run);
    if (!session.launched()) {
      auto settings = settings_of(options);
      auto regs = ch.registrations();
      if (!regs.empty()) {
        const auto& last = regs.back();
        std::string values = "samples-delay-ms " + std::to_string(settings.restore_samples_delay_ms) + ", host-id \"" +
                             settings.restore_host_id + "\"";
        run.notes.push_back(last.sent() && !last.judged &&
                                    last.message.samples_delay_ms == settings.restore_samples_delay_ms
                                ? "left the agent registered with " + values + " (--samples-delay-ms, --host-id)"
                                : "could not restore the registration (" + values +
                                      "): the agent may still hold a test registration; restart its profiler");
      } else {
        run.notes.push_back("sent no registration: the agent's registration is as it was");
      }
    }
    if (name == kEnabledSession) {
      auto cap = ch.socket_capacity();
      run.notes.push_back(capacity_note(cap, sends_messages(options)));
      if (cap) {
        run.counters["socket_capacity.burst"] = cap->burst;
        run.counters["socket_capacity.per_second"] = static_cast<std::uint64_t>(cap->per_second());
      }
    }
    run.counters["messages_sent." + name] = ch.sent_messages().size();
    run.counters["messages_lost." + name] = ch.messages_lost();
  }

  Figures figures(const SessionSet& sessions) const override { return collect_figures(sessions); }
};

}  // namespace

Expected<Settings> parse_settings(const ScenarioOptions& options) {
  Settings s;
  auto personality = options.setting("personality", "spec");
  if (!agent::parse_personality(personality, s.personality))
    return make_error("unknown personality '" + personality + "' (spec, ebpf-profiler)", "--personality");
  auto delay = options.setting("samples-delay-ms");
  if (!delay.empty()) {
    char* end = nullptr;
    errno = 0;
    unsigned long long v = std::strtoull(delay.c_str(), &end, 10);
    if (errno || !end || *end || delay.front() == '-' || v > 0xFFFFFFFFull)
      return make_error("not a delay in milliseconds (0 to 4294967295): \"" + delay + "\"", "--samples-delay-ms");
    s.restore_samples_delay_ms = static_cast<std::uint32_t>(v);
  }
  auto host = options.settings.find("host-id");
  s.restore_host_id = host != options.settings.end() ? host->second : machine_id();
  if (auto dir = options.setting("socket-dir"); !dir.empty()) {
    std::error_code ec;
    if (dir.front() != '/' || !std::filesystem::is_directory(dir, ec))
      return make_error("not an existing directory given by its absolute path: \"" + dir + "\"", "--socket-dir");
    s.socket_dir_parent = dir;
  }
  return s;
}

Settings settings_of(const ScenarioOptions& options) {
  auto parsed = parse_settings(options);
  return parsed ? *parsed : Settings{};
}

std::vector<Finding> not_run(const std::vector<std::string>& ids, const std::string& why) {
  std::vector<Finding> out;
  for (const auto& id : ids)
    out.push_back(not_applicable(id, why.empty() ? "the session this requirement needs did not run (attach mode or --only)" : why));
  return out;
}

const Suite& suite() {
  static const ElasticSuite s;
  return s;
}

}  // namespace tracecorr::elastic_v1

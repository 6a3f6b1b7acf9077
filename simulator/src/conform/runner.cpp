#include "tracecorr/conform/runner.hpp"

#include <sys/utsname.h>
#include <unistd.h>

#include <cstdio>

#include <algorithm>
#include <atomic>
#include <map>
#include <optional>
#include <iterator>
#include <set>
#include <thread>

#include "tracecorr/conform/probe.hpp"
#include "tracecorr/conform/report.hpp"
#include "tracecorr/conform/discovery_wait.hpp"
#include "tracecorr/conform/target.hpp"

namespace tracecorr::conform {
namespace {

std::string repeat_command(const RunOptions& o, const std::string& id) {
  std::vector<std::string> argv{"tracecorr", "conform", "--only", id};
  if (!o.protocol.empty()) argv.insert(argv.end(), {"--protocol", o.protocol});
  if (o.strict) argv.push_back("--strict");
  for (const auto& [name, value] : o.scenario.settings) argv.insert(argv.end(), {"--" + name, value});
  if (!o.target.gdbstub.empty()) argv.insert(argv.end(), {"--gdbstub", o.target.gdbstub});
  if (o.target.pid) {
    argv.insert(argv.end(), {"--pid", std::to_string(*o.target.pid)});
    if (o.target.otlp_port) argv.insert(argv.end(), {"--otlp-port", std::to_string(o.target.otlp_port)});
  } else {
    argv.push_back("--");
    argv.insert(argv.end(), o.target.command.begin(), o.target.command.end());
  }
  return shell_join(argv);
}

void say(const RunOptions& o, const std::string& line) {
  // Session errors quote what the target published: escaped like the report.
  if (o.progress) std::fprintf(o.progress, "tracecorr conform: %s\n", printable_text(line).c_str());
}

// How late the agent's child spans (never held back by any protocol's rules)
// reach the receiver: the batch span processor's schedule delay, as seen from
// outside. Above kCoarseBatchingMs the suite's timing areas (judged at a few
// hundred ms) cannot be timed.
constexpr double kCoarseBatchingMs = 250;
struct ExportBatching {
  std::size_t child_spans = 0, requests = 0;
  double median_lag_ms = 0;
  bool coarse() const { return child_spans >= 5 && median_lag_ms > kCoarseBatchingMs; }
  std::string figures() const {
    return std::to_string(child_spans) + " child spans in " + std::to_string(requests) +
           " exports arrived a median " + std::to_string(static_cast<long long>(median_lag_ms)) +
           " ms after they ended";
  }
};

ExportBatching measure_export_batching(const Session& s) {
  ExportBatching b;
  std::vector<double> lags;
  std::set<std::size_t> requests;
  for (const auto& sp : s.receiver().spans()) {
    if (!sp.parent_span_id || sp.end_unix_nano == 0) continue;
    auto end = std::chrono::system_clock::time_point(
        std::chrono::duration_cast<std::chrono::system_clock::duration>(std::chrono::nanoseconds(sp.end_unix_nano)));
    lags.push_back(std::chrono::duration<double, std::milli>(sp.received_at_system - end).count());
    requests.insert(sp.request_index);
  }
  b.child_spans = lags.size();
  b.requests = requests.size();
  if (!lags.empty()) {
    std::nth_element(lags.begin(), lags.begin() + static_cast<long>(lags.size() / 2), lags.end());
    b.median_lag_ms = lags[lags.size() / 2];
  }
  return b;
}

std::string agent_settings_advice(const RunOptions& o) {
  std::string port = o.target.otlp_port ? std::to_string(o.target.otlp_port) : "PORT";
  return "start the agent with OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf (tracecorr receives OTLP/HTTP only), "
         "OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:" + port +
         " and OTEL_BSP_SCHEDULE_DELAY=50 (the SDK's default 5000 ms batches every span)";
}

}  // namespace

Expected<const Suite*> choose_suite(const std::string& protocol) {
  auto all = suites();
  std::string names;
  for (const auto* s : all) names += (names.empty() ? "" : ", ") + std::string(s->protocol().id);
  if (protocol.empty()) {
    if (all.size() == 1) return all.front();
    return make_error(all.empty() ? "no protocol suite is registered" : "choose a protocol: " + names, "--protocol");
  }
  if (const auto* s = find_suite(protocol)) return s;
  // A registered protocol whose package brings no suite yet: its requirements
  // are known (tracecorr list), there is nothing to run.
  if (find_protocol(protocol))
    return make_error("protocol \"" + protocol + "\" has no conformance suite yet; its requirements: tracecorr list --protocol " +
                          protocol + " (suites: " + names + ")",
                      "--protocol");
  return make_error("unknown protocol \"" + protocol + "\" (known: " + names + ")", "--protocol");
}

std::vector<std::string> expand_areas(const Suite& suite, const std::vector<std::string>& only) {
  std::vector<std::string> ids;
  for (const auto& token : only) {
    bool area = false;
    for (const auto& r : suite.protocol().requirements)
      if (r.area == token) {
        area = true;
        ids.emplace_back(r.id);
      }
    if (!area) ids.push_back(token);
  }
  return ids;
}

std::vector<std::string> selected_requirements(const Suite& suite, const std::vector<std::string>& only) {
  auto wanted = expand_areas(suite, only);
  std::vector<std::string> ids;
  for (const auto& r : suite.protocol().requirements) {
    if (r.role != Role::Agent) continue;
    std::string id(r.id);
    if (only.empty() || std::find(wanted.begin(), wanted.end(), id) != wanted.end()) ids.push_back(id);
  }
  return ids;
}

// One session from launch (or attach) to evidence, and what it adds to the
// run; sessions run concurrently (run_conformance), so nothing here touches
// the run itself.
struct SessionRun {
  std::string name;
  std::optional<SessionEvidence> evidence;
  std::optional<std::string> error;  // could not open, or its scenario failed
  std::optional<std::string> lost;   // attach mode: the process judged went away
  std::string judged;                // which process was judged, and why
  std::string loader_view_note;
  RunResult closed;                  // the notes and counters the session adds
  std::optional<ExportBatching> coarse_batching;
  std::optional<Session::PreflightRun> preflight;  // the process judged was a run before the agent that stays
};

SessionRun run_session_once(const Suite& suite, const RunOptions& o, const ScenarioOptions& scenario, const std::string& name,
                            const std::vector<std::string>& pass_over) {
  SessionRun r;
  r.name = name;
  const bool attach_mode = o.target.pid.has_value();
  auto started = std::chrono::steady_clock::now();
  say(o, "session " + name + ": " + (attach_mode ? "attaching" : "launching"));
  TargetSpec target = o.target;
  target.pass_over = pass_over;
  target.publishes = [&suite](pid_t pid) { return suite.publishes(pid); };
  auto session = suite.open_session(target, name, scenario);
  if (!session) {
    r.error = session.error().message();
    say(o, "session " + name + ": " + session.error().message());
    return r;
  }
  if (const auto& judged = (*session)->judged_process(); !judged.empty()) {
    say(o, "session " + name + ": judging " + judged);
    r.judged = judged;
    if (const auto& lib = (*session)->library(); lib && !lib->elf.loader_view_note.empty())
      r.loader_view_note = "library " + lib->path + ": " + lib->elf.loader_view_note;
  }
  if (auto st = suite.run_scenario(**session, scenario); !st) r.error = st.error().message();
  (*session)->close();
  r.preflight = (*session)->preflight_run();
  // What had to be stopped beyond the launched process group, or killed.
  if (const auto& tree = (*session)->target().stopped_tree(); tree && (!tree->killed.empty() || !tree->left_group.empty()))
    r.closed.notes.push_back("session " + name + ": " + tree->describe());
  // Attach mode: a target that exited or exec'd mid-run leaves verdicts about
  // a process that is no longer the one judged (a failed SOCK-02 against a
  // vanished socket, 16 passes against a new image): the environment's error.
  if (attach_mode)
    if (auto lost = (*session)->target().attached_process_lost()) {
      r.lost = *lost;
      say(o, "session " + name + ": " + *lost);
    }
  suite.session_closed(**session, scenario, r.closed);
  if (attach_mode) {
    if ((*session)->receiver().counters().spans == 0 && o.target.otlp_port)
      r.closed.notes.push_back("no span arrived at port " + std::to_string(o.target.otlp_port) + ": " +
                               agent_settings_advice(o));
    auto batching = measure_export_batching(**session);
    if (batching.coarse()) {
      r.closed.notes.push_back("spans arrive in large periodic batches (" + batching.figures() + "): " +
                               agent_settings_advice(o));
      say(o, "the agent exports in large batches (" + batching.figures() + "); " + agent_settings_advice(o));
      r.coarse_batching = batching;
    }
  }
  r.closed.counters["spans_received." + name] = (*session)->receiver().counters().spans;
  auto seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  say(o, "session " + name + ": done in " + std::to_string(seconds).substr(0, 4) + " s, " +
             std::to_string((*session)->receiver().counters().spans) + " spans received");
  r.evidence = (*session)->evidence();
  return r;
}

// A session whose judged process turned out to be a run before the agent
// that stays (a pre-flight `agent --check`) is launched again, passing over
// it: at most this many times.
constexpr std::size_t kMaxPassedOver = 2;

SessionRun run_session(const Suite& suite, const RunOptions& o, const ScenarioOptions& scenario, const std::string& name) {
  std::vector<std::string> passed, signatures;
  for (;;) {
    SessionRun r = run_session_once(suite, o, scenario, name, signatures);
    if (!r.preflight || signatures.size() == kMaxPassedOver) {
      for (const auto& p : passed) r.closed.notes.push_back("session " + name + ": " + p + "; launched again, passing over it");
      return r;
    }
    say(o, "session " + name + ": " + r.preflight->description + "; launching again, passing over it");
    passed.push_back(r.preflight->description);
    signatures.push_back(r.preflight->signature);
  }
}

Expected<const Suite*> detect_suite(const TargetSpec& target, const std::vector<std::string>& only, std::string& why) {
  const auto all = suites();
  if (all.size() == 1) {
    why = "the only protocol tracecorr knows";
    return all.front();
  }
  // Requirements named by --only belong to one suite: no trial launch needed.
  for (const auto& token : only) {
    const Suite* owner = suite_of_requirement(token);
    for (const auto* s : all)
      for (const auto& r : s->protocol().requirements)
        if (r.area == token) owner = s;
    if (owner) {
      why = std::string(owner->protocol().id) + ": --only names its " + token;
      return owner;
    }
  }
  if (!only.empty()) return make_error("unknown requirement id or area " + only.front() + " (see tracecorr list)", "--only");
  if (!target.gdbstub.empty()) {
    std::vector<const Suite*> candidates;
    std::copy_if(all.begin(), all.end(), std::back_inserter(candidates), [](const Suite* s) { return s->reads_thread_pointers(); });
    if (candidates.size() != 1) return make_error("with --gdbstub, name the protocol", "--protocol");
    why = "--gdbstub: the only protocol read through thread pointers";
    return candidates.front();
  }
  auto first_publisher = [&](const std::vector<TreeProcess>& tree) -> std::optional<std::pair<const Suite*, pid_t>> {
    for (const auto& p : tree) {
      const Suite* best = nullptr;
      for (const auto* s : all)
        if ((!best || s->detection_rank() > best->detection_rank()) && s->publishes(p.pid)) best = s;
      if (best) return std::make_pair(best, p.pid);
    }
    return std::nullopt;
  };
  auto found = [&](std::pair<const Suite*, pid_t> hit, const std::string& how) -> const Suite* {
    why = std::string(hit.first->protocol().id) + ": " + how + " pid " + std::to_string(hit.second) + " publishes it";
    return hit.first;
  };
  if (target.pid) {
    if (auto hit = first_publisher({TreeProcess{*target.pid, 0, 0, "", true}})) return found(*hit, "attached");
    return make_error(ErrorKind::kNotFound, "pid " + std::to_string(*target.pid) + " publishes none of the protocols tracecorr knows",
                      "--protocol auto");
  }
  LaunchSpec launch;
  launch.argv = target.command;
  auto launched = Target::launch(launch);
  if (!launched) return make_error(ErrorKind::kNotFound, "a trial launch failed: " + launched.error().message(), "--protocol auto");
  // As long as a session's discovery would wait: on the target's progress.
  DiscoveryWait wait(
      [t = launched->get()] {
        std::vector<pid_t> pids;
        for (const auto& p : t->processes()) pids.push_back(p.pid);
        return pids;
      },
      target.discovery);
  std::optional<std::pair<const Suite*, pid_t>> hit;
  while (!hit && !wait.over()) {
    auto tree = (*launched)->processes();
    hit = first_publisher(tree);
    if (!hit && tree.empty()) break;
    if (!hit) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  const std::string ended = (*launched)->stop();
  if (hit) return found(*hit, "a trial launch:");
  if (wait.starved())
    return make_error(ErrorKind::kNotFound,
                      "inconclusive: a trial launch: " + wait.figures(),
                      "--protocol auto");
  return make_error(ErrorKind::kNotFound, "the command published none of the protocols tracecorr knows in a trial launch (it " +
                        ended + "; the wait ended: " + wait.figures() + "); name one with --protocol",
                    "--protocol auto");
}

Expected<RunResult> run_conformance(const RunOptions& given) {
  std::string detected;
  auto chosen = given.protocol.empty() || given.protocol == "auto" ? detect_suite(given.target, given.only, detected)
                                                                    : choose_suite(given.protocol);
  if (!chosen) return chosen.error();
  const Suite& suite = **chosen;
  // The suite's own options, as given or else their defaults, so that reports
  // and repeat commands name every setting the run used; a setting the suite
  // does not declare (another suite's option) is not this run's.
  RunOptions o = given;
  o.scenario.settings.clear();
  for (const auto& option : suite.options()) {
    if (auto value = given.scenario.settings.find(option.name); value != given.scenario.settings.end())
      o.scenario.settings[option.name] = value->second;
    else if (!option.default_value.empty())
      o.scenario.settings[option.name] = option.default_value;
  }
  if (auto st = suite.check(o.scenario); !st) return st.error();
  auto expanded = expand_areas(suite, o.only);
  for (const auto& id : expanded)
    if (!suite_of_requirement(id) || suite_of_requirement(id) != &suite)
      return make_error("unknown requirement id or area " + id + " for " + std::string(suite.protocol().id) +
                            " (see tracecorr list)",
                        "--only");
  auto ids = selected_requirements(suite, o.only);
  if (ids.empty()) return make_error("the filter matches no agent requirement (profiler requirements are tracecorr agent's)", "--only");

  RunResult run;
  run.tool_version = std::string(kToolVersion);
  run.target.description = o.target.pid ? "pid " + std::to_string(*o.target.pid) : shell_join(o.target.command);
  if (o.target.pid) run.target.pid = *o.target.pid;
  struct utsname u{};
  uname(&u);
  run.target.arch = u.machine;
  run.protocol = std::string(suite.protocol().id);
  run.personality = o.scenario.setting("personality");
  run.strict = o.strict;
  run.started = std::chrono::system_clock::now();
  if (!detected.empty() && suites().size() > 1) run.notes.push_back("protocol chosen by --protocol auto: " + detected);

  // Scenarios send only what the judged requirements need; observe-only sends nothing.
  ScenarioOptions scenario = o.scenario;
  if (!o.only.empty()) scenario.judged = ids;
  auto observed_only = [&](const std::string& id) { return scenario.observe_only && suite.judged_by_sending(id); };
  std::vector<std::string> probed;
  for (const auto& id : ids)
    if (!observed_only(id)) probed.push_back(id);

  // The probes these requirements need, and the sessions those probes read.
  std::vector<const Probe*> probes;
  std::set<std::string> wanted_sessions;
  for (const auto& p : suite.probes()) {
    bool needed = false;
    for (const auto& id : p->requirements()) {
      if (!std::count(probed.begin(), probed.end(), id)) continue;
      needed = true;
      for (const auto& s : p->sessions_for(id)) wanted_sessions.insert(s);
    }
    if (needed) probes.push_back(p.get());
  }

  SessionSet sessions;
  sessions.attach_mode = o.target.pid.has_value();
  std::vector<std::string> to_run;
  if (sessions.attach_mode) {
    // The one session an attached target can run (the others need a restart
    // with other settings) judges whatever it can of every requirement asked.
    if (!probes.empty()) to_run.push_back(suite.attach_session());
  } else {
    for (const auto& name : suite.session_names())
      if (wanted_sessions.count(name)) to_run.push_back(name);
  }
  // Sessions are independent (each launches its own target with its own
  // receiver and socket directory), so they overlap; what each adds to the
  // run is merged afterwards in the suite's order, so reports do not depend
  // on which finished first.
  std::vector<SessionRun> outcomes(to_run.size());
  std::atomic<std::size_t> next{0};
  auto worker = [&] {
    for (std::size_t i; (i = next++) < to_run.size();) outcomes[i] = run_session(suite, o, scenario, to_run[i]);
  };
  // By default two per CPU: a session mostly waits out its scenario's phases
  // (its target's own threads are what load the CPUs), so one per CPU leaves
  // them idle. But on a machine already as busy as it has CPUs, overlapping
  // targets only starve each other of the transactions the judges need (a
  // receiver flood beside stress-ng turned DEFER-06 into "too few
  // transactions"): then one at a time.
  const unsigned cpus = std::max(1u, std::thread::hardware_concurrency());
  double load = 0;
  if (std::FILE* f = std::fopen("/proc/loadavg", "re")) {
    if (std::fscanf(f, "%lf", &load) != 1) load = 0;
    std::fclose(f);
  }
  const std::size_t automatic = load >= static_cast<double>(cpus) ? 1 : 2 * cpus;
  const std::size_t jobs = std::clamp<std::size_t>(o.jobs ? o.jobs : automatic, 1, std::max<std::size_t>(1, to_run.size()));
  if (!o.jobs && automatic == 1 && to_run.size() > 1)
    say(o, "sessions one at a time: the load average (" + std::to_string(load).substr(0, 4) + ") is already at " +
               std::to_string(cpus) + " CPUs (--jobs N overrides)");
  {
    std::vector<std::thread> pool;
    for (std::size_t j = 1; j < jobs; ++j) pool.emplace_back(worker);
    worker();
    for (auto& t : pool) t.join();
  }
  std::map<std::string, std::string> session_errors, lost_sessions;
  bool judged_noted = false;  // which process was judged: said once (each session's is in the progress lines)
  std::optional<ExportBatching> coarse_batching;  // attach mode: the agent's own export schedule
  for (auto& r : outcomes) {
    if (r.error) session_errors[r.name] = *r.error;
    if (r.lost) lost_sessions[r.name] = *r.lost;
    if (!r.judged.empty() && !judged_noted) {
      run.notes.push_back("session " + r.name + " judged " + r.judged);
      if (!r.loader_view_note.empty()) run.notes.push_back(r.loader_view_note);
      judged_noted = true;
    }
    run.notes.insert(run.notes.end(), r.closed.notes.begin(), r.closed.notes.end());
    for (const auto& [k, v] : r.closed.counters) run.counters[k] = v;
    if (r.coarse_batching) coarse_batching = r.coarse_batching;
    if (r.evidence) sessions.add(std::move(*r.evidence));
  }

  std::map<std::string, std::pair<Finding, const Probe*>> findings;
  for (const auto* p : probes) {
    for (auto& f : p->judge(sessions)) {
      std::string id = f.requirement;
      findings.emplace(std::move(id), std::make_pair(std::move(f), p));
    }
  }

  for (const auto& id : ids) {
    auto result = make_result(id);
    if (!result) return result.error();
    auto& r = *result;
    r.repeat_command = repeat_command(o, id);
    auto it = findings.find(id);
    if (observed_only(id)) {
      r.verdict = Verdict::Skip;
      r.reason = "--observe-only: tracecorr sent nothing, and this requirement is judged by what it sends";
    } else if (it == findings.end()) {
      r.verdict = Verdict::Error;
      r.reason = "no probe judged this requirement";
    } else {
      const auto& [f, probe] = it->second;
      r.probe = probe->name();
      r.verdict = verdict_of(f.outcome);
      r.reason = f.reason;
      r.evidence = f.evidence;
      r.evidence_count = f.evidence_count;
      r.evidence_minimum = probe->minimum_evidence(id);
      enforce_evidence_minimum(r);
      // A session that could not run is the environment's fault, not the agent's.
      const auto read = sessions.attach_mode ? std::vector<std::string>{suite.attach_session()} : probe->sessions_for(id);
      for (const auto& s : read)
        if (auto e = session_errors.find(s); e != session_errors.end() && r.verdict == Verdict::Skip) {
          r.verdict = Verdict::Error;
          r.reason = "session " + s + " failed: " + e->second;
        }
      for (const auto& s : read)
        if (auto e = lost_sessions.find(s); e != lost_sessions.end()) {
          r.verdict = Verdict::Error;
          r.reason = "session " + s + ": " + e->second + "; not judged (was: " + r.reason + ")";
        }
      // Export batching coarser than the delays judged: timing cannot be judged (too noisy to tell).
      auto timing = suite.timing_areas();
      if (coarse_batching && std::count(timing.begin(), timing.end(), r.area) &&
          (r.verdict == Verdict::Fail || r.verdict == Verdict::Pass)) {
        r.verdict = Verdict::Error;
        r.reason = "cannot time " + r.area + ": " + coarse_batching->figures() + ", coarser than the delays judged; " +
                   agent_settings_advice(o);
        r.evidence.clear();
      }
      if (r.verdict == Verdict::Fail) apply_level(r, o.strict);
    }
    run.results.push_back(std::move(r));
  }
  run.figures = suite.figures(sessions);
  run.finished = std::chrono::system_clock::now();
  return run;
}

}  // namespace tracecorr::conform

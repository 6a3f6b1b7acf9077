#include "tracecorr/conform/runner.hpp"

#include <sys/utsname.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>

#include <algorithm>
#include <atomic>
#include <map>
#include <optional>
#include <iterator>
#include <set>
#include <thread>

#include "tracecorr/conform/probe.hpp"
#include "tracecorr/text.hpp"
#include "tracecorr/conform/discovery_wait.hpp"
#include "tracecorr/conform/target.hpp"

namespace tracecorr::conform {
namespace {

// `protocol`: the suite's id when the run named protocols or judged several
// (--only alone chooses the suite otherwise).
std::string repeat_command(const RunOptions& o, const std::string& protocol, const std::string& id) {
  std::vector<std::string> argv{"tracecorr", "conform", "--only", id};
  if (!protocol.empty()) argv.insert(argv.end(), {"--protocol", protocol});
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
  std::optional<std::string> attacked;  // what reached its receiver from outside the judged tree
  std::optional<Session::PreflightRun> preflight;  // the process judged was a run before the agent that stays
  std::string passed_over_stayed;                  // a process passed over did not exit by itself
};

// What came to the session's receiver from outside the judged process tree:
// counted, named in the notes, and remembered for the timing verdicts.
void note_foreign_exports(const Session& s, const std::string& name, SessionRun& r) {
  const auto c = s.receiver().counters();
  r.closed.counters["exports_refused." + name] = c.foreign_exports;
  r.closed.counters["connections_refused." + name] = c.foreign_connections;
  r.closed.counters["connections_abandoned." + name] = c.connections_abandoned;
  // A run of the agent before the one that stays exports with its settings.
  const auto others = s.other_exporters();
  r.closed.counters["spans_not_judged." + name] = others.spans;
  if (others.spans)
    r.closed.notes.push_back("session " + name + ": " + others.describe() + " of the launched tree, not the judged pid " +
                             std::to_string(s.pid()) + " or a descendant of it (a run before the agent "
                             "that stays, say): counted in no verdict");
  r.closed.counters["exports_lost." + name] = c.losses.total();
  if (c.losses.any())
    r.closed.notes.push_back("session " + name + ": exports of the judged tree did not reach the receiver whole (" +
                             c.losses.describe() + "): ids and spans that could have been in them are not taken for "
                             "never exported");
  if (c.exports_by_token)
    r.closed.notes.push_back("session " + name + ": " + std::to_string(c.exports_by_token) +
                             " exports came from outside the launched tree with the session token the agent was "
                             "handed (an exporter that left the tree): counted as the agent's");
  if (!c.attacked()) return;
  r.attacked = c.describe_foreign();
  r.closed.notes.push_back("session " + name + ": the OTLP receiver refused " + *r.attacked +
                           "; none of it counts in any verdict");
}

// Attach mode: where the agent's exports were received (its own network
// namespace, when it has one), and advice when none came or they came in
// batches too coarse to time; never advice blaming the exporter for what an
// attack on the receiver did.
void note_attached_exports(const RunOptions& o, const Session& s, SessionRun& r) {
  const std::string port = std::to_string(o.target.otlp_port);
  const std::string& ns = s.receiver_namespace();
  if (!ns.empty())
    r.closed.notes.push_back("pid " + std::to_string(*o.target.pid) + " has a network namespace of its own (" + ns +
                             "): tracecorr received its exports inside it, on that namespace's 127.0.0.1:" + port);
  if (s.receiver().counters().spans == 0 && o.target.otlp_port)
    r.closed.notes.push_back("no span arrived at port " + port + (ns.empty() ? "" : " of " + ns) + ": " +
                             (r.attacked ? "the receiver was under attack (" + *r.attacked + ")"
                                         : agent_settings_advice(o)));
  auto batching = measure_export_batching(s);
  if (!batching.coarse()) return;
  const std::string why = r.attacked ? "while the receiver was under attack (" + *r.attacked + ")" : agent_settings_advice(o);
  r.closed.notes.push_back("spans arrive in large periodic batches (" + batching.figures() + "): " + why);
  say(o, "the agent exports in large batches (" + batching.figures() + "); " + why);
  r.coarse_batching = batching;
}

SessionRun run_session_once(const Suite& suite, const RunOptions& o, const ScenarioOptions& scenario, const std::string& name,
                            const std::vector<PassOver>& pass_over, bool watch_after_stop) {
  SessionRun r;
  r.name = name;
  const bool attach_mode = o.target.pid.has_value();
  auto started = std::chrono::steady_clock::now();
  say(o, "session " + name + ": " + (attach_mode ? "attaching" : "launching"));
  TargetSpec target = o.target;
  target.pass_over = pass_over;
  target.watch_after_stop = watch_after_stop;
  target.publishes = [&suite](pid_t pid) { return suite.published(pid).kind == Published::Kind::Readable; };
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
  r.passed_over_stayed = (*session)->passed_over_stayed();
  if (const auto& after = (*session)->run_after_stop(); !after.empty()) r.closed.notes.push_back("session " + name + ": " + after);
  // What had to be stopped beyond the launched process group, or killed; and
  // always a hold weaker than a cgroup of its own, which a user should know
  // held the tree (it sees only the members it found).
  if (const auto& tree = (*session)->target().stopped_tree();
      tree && (!tree->killed.empty() || !tree->left_group.empty() || !tree->held_by_cgroup))
    r.closed.notes.push_back("session " + name + ": " + tree->describe());
  // Attach mode: a target that exited or exec'd mid-run leaves verdicts about
  // a process that is no longer the one judged (a failed socket check against a
  // vanished socket, 16 passes against a new image): the environment's error.
  if (attach_mode)
    if (auto lost = (*session)->target().attached_process_lost()) {
      r.lost = *lost;
      say(o, "session " + name + ": " + *lost);
    }
  suite.session_closed(**session, scenario, r.closed);
  note_foreign_exports(**session, name, r);
  if (attach_mode) note_attached_exports(o, **session, r);
  r.closed.counters["spans_received." + name] = (*session)->receiver().counters().spans;
  auto seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  say(o, "session " + name + ": done in " + std::to_string(seconds).substr(0, 4) + " s, " +
             std::to_string((*session)->receiver().counters().spans) + " spans received");
  r.evidence = (*session)->evidence();
  return r;
}

// A session whose judged process turned out to be a run before the agent
// that stays (a pre-flight `agent --check`) is launched again, passing over
// it: at most this many times; and once more, passing over nothing, when a
// process passed over did not exit by itself (it was the agent that stays).
constexpr std::size_t kMaxPassedOver = 2;

SessionRun run_session(const Suite& suite, const RunOptions& o, const ScenarioOptions& scenario, const std::string& name) {
  std::vector<std::string> notes;
  std::vector<PassOver> pass_over;
  bool watch_after_stop = true;
  for (;;) {
    SessionRun r = run_session_once(suite, o, scenario, name, pass_over, watch_after_stop);
    if (!r.passed_over_stayed.empty() && watch_after_stop) {
      notes.push_back(r.passed_over_stayed + "; launched again, passing over nothing");
      say(o, "session " + name + ": " + notes.back());
      pass_over.clear();
      watch_after_stop = false;  // what was seen after stopping it was no run before the agent
      continue;
    }
    if (!r.preflight || pass_over.size() == kMaxPassedOver || !watch_after_stop) {
      for (const auto& n : notes) r.closed.notes.push_back("session " + name + ": " + n);
      return r;
    }
    notes.push_back(r.preflight->description + "; launched again, passing over it");
    say(o, "session " + name + ": " + notes.back());
    pass_over.push_back(r.preflight->pass_over);
  }
}

// ---- which protocols: --protocol auto -----------------------------------------------

namespace {

// After the first protocol appears in a trial launch, the others may come
// later (a process context published at start, an agent library loaded with
// the first request): the trial watches on until the launched tree has used
// this much more CPU time, within these wall-clock bounds.
constexpr std::chrono::milliseconds kMoreProtocolsCpu{300};
constexpr std::chrono::milliseconds kMoreProtocolsWallMin{250};
constexpr std::chrono::milliseconds kMoreProtocolsWallMax{3000};

// CPU time (user + system, every thread, ns) the processes of `tree` used so
// far: /proc/PID/stat fields 14 and 15. 0 for a process that is gone.
std::uint64_t tree_cpu_ns(const std::vector<TreeProcess>& tree) {
  static const long ticks = ::sysconf(_SC_CLK_TCK);
  std::uint64_t total = 0;
  for (const auto& p : tree) {
    std::FILE* f = std::fopen(("/proc/" + std::to_string(p.pid) + "/stat").c_str(), "re");
    if (!f) continue;
    char line[1024];
    const bool read = std::fgets(line, sizeof line, f) != nullptr;
    std::fclose(f);
    const char* after_comm = read ? std::strrchr(line, ')') : nullptr;
    unsigned long long utime = 0, stime = 0;
    // After ") ": state, then fields 4..13, then utime (14) and stime (15).
    if (after_comm && std::sscanf(after_comm + 1, " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &utime,
                                  &stime) == 2 && ticks > 0)
      total += (utime + stime) * 1000000000ull / static_cast<std::uint64_t>(ticks);
  }
  return total;
}

struct Sighting {
  const Suite* suite = nullptr;
  pid_t pid = 0;
  Published published;
};

// Asks every suite not yet seen readable about every process of `tree`
// (parents first): a readable sighting replaces an unread one.
void look(const std::vector<const Suite*>& all, const std::vector<TreeProcess>& tree, std::vector<Sighting>& seen) {
  for (const auto* s : all) {
    auto it = std::find_if(seen.begin(), seen.end(), [&](const Sighting& x) { return x.suite == s; });
    if (it != seen.end() && it->published.kind == Published::Kind::Readable) continue;
    for (const auto& p : tree) {
      auto published = s->published(p.pid);
      if (published.kind == Published::Kind::No) continue;
      if (it == seen.end()) {
        seen.push_back({s, p.pid, std::move(published)});
        it = seen.end() - 1;
      } else if (published.kind == Published::Kind::Readable) {
        *it = {s, p.pid, std::move(published)};
      }
      if (it->published.kind == Published::Kind::Readable) break;
    }
  }
}

// The sightings in the suites' registration order, as the run judges them.
std::vector<DetectedProtocol> detected_of(const std::vector<const Suite*>& all, const std::vector<Sighting>& seen,
                                          const std::string& how) {
  std::vector<DetectedProtocol> out;
  for (const auto* s : all)
    for (const auto& x : seen)
      if (x.suite == s) {
        const bool unread = x.published.kind == Published::Kind::Unread;
        out.push_back({s, how + " pid " + std::to_string(x.pid) + (unread ? " announces it" : " publishes it"),
                       unread ? x.published.seen : std::string()});
      }
  return out;
}

std::string not_seen_of(const std::vector<const Suite*>& all, const std::vector<Sighting>& seen) {
  std::string names;
  for (const auto* s : all)
    if (std::none_of(seen.begin(), seen.end(), [&](const Sighting& x) { return x.suite == s; }))
      names += (names.empty() ? "" : ", ") + std::string(s->protocol().id);
  return names;
}

// The trial launch: until the first sighting (or the discovery timeout), then
// until the tree used kMoreProtocolsCpu more (kMoreProtocolsWall* bounds).
Expected<std::vector<DetectedProtocol>> detect_in_trial_launch(const TargetSpec& target,
                                                               const std::vector<const Suite*>& all, std::string& note) {
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
  using Clock = std::chrono::steady_clock;
  std::vector<Sighting> seen;
  std::optional<Clock::time_point> first_at;
  std::uint64_t cpu_at_first = 0, cpu_now = 0;
  for (;;) {
    auto tree = (*launched)->processes();
    if (tree.empty()) break;
    look(all, tree, seen);
    cpu_now = tree_cpu_ns(tree);
    const auto now = Clock::now();
    if (!seen.empty() && !first_at) {
      first_at = now;
      cpu_at_first = cpu_now;
    }
    if (seen.size() == all.size() && std::all_of(seen.begin(), seen.end(), [](const Sighting& x) {
          return x.published.kind == Published::Kind::Readable;
        }))
      break;
    if (first_at && ((now - *first_at >= kMoreProtocolsWallMin &&
                      cpu_now - cpu_at_first >= static_cast<std::uint64_t>(std::chrono::nanoseconds(kMoreProtocolsCpu).count())) ||
                     now - *first_at >= kMoreProtocolsWallMax))
      break;
    if (!first_at && wait.over()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(first_at ? 50 : 20));
  }
  const std::string ended = (*launched)->stop();
  if (seen.empty() && wait.starved())
    return make_error(ErrorKind::kNotFound, "inconclusive: a trial launch: " + wait.figures(), "--protocol auto");
  if (seen.empty())
    return make_error(ErrorKind::kNotFound, "the command published none of the protocols tracecorr knows in a trial launch (it " +
                          ended + "; the wait ended: " + wait.figures() + "); name one with --protocol",
                      "--protocol auto");
  if (auto missing = not_seen_of(all, seen); !missing.empty() && first_at)
    note = "--protocol auto: the trial launch watched " + std::to_string((cpu_now - cpu_at_first) / 1000000) +
           " ms of the target's CPU time after the first protocol appeared and saw no " + missing +
           " (name it with --protocol to judge it)";
  return detected_of(all, seen, "a trial launch:");
}

}  // namespace

Expected<std::vector<DetectedProtocol>> detect_protocols(const TargetSpec& target, std::string& note) {
  const auto all = suites();
  if (all.size() == 1) return std::vector<DetectedProtocol>{{all.front(), "the only protocol tracecorr knows", ""}};
  if (!target.gdbstub.empty()) {
    std::vector<const Suite*> candidates;
    std::copy_if(all.begin(), all.end(), std::back_inserter(candidates), [](const Suite* s) { return s->reads_thread_pointers(); });
    if (candidates.size() != 1) return make_error("with --gdbstub, name the protocol", "--protocol");
    return std::vector<DetectedProtocol>{{candidates.front(), "--gdbstub: the only protocol read through thread pointers", ""}};
  }
  if (target.pid) {
    std::vector<Sighting> seen;
    look(all, {TreeProcess{*target.pid, 0, 0, "", true}}, seen);
    if (seen.empty())
      return make_error(ErrorKind::kNotFound,
                        "pid " + std::to_string(*target.pid) + " publishes none of the protocols tracecorr knows",
                        "--protocol auto");
    return detected_of(all, seen, "attached:");
  }
  return detect_in_trial_launch(target, all, note);
}

// ---- the plan: protocols, requirements, sessions ---------------------------------------

namespace {

std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (start <= text.size()) {
    std::size_t end = text.find(',', start);
    if (end == std::string::npos) end = text.size();
    std::string item = text.substr(start, end - start);
    item.erase(0, item.find_first_not_of(" \t"));
    item.erase(item.find_last_not_of(" \t") + 1);
    if (!item.empty()) out.push_back(item);
    start = end + 1;
  }
  return out;
}

// The suite owning an --only token (a requirement id or an area), or nullptr.
const Suite* owner_of(const std::string& token) {
  if (const Suite* s = suite_of_requirement(token)) return s;
  for (const auto* s : suites())
    for (const auto& r : s->protocol().requirements)
      if (r.area == token) return s;
  return nullptr;
}

void add_protocol(std::vector<DetectedProtocol>& chosen, DetectedProtocol p) {
  for (auto& c : chosen)
    if (c.suite == p.suite) {
      if (c.chosen_by.find(p.chosen_by) == std::string::npos) c.chosen_by += ", " + p.chosen_by;
      return;
    }
  chosen.push_back(std::move(p));
}

// Which protocols the run judges, and whether the user named them: each
// named with --protocol; else those owning --only's tokens; else detected.
Expected<std::vector<ProtocolRun>> choose_protocols(const RunOptions& o, std::vector<DetectedProtocol>& chosen,
                                                    std::string& note) {
  auto names = split_list(o.protocol);
  const bool automatic = names.empty() || (names.size() == 1 && names.front() == "auto");
  if (!automatic && std::count(names.begin(), names.end(), "auto"))
    return make_error("auto cannot be combined with protocol names (" + o.protocol + ")", "--protocol");
  bool named = true;
  if (!automatic) {
    for (const auto& name : names) {
      auto suite = choose_suite(name);
      if (!suite) return suite.error();
      add_protocol(chosen, {*suite, "--protocol", ""});
    }
  } else if (!o.only.empty()) {
    for (const auto& token : o.only) {
      const Suite* owner = owner_of(token);
      if (!owner) return make_error("unknown requirement id or area " + token + " (see tracecorr list)", "--only");
      add_protocol(chosen, {owner, "--only " + token, ""});
    }
  } else {
    auto detected = detect_protocols(o.target, note);
    if (!detected) return detected.error();
    chosen = std::move(*detected);
    named = false;
  }
  std::vector<ProtocolRun> sections;
  for (const auto& c : chosen) sections.push_back({std::string(c.suite->protocol().id), named, c.chosen_by, c.not_applicable});
  return sections;
}

// One suite's share of the run.
struct SuitePlan {
  const Suite* suite = nullptr;
  ProtocolRun section;
  RunOptions options;       // the run's, with this suite's settings (given, else defaults)
  ScenarioOptions scenario;
  std::vector<std::string> ids;     // the requirements judged
  std::vector<std::string> probed;  // those a probe judges (not skipped by --observe-only)
  std::vector<const Probe*> probes;
  std::vector<std::string> sessions;  // to run, in the suite's order
  bool observed_only(const std::string& id) const {
    const Requirement* r = find_requirement(id);
    return scenario.observe_only && r && r->judged_by_sending;
  }
};

// The suite's own options, as given or else their defaults, so that reports
// and repeat commands name every setting the run used; a setting the suite
// does not declare (another suite's option) is not this suite's.
std::map<std::string, std::string> settings_for(const Suite& suite, const std::map<std::string, std::string>& given) {
  std::map<std::string, std::string> out;
  for (const auto& option : suite.options()) {
    if (auto value = given.find(option.name); value != given.end()) out[option.name] = value->second;
    else if (!option.default_value.empty()) out[option.name] = option.default_value;
  }
  return out;
}

Expected<SuitePlan> plan_suite(const Suite& suite, ProtocolRun section, const RunOptions& given) {
  SuitePlan plan;
  plan.suite = &suite;
  plan.section = std::move(section);
  plan.options = given;
  plan.options.scenario.settings = settings_for(suite, given.scenario.settings);
  if (auto st = suite.check(plan.options.scenario); !st) return st.error();
  std::vector<std::string> only;  // the --only tokens of this suite
  for (const auto& token : given.only)
    if (owner_of(token) == &suite) only.push_back(token);
  if (!given.only.empty() && only.empty())
    return make_error("the filter selects no requirement of " + plan.section.id + " (" + plan.section.chosen_by + ")", "--only");
  plan.ids = selected_requirements(suite, only);
  if (plan.ids.empty())
    return make_error("the filter matches no agent requirement of " + plan.section.id +
                          " (profiler requirements are tracecorr agent's)",
                      "--only");
  // Scenarios send only what the judged requirements need; observe-only sends nothing.
  plan.scenario = plan.options.scenario;
  if (!given.only.empty()) plan.scenario.judged = plan.ids;
  if (!plan.section.not_applicable.empty()) return plan;  // nothing to run: its requirements are not applicable
  for (const auto& id : plan.ids)
    if (!plan.observed_only(id)) plan.probed.push_back(id);
  // The probes these requirements need, and the sessions those probes read.
  std::set<std::string> wanted;
  for (const auto& p : suite.probes()) {
    bool needed = false;
    for (const auto& id : p->requirements()) {
      if (!std::count(plan.probed.begin(), plan.probed.end(), id)) continue;
      needed = true;
      for (const auto& s : p->sessions_for(id)) wanted.insert(s);
    }
    if (needed) plan.probes.push_back(p.get());
  }
  if (given.target.pid) {
    // The one session an attached target can run (the others need a restart
    // with other settings) judges whatever it can of every requirement asked.
    if (!plan.probes.empty()) plan.sessions.push_back(suite.attach_session());
  } else {
    for (const auto& name : suite.session_names())
      if (wanted.count(name)) plan.sessions.push_back(name);
  }
  return plan;
}

// Every --only token belongs to a suite the run judges.
Status check_only(const RunOptions& o, const std::vector<SuitePlan>& plans) {
  for (const auto& token : o.only) {
    const Suite* owner = owner_of(token);
    if (!owner || std::none_of(plans.begin(), plans.end(), [&](const SuitePlan& p) { return p.suite == owner; })) {
      std::string ids;
      for (const auto& p : plans) ids += (ids.empty() ? "" : ", ") + p.section.id;
      return make_error("unknown requirement id or area " + token + " for " + ids + " (see tracecorr list)", "--only");
    }
  }
  return Ok{};
}

}  // namespace

// ---- running and judging ---------------------------------------------------------------

namespace {

// By default two per CPU: a session mostly waits out its scenario's phases
// (its target's own threads are what load the CPUs), so one per CPU leaves
// them idle. But on a machine already as busy as it has CPUs, overlapping
// targets only starve each other of the work the judges need (a
// receiver flood beside stress-ng left a timing requirement with too few
// spans to judge): then one at a time. An attached process is one target:
// several suites' sessions on it run one after another (each may stop its
// threads).
std::size_t session_jobs(const RunOptions& o, std::size_t sessions, std::size_t suites_run) {
  const unsigned cpus = std::max(1u, std::thread::hardware_concurrency());
  double load = 0;
  if (std::FILE* f = std::fopen("/proc/loadavg", "re")) {
    if (std::fscanf(f, "%lf", &load) != 1) load = 0;
    std::fclose(f);
  }
  if (o.target.pid && suites_run > 1) return 1;
  const std::size_t automatic = load >= static_cast<double>(cpus) ? 1 : 2 * cpus;
  if (!o.jobs && automatic == 1 && sessions > 1)
    say(o, "sessions one at a time: the load average (" + std::to_string(load).substr(0, 4) + ") is already at " +
               std::to_string(cpus) + " CPUs (--jobs N overrides)");
  return std::clamp<std::size_t>(o.jobs ? o.jobs : automatic, 1, std::max<std::size_t>(1, sessions));
}

// Runs every plan's sessions in one pool; outcomes[i][j] is plans[i]'s j-th session.
std::vector<std::vector<SessionRun>> run_sessions(const RunOptions& o, const std::vector<SuitePlan>& plans) {
  std::vector<std::pair<std::size_t, std::size_t>> work;  // (plan, session)
  std::vector<std::vector<SessionRun>> outcomes(plans.size());
  std::size_t suites_run = 0;
  for (std::size_t i = 0; i < plans.size(); ++i) {
    outcomes[i].resize(plans[i].sessions.size());
    for (std::size_t j = 0; j < plans[i].sessions.size(); ++j) work.emplace_back(i, j);
    suites_run += plans[i].sessions.empty() ? 0 : 1;
  }
  std::atomic<std::size_t> next{0};
  auto worker = [&] {
    for (std::size_t k; (k = next++) < work.size();) {
      const auto [i, j] = work[k];
      const auto& plan = plans[i];
      outcomes[i][j] = run_session(*plan.suite, plan.options, plan.scenario, plan.sessions[j]);
    }
  };
  const std::size_t jobs = session_jobs(o, work.size(), suites_run);
  std::vector<std::thread> pool;
  for (std::size_t j = 1; j < jobs; ++j) pool.emplace_back(worker);
  worker();
  for (auto& t : pool) t.join();
  return outcomes;
}

// What one suite's sessions left: their evidence, errors and notes.
struct SuiteOutcome {
  SessionSet sessions;
  std::map<std::string, std::string> session_errors, lost_sessions;
  std::optional<ExportBatching> coarse_batching;  // attach mode: the agent's own export schedule
  std::map<std::string, std::string> attacked_sessions;  // what reached each session's receiver from outside the tree
};

// `prefix` ("otel-thread-context: ") tells a multi-protocol run's notes and
// counters apart.
SuiteOutcome merge_sessions(std::vector<SessionRun>& runs, bool attach_mode, const std::string& prefix, RunResult& run) {
  SuiteOutcome out;
  out.sessions.attach_mode = attach_mode;
  bool judged_noted = false;  // which process was judged: said once (each session's is in the progress lines)
  for (auto& r : runs) {
    if (r.attacked) out.attacked_sessions[r.name] = *r.attacked;
    if (r.error) out.session_errors[r.name] = *r.error;
    if (r.lost) out.lost_sessions[r.name] = *r.lost;
    if (!r.judged.empty() && !judged_noted) {
      run.notes.push_back(prefix + "session " + r.name + " judged " + r.judged);
      if (!r.loader_view_note.empty()) run.notes.push_back(prefix + r.loader_view_note);
      judged_noted = true;
    }
    for (const auto& note : r.closed.notes) run.notes.push_back(prefix + note);
    const std::string counter_prefix = prefix.empty() ? "" : prefix.substr(0, prefix.find(':')) + ".";
    for (const auto& [k, v] : r.closed.counters) run.counters[counter_prefix + k] = v;
    if (r.coarse_batching) out.coarse_batching = r.coarse_batching;
    if (r.evidence) out.sessions.add(std::move(*r.evidence));
  }
  return out;
}

// Timing verdicts the export schedule or an attack on the receiver makes
// untellable: export batching coarser than the delays judged (too noisy to
// tell), or a timing failure while the receiver was attacked (maybe the
// attack's doing: inconclusive, with what the attacker did, never the exporter
// blamed).
void correct_timing(const SuitePlan& plan, const SuiteOutcome& outcome, const std::vector<std::string>& read,
                    RequirementResult& r) {
  const Requirement* requirement = find_requirement(r.id);
  if (!requirement || !requirement->timed_by_export) return;
  std::string attack;
  for (const auto& s : read)
    if (auto a = outcome.attacked_sessions.find(s); a != outcome.attacked_sessions.end())
      attack = "session " + s + ": " + a->second;
  if (outcome.coarse_batching && (r.verdict == Verdict::Fail || r.verdict == Verdict::Pass)) {
    r.verdict = Verdict::Error;
    r.reason = "cannot time " + r.area + ": " + outcome.coarse_batching->figures() + ", coarser than the delays judged; " +
               (attack.empty() ? agent_settings_advice(plan.options) : "the receiver was under attack (" + attack + ")");
    r.evidence.clear();
    return;
  }
  if (!attack.empty() && (r.verdict == Verdict::Fail || r.verdict == Verdict::Error)) {
    r.verdict = Verdict::Error;
    r.reason = "the receiver was under attack (" + attack + "): export timing may be the attack's doing, not the "
               "agent's; not judged (was: " + r.reason + ")";
  }
}

// The verdict a probe's finding makes, corrected for what went wrong around it.
void judge_one(const SuitePlan& plan, const SuiteOutcome& outcome, const Finding& f, const Probe& probe,
               RequirementResult& r) {
  const Suite& suite = *plan.suite;
  const std::string& id = r.id;
  r.probe = probe.name();
  r.verdict = verdict_of(f.outcome);
  r.reason = f.reason;
  r.evidence = f.evidence;
  r.evidence_count = f.evidence_count;
  r.evidence_minimum = probe.minimum_evidence(id);
  enforce_evidence_minimum(r);
  // A session that could not run is the environment's fault, not the agent's.
  const auto read = outcome.sessions.attach_mode ? std::vector<std::string>{suite.attach_session()} : probe.sessions_for(id);
  for (const auto& s : read)
    if (auto e = outcome.session_errors.find(s); e != outcome.session_errors.end() && r.verdict == Verdict::Skip) {
      r.verdict = Verdict::Error;
      r.reason = "session " + s + " failed: " + e->second;
    }
  for (const auto& s : read)
    if (auto e = outcome.lost_sessions.find(s); e != outcome.lost_sessions.end()) {
      r.verdict = Verdict::Error;
      r.reason = "session " + s + ": " + e->second + "; not judged (was: " + r.reason + ")";
    }
  if (auto starved = starved_of_events(f, outcome.sessions, read); starved && r.verdict == Verdict::Skip) {
    r.verdict = Verdict::Error;
    r.reason = *starved;
  }
  correct_timing(plan, outcome, read, r);
  if (r.verdict == Verdict::Fail) apply_level(r, plan.options.strict);
}

// One suite's results: its probes' findings, or, when the protocol was found
// under a schema it does not read, every requirement not applicable.
Status judge_suite(SuitePlan& plan, SuiteOutcome& outcome, const std::string& repeat_protocol, RunResult& run) {
  if (plan.section.not_applicable.empty()) plan.section.not_applicable = plan.suite->not_applicable(outcome.sessions);
  const bool applicable = plan.section.not_applicable.empty();
  std::map<std::string, std::pair<Finding, const Probe*>> findings;
  if (applicable)
    for (const auto* p : plan.probes)
      for (auto& f : p->judge(outcome.sessions)) {
        std::string id = f.requirement;
        findings.emplace(std::move(id), std::make_pair(std::move(f), p));
      }
  // Nothing of the protocol in any session that ran whole: nothing to judge.
  std::string nothing;
  if (applicable && outcome.session_errors.empty() && outcome.lost_sessions.empty())
    nothing = plan.suite->published_nothing(outcome.sessions);
  for (const auto& id : plan.ids) {
    auto result = make_result(id);
    if (!result) return result.error();
    auto& r = *result;
    r.repeat_command = repeat_command(plan.options, repeat_protocol, id);
    auto it = findings.find(id);
    if (!applicable) {
      r.verdict = Verdict::Skip;
      r.reason = "not applicable: " + plan.section.not_applicable;
    } else if (plan.observed_only(id)) {
      r.verdict = Verdict::Skip;
      r.reason = "--observe-only: tracecorr sent nothing, and this requirement is judged by what it sends";
    } else if (it == findings.end()) {
      r.verdict = Verdict::Error;
      r.reason = "no probe judged this requirement";
    } else {
      judge_one(plan, outcome, it->second.first, *it->second.second, r);
    }
    if (!nothing.empty()) {
      r.verdict = Verdict::Skip;
      r.reason = "published nothing: " + nothing;
    }
    run.results.push_back(std::move(r));
  }
  return Ok{};
}

// A multi-protocol run's figures: every suite's, session names told apart.
void add_figures(Figures figures, const std::string& prefix, Figures& into) {
  for (auto& t : figures.timelines) {
    t.session = prefix + t.session;
    into.timelines.push_back(std::move(t));
  }
  for (auto& s : figures.scatters)
    if (into.scatters.size() < kMaxScatters) into.scatters.push_back(std::move(s));
  if (!into.record_stores)
    into.record_stores = std::move(figures.record_stores);
  else if (figures.record_stores)
    for (auto& s : figures.record_stores->stores)
      if (into.record_stores->stores.size() < kMaxRecordStores) into.record_stores->stores.push_back(std::move(s));
  if (into.stacks.source.empty()) into.stacks = std::move(figures.stacks);
}

RunResult start_run(const RunOptions& o, const std::vector<SuitePlan>& plans) {
  RunResult run;
  run.tool_version = std::string(kToolVersion);
  run.target.description = o.target.pid ? "pid " + std::to_string(*o.target.pid) : shell_join(o.target.command);
  if (o.target.pid) run.target.pid = *o.target.pid;
  struct utsname u{};
  uname(&u);
  run.target.arch = u.machine;
  for (const auto& plan : plans) {
    run.protocol += (run.protocol.empty() ? "" : ",") + plan.section.id;
    if (run.personality.empty()) run.personality = plan.options.scenario.setting("personality");
  }
  run.strict = o.strict;
  run.only = o.only;
  run.started = std::chrono::system_clock::now();
  return run;
}

}  // namespace

Expected<RunResult> run_conformance(const RunOptions& given) {
  std::vector<DetectedProtocol> chosen;
  std::string detection_note;
  auto sections = choose_protocols(given, chosen, detection_note);
  if (!sections) return sections.error();
  std::vector<SuitePlan> plans;
  for (std::size_t i = 0; i < chosen.size(); ++i) {
    auto plan = plan_suite(*chosen[i].suite, (*sections)[i], given);
    if (!plan) return plan.error();
    plans.push_back(std::move(*plan));
  }
  if (auto st = check_only(given, plans); !st) return st.error();

  RunResult run = start_run(given, plans);
  const bool several = plans.size() > 1;
  if (suites().size() > 1 && !plans.front().section.named) {
    std::string chosen_text;
    for (const auto& plan : plans)
      chosen_text += (chosen_text.empty() ? "" : ", ") + plan.section.id + " (" + plan.section.chosen_by + ")";
    run.notes.push_back(std::string(several ? "protocols" : "protocol") + " chosen by --protocol auto: " + chosen_text);
  }
  if (!detection_note.empty()) run.notes.push_back(detection_note);
  for (const auto& plan : plans)
    if (!plan.section.not_applicable.empty())
      say(given, plan.section.id + ": not applicable: " + plan.section.not_applicable);

  auto outcomes = run_sessions(given, plans);
  for (std::size_t i = 0; i < plans.size(); ++i) {
    auto& plan = plans[i];
    const std::string prefix = several ? plan.section.id + ": " : "";
    auto outcome = merge_sessions(outcomes[i], given.target.pid.has_value(), prefix, run);
    const bool name_protocol = several || (!given.protocol.empty() && given.protocol != "auto");
    if (auto st = judge_suite(plan, outcome, name_protocol ? plan.section.id : std::string(), run); !st)
      return st.error();
    if (plan.section.not_applicable.empty())
      add_figures(plan.suite->figures(outcome.sessions), several ? plan.section.id + " " : "", run.figures);
    run.protocols.push_back(plan.section);
  }
  run.finished = std::chrono::system_clock::now();
  return run;
}

}  // namespace tracecorr::conform

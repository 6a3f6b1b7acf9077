#include "tracecorr/conform/session.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <thread>

#include "tracecorr/conform/run_after_stop.hpp"
#include "tracecorr/procfs.hpp"
#include "tracecorr/tcp_peer.hpp"
#include "tracecorr/threadptr.hpp"

namespace tracecorr::conform {
namespace {

constexpr auto kDiscoveryPollInterval = std::chrono::milliseconds(2);
// Discovery looks at the launched process alone for kTreeScanDelay (it is the
// agent whenever the command execs it, and a scan of /proc takes up to ~20 ms
// on a busy machine: time the agent's first milliseconds need, when it
// publishes), then re-lists the launched tree every kTreeScanInterval.
constexpr auto kTreeScanDelay = std::chrono::milliseconds(100);
constexpr auto kTreeScanInterval = std::chrono::milliseconds(50);
// Exports are batched by the agent's span processor; a short schedule keeps
// export-timing measurements sharp.
constexpr const char* kBatchDelayMs = "50";

// The session token in the headers OTel SDKs send with every export
// (OTEL_EXPORTER_OTLP_HEADERS, "key=value,..."), after any the environment or
// the suite set already; the traces-only variable, when set, wins in SDKs.
void hand_session_token(LaunchSpec& launch, const std::string& token) {
  const std::string ours = std::string(otlp::kSessionTokenHeader) + "=" + token;
  for (const char* name : {"OTEL_EXPORTER_OTLP_HEADERS", "OTEL_EXPORTER_OTLP_TRACES_HEADERS"}) {
    std::string given;
    if (auto it = launch.env.find(name); it != launch.env.end()) given = it->second;
    else if (const char* inherited = std::getenv(name)) given = inherited;
    else if (std::string_view(name) != "OTEL_EXPORTER_OTLP_HEADERS") continue;
    launch.env[name] = given.empty() ? ours : given + "," + ours;
  }
}

}  // namespace

Expected<std::unique_ptr<Session>> Session::open(const TargetSpec& spec, const SessionSettings& settings,
                                                 std::unique_ptr<SessionPart> part) {
  std::unique_ptr<Session> s(new Session());
  s->settings_ = settings;
  s->target_spec_ = spec;
  s->part_ = std::move(part);

  if (auto st = s->start_receiver(spec); !st) return st.error();

  if (spec.pid) {
    if (settings.watch_tls_slots)
      s->slot_watch_unavailable_ = "attach mode: the threads had started (and published) before tracecorr attached";
    auto attached = Target::attach(*spec.pid);
    if (!attached) return attached.error();
    s->target_ = std::move(*attached);
  } else {
    LaunchSpec launch;
    launch.argv = spec.command;
    launch.env = {
        {"OTEL_EXPORTER_OTLP_ENDPOINT", s->receiver_->endpoint()},
        {"OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"},
        {"OTEL_TRACES_EXPORTER", "otlp"},
        {"OTEL_METRICS_EXPORTER", "none"},
        {"OTEL_LOGS_EXPORTER", "none"},
        {"OTEL_BSP_SCHEDULE_DELAY", kBatchDelayMs},
    };
    if (s->part_) s->part_->prepare_launch(launch);
    for (const auto& [k, v] : settings.env) launch.env[k] = v;
    hand_session_token(launch, s->session_token_);
    launch.unset_env = settings.unset_env;
    for (const auto& name : settings.unset_env) launch.env.erase(name);
    // The slot watch follows every exec; a part that must act at an exec
    // (on_exec) gets the same follower with nothing to arm.
    if (settings.watch_tls_slots || launch.on_exec) s->prepare_slot_watch(launch, !settings.watch_tls_slots);
    auto launched = Target::launch(launch);
    if (!launched) return launched.error();
    s->target_ = std::move(*launched);
    s->target_->pass_over(spec.pass_over);
  }
  if (s->target_->launched()) s->admission_->follow(s->target_.get());
  s->opened_at_ = Clock::now();
  s->memory_ = std::make_unique<LiveProcessMemory>(s->target_->pid());  // until discovery picks the agent

  // Every wait for what the target publishes ends on its own progress.
  s->discovery_wait_ = std::make_unique<DiscoveryWait>(
      [target = s->target_.get()] {
        std::vector<pid_t> pids;
        for (const auto& p : target->processes()) pids.push_back(p.pid);
        return pids;
      },
      spec.discovery);
  auto& wait = *s->discovery_wait_;
  // qemu-user -g holds the guest at its first instruction until a debugger
  // attaches, and serves one connection for the process's life: connect
  // before anything waits for the guest to run (discovery would wait for a
  // library that is never loaded), let it run, and keep the connection for
  // the record watcher's thread pointers.
  if (!spec.gdbstub.empty()) {
    if (auto st = s->connect_gdbstub(wait); !st) return st.error();  // nothing can run: the environment's fault
  }
  // A protocol without an agent library (a process-wide mapping, say) leaves
  // the discovery options empty and chooses the judged process itself (opened()).
  if (!settings.discovery.name_regex.empty())
    if (auto st = s->discover(wait); !st) s->discovery_error_ = st.error();
  s->memory_ = std::make_unique<LiveProcessMemory>(s->target_->pid());  // the process judged
  if (s->library_ && s->part_) s->part_->library_found(*s);
  // The record watcher reads thread pointers by ptrace: the slot watch must
  // have let go of every thread first. Without a library it has nothing to watch.
  if (s->slot_watch_) {
    auto report = s->slot_watch_->finish(s->library_ && !s->following_execs_only_ ? wait.ceiling() : Clock::now());
    if (!s->following_execs_only_) s->slot_watch_report_ = std::move(report);
    s->slot_watch_.reset();
  }
  if (s->library_ && (s->library_->tls_descriptor_addr ||
                      (s->library_->elf.tls && s->library_->elf.tls->thread_local_storage()))) {
    if (auto st = s->attach_tls(wait); !st) s->tls_error_ = st.error();
  }
  if (s->part_) s->part_->opened(*s, wait);
  if (s->admission_) s->admission_->judged(s->target_->pid());  // chosen by now: only its exports count
  if (auto running = s->target_->passed_over_running(); !running.empty() && s->target_->judged_reason().empty())
    s->passed_over_stayed_ = running + ", passed over as a run before the agent that stays, still ran when the wait "
                             "for what the target publishes ended (" + wait.figures() + "): it did not exit by itself";
  // A wait that ended at its ceiling while the target was starved proves
  // nothing about what it publishes: no verdict may rest on this session.
  if (wait.starved())
    return make_error("inconclusive: " + wait.figures(), "discovery");
  s->run_queue_at_open_ = read_run_queue_wait(s->target_->pid());
  s->run_queue_since_ = Clock::now();
  return s;
}

Session::~Session() {
  close();
  // The receiver outlives the target (its thread may still be checking a peer).
  if (admission_) admission_->follow(nullptr);
}

Status Session::start_receiver(const TargetSpec& spec) {
  otlp::ReceiverOptions options;
  options.port = spec.otlp_port;
  // An attached agent in a network namespace of its own exports to its own
  // loopback: the receiver listens there.
  if (spec.pid)
    if (auto shared = shares_network_namespace(*spec.pid); shared && !*shared) options.network_namespace_of = *spec.pid;
  admission_ = std::make_shared<ExportAdmission>(options.network_namespace_of, spec.pid);
  options.check_peer = [admission = admission_](const sockaddr_storage& local, const sockaddr_storage& peer) {
    return admission->check(local, peer);
  };
  if (!spec.pid) options.session_token = session_token_ = random_session_token();
  auto receiver = otlp::OtlpReceiver::start(options);
  if (!receiver) return receiver.error().within("OTLP receiver");
  receiver_ = std::move(*receiver);
  receiver_namespace_ = options.network_namespace_of ? network_namespace_name(options.network_namespace_of) : "";
  return Ok{};
}

std::map<pid_t, std::uint64_t> read_run_queue_wait(pid_t pid) {
  std::map<pid_t, std::uint64_t> out;
  const std::string task = "/proc/" + std::to_string(pid) + "/task";
  for (int tid : numbered_entries(task)) {
    // "<ns on cpu> <ns waiting on a run queue> <timeslices>"
    std::FILE* f = std::fopen((task + "/" + std::to_string(tid) + "/schedstat").c_str(), "re");
    if (!f) continue;
    unsigned long long on_cpu = 0, waiting = 0;
    if (std::fscanf(f, "%llu %llu", &on_cpu, &waiting) == 2) out[tid] = waiting;
    std::fclose(f);
  }
  return out;
}

std::string RunQueueWait::describe() const {
  auto whole = [](double v) { return std::to_string(static_cast<long long>(v)); };
  return std::to_string(threads) + " target threads waited " + whole(total_ms) + " ms in run queues in total (one thread at most " +
         whole(max_thread_ms) + " ms) over " + whole(wall_ms) + " ms";
}


std::optional<RunQueueWait> Session::run_queue_wait() const {
  std::lock_guard lock(mutex_);
  return run_queue_wait_;
}

namespace {

// Why `chosen` is the process judged, in words for the report.
std::string why_chosen(const TreeProcess& chosen, const AgentLibrary& library, const std::vector<TreeProcess>& tree,
                       std::size_t with_library, pid_t launched, bool launched_mode) {
  // The executable names the process better than comm (cut at 15 bytes).
  std::error_code ec;
  auto exe = std::filesystem::read_symlink("/proc/" + std::to_string(chosen.pid) + "/exe", ec);
  std::string who = "pid " + std::to_string(chosen.pid) + " (" + (ec ? chosen.comm : exe.filename().string()) + ")";
  std::string text;
  if (!launched_mode)
    text = who + ", the attached process, maps " + library.path;
  else if (chosen.pid == launched)
    text = who + ", the launched process itself, maps " + library.path;
  else
    text = who + (chosen.depth > 0 ? ", a descendant " + std::to_string(chosen.depth) + " deep of the launched pid "
                                   : ", started by the launched pid ") +
           std::to_string(launched) + (chosen.depth > 0 ? "" : " and reparented away from it (a double fork or setsid)") +
           ", maps " + library.path;
  if (tree.size() > 1)
    text += with_library == 1 ? "; it is the only one of the " + std::to_string(tree.size()) +
                                    " processes in the launched tree that does"
                              : "; the first (parents first) of the " + std::to_string(with_library) +
                                    " processes in the launched tree that do";
  return text;
}

}  // namespace

Status Session::discover(DiscoveryWait& wait) {
  // The agent may be the launched process or any descendant (a launch script
  // that does not exec, a wrapper that forks): look for the library in every
  // process of the tree, parents first, and judge the first that loads it
  // (and is not to be passed over: a run before the agent that stays).
  const auto& options = settings_.discovery;
  LibraryCache cache;
  std::optional<Error> last_error;
  auto passed_over = [&](pid_t pid) {
    const auto& passed = target_->passed_over();
    return std::any_of(passed.begin(), passed.end(), [&](const TreeProcess& p) { return p.pid == pid; });
  };
  // The launched process first, alone (kTreeScanDelay), then the whole tree.
  std::vector<TreeProcess> tree{TreeProcess{target_->launched_pid(), 0, 0, "", true}};
  if (auto st = read_process_stat(target_->launched_pid())) tree.front().comm = st->comm;
  auto next_tree_scan = Clock::now() + kTreeScanDelay;
  while (!wait.over()) {
    if (Clock::now() >= next_tree_scan) {
      tree = target_->processes();
      next_tree_scan = Clock::now() + kTreeScanInterval;
    }
    std::size_t with_library = 0;
    std::vector<std::pair<TreeProcess, AgentLibrary>> settled;
    for (const auto& p : tree) {
      if (passed_over(p.pid)) continue;
      auto found = discover_process(p.pid, options, cache);
      if (!found) {
        last_error = found.error();
        continue;
      }
      if (!*found) continue;
      ++with_library;
      if (!library_) library_ = **found;  // a library without the process symbol: keep looking a while, it may still load
      // Until the loader is done with that page the pointer (and the TLS
      // descriptor) show unrelated file bytes.
      if ((*found)->process_pointer_addr && process_pointer_settled(**found, LiveProcessMemory(p.pid)))
        settled.emplace_back(p, **found);
    }
    for (const auto& [p, library] : settled)
      if (target_->judge(p, why_chosen(p, library, tree, with_library, target_->launched_pid(), target_->launched()))) {
        library_ = library;
        return Ok{};
      }
    if (library_ && passed_over(library_->pid)) library_.reset();
    if (tree.empty() && !target_alive()) break;
    std::this_thread::sleep_for(kDiscoveryPollInterval);
  }
  if (library_) {
    bool refused = false;  // a run passed over still runs: nothing after it is judged
    for (const auto& p : tree)
      if (p.pid == library_->pid)
        refused = !target_->judge(p, why_chosen(p, *library_, tree, 1, target_->launched_pid(), target_->launched()));
    if (!refused) return Ok{};
    library_.reset();
  }
  if (!target_alive() && target_->processes().empty())
    return make_error("the target exited before its agent library was found (" +
                      exit_description_.value_or("exit status unknown") + ")");
  std::string looked_in;
  if (target_->launched()) looked_in = " in any of the " + std::to_string(tree.size()) + " processes of the launched tree";
  if (auto running = target_->passed_over_running(); !running.empty())
    looked_in += " but " + running + ", passed over as a run before the agent that stays, which still runs";
  std::string symbols = options.process_symbol.empty()  ? options.tls_symbol
                        : options.tls_symbol.empty()     ? options.process_symbol
                                                         : options.process_symbol + " or " + options.tls_symbol;
  return make_error("no library defining " + symbols + " appeared" + looked_in + ": discovery waited until " +
                        wait.figures() + (last_error ? " (last error: " + last_error->message() + ")" : ""),
                    "pid " + std::to_string(pid()));
}

namespace {

[[maybe_unused]] bool command_runs_under_qemu_user(const std::vector<std::string>& command) {
  if (command.empty()) return false;
  auto name = std::filesystem::path(command.front()).filename().string();
  return name.rfind("qemu-", 0) == 0;
}

}  // namespace

// Where a thread's slot is, found as the session finds it: the agent library
// in the thread's process, then how its TLS variable is reached, at the
// thread's first stop (a slot in glibc's dynamic TLS has no block yet then;
// musl's has). The judges take the rest. The messages are the report's
// reasons, so they name no address.
Expected<std::uint64_t> locate_tls_slot(LibraryCache& cache, const DiscoveryOptions& options, const RecordLayout& layout,
                                        pid_t pid, std::uint64_t thread_pointer) {
  auto found = discover_process(pid, options, cache);
  if (!found || !*found) return make_error("its process had not loaded the agent library yet");
  const auto& library = **found;
  if (!library.elf.tls || !library.elf.tls->thread_local_storage()) return make_error("the agent library defines no TLS slot");
  LiveProcessMemory memory(pid);
  auto c_library = detect_c_library(pid, library.elf.machine);
  auto access = resolve_tls_access(memory, library, c_library ? *c_library : CLibrary::Unknown);
  if (!access) {
    if (access.error().kind == ErrorKind::kNotReady) return make_error("the agent library's TLS was not relocated yet");
    return make_error("the agent library's TLS slot could not be located");
  }
  auto slot = pointer_address(memory, layout, access->site, thread_pointer);
  if (!slot && slot.error().kind == ErrorKind::kNotAllocated)
    return make_error("the agent library's TLS is dynamic and the thread had no block for it yet");
  if (!slot) return make_error("the agent library's TLS slot could not be located");
  return *slot;
}

void Session::prepare_slot_watch(LaunchSpec& launch, bool execs_only) {
  if (!target_spec_.gdbstub.empty() || command_runs_under_qemu_user(launch.argv)) {
    if (!execs_only)
      slot_watch_unavailable_ = "the target runs under qemu-user: its threads' pointers are the guest's, not the host's";
    return;
  }
  following_execs_only_ = execs_only;
  launch.before_exec = [this, on_exec = launch.on_exec, execs_only](pid_t pid) {
    auto cache = std::make_shared<LibraryCache>();
    // The session ends the watch when discovery gives up; until then a slow
    // start (a JVM on a loaded machine) may take any time to load the library.
    watch::SlotWatch::Settings watch_settings;
    watch_settings.until_located = target_spec_.discovery.ceiling;
    watch_settings.on_exec = on_exec;
    auto watch = watch::SlotWatch::follow_launch(
        pid, settings_.record_layout,
        [cache, options = settings_.discovery, layout = settings_.record_layout, execs_only](pid_t p, std::uint64_t tp)
            -> Expected<std::uint64_t> {
          if (execs_only) return make_error("the launch is followed for its execs only");
          return locate_tls_slot(*cache, options, layout, p, tp);
        },
        watch_settings);
    if (watch) slot_watch_ = std::move(*watch);
    else if (!execs_only) slot_watch_unavailable_ = watch.error().message();  // e.g. a host without hardware watchpoints
  };
}

Status Session::attach_tls(DiscoveryWait& wait) {
  auto detected = detect_c_library(pid(), library_->elf.machine);
  const CLibrary c_library = detected ? *detected : CLibrary::Unknown;
  for (;;) {
    // The descriptor as the loader left it is evidence of its own (a
    // protocol may judge whether its readers can add it to the thread pointer).
    std::optional<Error> descriptor_error;
    if (library_->tls_descriptor_addr) {
      auto desc = read_tls_descriptor(*memory_, *library_->tls_descriptor_addr, library_->elf.machine);
      if (desc) tls_descriptor_ = *desc;
      else descriptor_error = desc.error();
    }
    // The records are read in whichever model the variable is reached.
    auto access = resolve_tls_access(*memory_, *library_, c_library);
    if (access) {
      tls_access_ = *access;
      break;
    }
    // Only the loader's relocation is worth waiting for.
    if (access.error().kind != ErrorKind::kNotReady || wait.over() || !target_alive()) {
      if (tls_descriptor_) return Ok{};  // evidence: a descriptor no reader can follow
      return descriptor_error ? *descriptor_error : access.error();
    }
    std::this_thread::sleep_for(Millis(5));
  }
  std::unique_ptr<ThreadPointerSource> source;
  if (!target_spec_.gdbstub.empty()) {
    if (!gdbstub_) return make_error("no connection to the gdbstub", target_spec_.gdbstub);
    source = std::move(gdbstub_);
  } else {
    source = make_ptrace_source(pid());
  }
  // The watcher reads bytes by the protocol's layout; which trace they name is the protocol's answer.
  watcher_ = std::make_unique<watch::RecordWatcher>(pid(), settings_.record_layout, tls_access_->site, settings_.active_trace,
                                             std::move(source));
  watcher_->start();
  return Ok{};
}

Status Session::connect_gdbstub(DiscoveryWait& wait) {
  auto endpoint = parse_host_port(target_spec_.gdbstub);
  if (!endpoint) return endpoint.error().within("--gdbstub");
  // qemu listens only once it has started: retry refused connections.
  for (;;) {
    auto gdb = make_gdbstub_source(endpoint->first, endpoint->second, pid());
    if (gdb) {
      gdbstub_ = std::move(*gdb);
      break;
    }
    if (wait.over() || !target_alive())
      return gdb.error().within("connecting to qemu's gdbstub for the thread pointers");
    std::this_thread::sleep_for(Millis(20));
  }
  // The guest waits at its entry point: let it run.
  return gdbstub_->resume();
}

bool Session::wait_for_records(Millis timeout) {
  if (!watcher_) return false;
  auto deadline = Clock::now() + timeout;
  while (Clock::now() < deadline) {
    if (!watcher_->contexts().empty()) return true;
    if (!target_alive()) return false;
    std::this_thread::sleep_for(Millis(5));
  }
  return false;
}

void Session::add_update_order_report(Expected<watch::UpdateOrderReport> report) {
  std::lock_guard lock(mutex_);
  update_order_reports_.push_back(std::move(report));
}

std::vector<Expected<watch::UpdateOrderReport>> Session::update_order_reports() const {
  std::lock_guard lock(mutex_);
  return update_order_reports_;
}

void Session::mark_timing_boundary() {
  std::lock_guard lock(mutex_);
  timing_boundary_ = std::chrono::system_clock::now();
}

std::optional<std::chrono::system_clock::time_point> Session::stop_requested_at() const {
  std::lock_guard lock(mutex_);
  return stop_requested_at_;
}

std::optional<std::chrono::system_clock::time_point> Session::timing_boundary() const {
  std::lock_guard lock(mutex_);
  return timing_boundary_;
}

bool Session::target_alive() {
  if (target_->alive()) return true;
  if (!exit_description_) exit_description_ = target_->exit_description();
  return false;
}

void Session::close() {
  slot_watch_.reset();  // released before the target is stopped (an early error return from open())
  if (part_) part_->stop_watching();
  if (watcher_) watcher_->stop();
  // Detach from qemu's gdbstub before stopping the target: with a debugger
  // attached, qemu reports the SIGTERM to it and waits instead of delivering it.
  if (watcher_) watcher_->release_thread_pointer_source();
  gdbstub_.reset();
  if (target_ && target_->launched() && closed_output_.empty()) {
    bool was_alive = target_alive();
    if (!was_alive) look_for_preflight_run();
    if (auto now = read_run_queue_wait(target_->pid()); !now.empty()) {
      RunQueueWait w;
      w.wall_ms = std::chrono::duration<double, std::milli>(Clock::now() - run_queue_since_).count();
      for (const auto& [tid, ns] : now) {
        auto before = run_queue_at_open_.find(tid);
        std::uint64_t waited = ns - (before == run_queue_at_open_.end() ? 0 : std::min(before->second, ns));
        ++w.threads;
        w.total_ms += static_cast<double>(waited) / 1e6;
        w.max_thread_ms = std::max(w.max_thread_ms, static_cast<double>(waited) / 1e6);
      }
      std::lock_guard lock(mutex_);
      run_queue_wait_ = w;
    }
    if (was_alive) {
      std::lock_guard lock(mutex_);
      stop_requested_at_ = std::chrono::system_clock::now();
    }
    if (was_alive) look_after_stopping_judged();
    std::string how = target_->stop();
    if (!exit_description_ && was_alive) exit_description_ = "stopped by tracecorr: " + how;
    closed_output_ = target_->output();
    if (closed_output_.empty()) closed_output_ = " ";  // marks the session closed
  }
  if (part_) part_->closed();
}

void Session::look_for_preflight_run() {
  if (!target_spec_.publishes || target_->judged_reason().empty()) return;
  const pid_t judged = target_->pid();
  const auto lived = std::chrono::duration_cast<Millis>(Clock::now() - opened_at_).count();
  // The tree reaches the agent that stays only after the run before it has
  // exited (`timeout 3 AGENT --check; exec AGENT`: the shell execs then):
  // wait for it on the tree's progress, not the clock.
  DiscoveryWait wait(
      [this] {
        std::vector<pid_t> pids;
        for (const auto& p : target_->processes()) pids.push_back(p.pid);
        return pids;
      },
      target_spec_.discovery);
  do {
    for (const auto& p : target_->processes()) {
      if (p.pid == judged || !target_spec_.publishes(p.pid)) continue;
      preflight_run_ = PreflightRun{
          "pid " + std::to_string(judged) + " (" + target_->judged_signature() + "), judged, " +
              exit_description_.value_or("exited") + " before the session ended (" + std::to_string(lived) +
              " ms after it opened) while the launched tree ran on, and pid " + std::to_string(p.pid) + " (" +
              p.comm + ") of that tree publishes the protocol: a run before the agent that stays",
          PassOver{target_->judged_signature(), "an earlier launch of this session saw a process at its place (" +
                                                    target_->judged_signature() +
                                                    ") exit on its own while the launched tree ran on"}};
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  } while (!wait.over());
}

void Session::look_after_stopping_judged() {
  if (!target_spec_.watch_after_stop || target_->pid() == target_->launched_pid() || target_->judged_reason().empty())
    return;
  const pid_t judged = target_->pid();
  const auto before = images_of(*target_);
  if (!target_->terminate_judged()) return;  // it did not stop: stop() ends it with the rest
  const auto seen = watch_run_after_stop(*target_, before, target_spec_.publishes, target_spec_.discovery,
                                         first_look_after_stop(target_spec_.discovery));
  if (!seen.run) return;
  const std::string what = "pid " + std::to_string(judged) + " (" + target_->judged_signature() +
                           "), judged, still ran when the session ended; once tracecorr had stopped it alone "
                           "(SIGTERM), the launched tree ran its program again: " + seen.describe() +
                           " publishes the protocol";
  if (seen.restart) {
    run_after_stop_ = what + ": a restart (a supervisor's loop), not a run before the agent: pid " +
                      std::to_string(judged) + " stays judged";
    return;
  }
  preflight_run_ = PreflightRun{
      what + ": it may have been a run before the agent that stays",
      PassOver{target_->judged_signature(),
               "an earlier launch of this session saw a process at its place (" + target_->judged_signature() +
                   ") still run when its session ended and, once tracecorr had stopped it, the launched tree run "
                   "the same program at another place (" + seen.signature + ")"}};
}

void Session::set_stack_samples(StackSamples samples) {
  std::lock_guard lock(mutex_);
  stack_samples_ = std::move(samples);
}

std::optional<StackSamples> Session::stack_samples() const {
  std::lock_guard lock(mutex_);
  return stack_samples_;
}

std::string Session::OtherExporters::describe() const {
  std::string text;
  for (const auto& [pid, n] : spans_by_pid)
    text += (text.empty() ? "" : ", ") + std::to_string(n) + (text.empty() ? " spans from pid " : " from pid ") +
            std::to_string(pid);
  return text;
}

Session::OtherExporters Session::other_exporters() const {
  OtherExporters out;
  for (const auto& span : receiver_->spans())
    if (!admission_->exported_by_judged(span.exporter_pid)) {
      ++out.spans;
      ++out.spans_by_pid[span.exporter_pid];
    }
  return out;
}

SessionEvidence Session::evidence() const {
  SessionEvidence e;
  e.name = settings_.name;
  e.launched = target_->launched();
  e.opened_at = opened_at_;
  e.library = library_;
  e.discovery_error = discovery_error_;
  e.tls_descriptor = tls_descriptor_;
  e.tls_access = tls_access_;
  e.tls_error = tls_error_;
  e.slot_watch = slot_watch_report_;
  e.slot_watch_unavailable = slot_watch_unavailable_;
  if (watcher_)
    e.records = RecordEvidence{watcher_->observations(), watcher_->contexts(), watcher_->record_pointers(),
                               watcher_->stats(), watcher_->seen_before_publication(), watcher_->run_queue_marks()};
  e.update_order_reports = update_order_reports();
  e.timing_boundary = timing_boundary();
  e.stop_requested_at = stop_requested_at();
  e.run_queue_wait = run_queue_wait();
  e.target_output = target_output();
  e.target_output_lines = target_output_lines();
  e.target_exit = target_exit();
  for (auto& span : receiver_->spans())
    if (admission_->exported_by_judged(span.exporter_pid)) e.spans.push_back(std::move(span));
  e.export_losses = receiver_->counters().losses;
  e.stack_samples = stack_samples();
  if (part_) e.protocol = part_->evidence();
  return e;
}

}  // namespace tracecorr::conform

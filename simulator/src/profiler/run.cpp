// The profiler-mode run (profiler_run.hpp). Order matters: the intake
// listens before anything exports; the stage runs before the profiler starts
// (a host's applications are there when its profiler comes up); the
// profiler is stopped (and has flushed) before the stage is, so every sample
// it took falls inside journaled time.
#include "tracecorr/profiler/run.hpp"

#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

#include "tracecorr/clock_offset.hpp"
#include "tracecorr/conform/export_admission.hpp"
#include "tracecorr/conform/target.hpp"
#include "tracecorr/profiles/grpc_receiver.hpp"
#include "tracecorr/profiles/http_route.hpp"
#include "tracecorr/profiles/json_lines.hpp"
#include "tracecorr/text.hpp"

namespace tracecorr::profiler {
using conform::ExportAdmission;
using conform::LaunchSpec;
using conform::ProtocolRun;
using conform::RunResult;
using conform::Target;
using conform::kToolVersion;
using conform::shell_join;

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

// A private directory for the stage's journals, removed with everything in it.
class JournalDir {
 public:
  JournalDir() {
    std::string tmpl = (fs::temp_directory_path() / "tracecorr-stage-XXXXXX").string();
    if (mkdtemp(tmpl.data())) path_ = tmpl;
  }
  ~JournalDir() {
    std::error_code ec;
    if (!path_.empty()) fs::remove_all(path_, ec);
  }
  JournalDir(const JournalDir&) = delete;
  JournalDir& operator=(const JournalDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Where every export lands, and the listeners that take them in.
struct Intake {
  std::shared_ptr<profiles::SampleStore> store = std::make_shared<profiles::SampleStore>();
  std::unique_ptr<ExportAdmission> admission;
  std::unique_ptr<profiles::GrpcProfilesReceiver> grpc;
  std::unique_ptr<otlp::OtlpReceiver> http;
  std::unique_ptr<profiles::JsonLinesReader> json_lines;
};

Status start_intake(const ProfilerRunOptions& o, Intake& in) {
  in.admission = std::make_unique<ExportAdmission>(0, o.profiler_pid);
  auto* admission = in.admission.get();
  profiles::GrpcReceiverOptions g;
  g.port = o.grpc_port;
  g.check_connection = [admission](const sockaddr_storage& local, const sockaddr_storage& peer) {
    auto v = admission->check(local, peer);
    return profiles::ConnectionVerdict{v.of_target, v.who};
  };
  // A build without gRPC (arm64's) takes exports in over HTTP only; a profiler told gRPC is refused.
  if (profiles::GrpcProfilesReceiver::built() || o.otlp_protocol == "grpc" || o.grpc_port != 0) {
    auto grpc = profiles::GrpcProfilesReceiver::start(in.store, g);
    if (!grpc) return make_error(ErrorKind::kUnspecified, "cannot start the OTLP/gRPC profiles receiver: " + grpc.error().message());
    in.grpc = std::move(*grpc);
  }
  otlp::ReceiverOptions h;
  h.port = o.http_port;
  h.routes.push_back(profiles::http_route(in.store));
  h.check_peer = [admission](const sockaddr_storage& local, const sockaddr_storage& peer) {
    return admission->check(local, peer);
  };
  auto http = otlp::OtlpReceiver::start(h);
  if (!http) return make_error(ErrorKind::kUnspecified, "cannot start the OTLP/HTTP profiles receiver: " + http.error().message());
  in.http = std::move(*http);
  if (!o.json_lines.empty()) {
    auto lines = profiles::JsonLinesReader::open(o.json_lines, in.store);
    if (!lines) return make_error(ErrorKind::kUnspecified, "cannot read JSON lines from " + o.json_lines + ": " + lines.error().message());
    in.json_lines = std::move(*lines);
  }
  return Ok{};
}

// "OTLP/gRPC http://..., OTLP/HTTP http://.../v1development/profiles".
std::string intake_endpoints(const Intake& in) {
  return "OTLP/gRPC " + (in.grpc ? in.grpc->endpoint() : std::string("(not built)")) + ", OTLP/HTTP " +
         in.http->endpoint() + profiles::kProfilesPath;
}

// The standard OTLP variables naming tracecorr's receiver, for a launched profiler.
std::map<std::string, std::string> otlp_environment(const ProfilerRunOptions& o, const Intake& in) {
  if (o.otlp_protocol == "grpc")
    return {{"OTEL_EXPORTER_OTLP_ENDPOINT", in.grpc->endpoint()},
            {"OTEL_EXPORTER_OTLP_PROFILES_ENDPOINT", in.grpc->endpoint()},
            {"OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"}};
  return {{"OTEL_EXPORTER_OTLP_ENDPOINT", in.http->endpoint()},
          {"OTEL_EXPORTER_OTLP_PROFILES_ENDPOINT", in.http->endpoint() + profiles::kProfilesPath},
          {"OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"}};
}

struct RunningMember {
  StageMember member;
  std::string journal;
  std::unique_ptr<Target> target;
  std::string launch_error;
};

std::vector<RunningMember> launch_stage(const std::vector<const ReaderSuite*>& suites, const StageOptions& stage,
                                        const std::string& dir, int nice) {
  std::vector<RunningMember> running;
  for (const auto* suite : suites)
    for (auto& m : suite->stage(stage)) {
      if (!stage.members.empty() && std::find(stage.members.begin(), stage.members.end(), m.name) == stage.members.end())
        continue;
      RunningMember r;
      r.member = std::move(m);
      std::string file = r.member.name;
      std::replace(file.begin(), file.end(), '/', '_');
      r.journal = dir + "/" + file + ".jsonl";
      LaunchSpec spec{r.member.argv, r.member.env, {}, {}, {}};
      spec.env["TRACECORR_FIXTURE_JOURNAL"] = r.journal;
      if (nice > 0) spec.before_exec = [nice](pid_t pid) { setpriority(PRIO_PROCESS, static_cast<id_t>(pid), nice); };
      auto target = Target::launch(spec);
      if (target)
        r.target = std::move(*target);
      else
        r.launch_error = target.error().message();
      running.push_back(std::move(r));
    }
  return running;
}

// The file's bytes, at most `limit`: sized by what is there, not by the limit
// (every member's journal is read at once).
std::string read_file(const std::string& path, std::size_t limit) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) return {};
  const auto size = static_cast<std::size_t>(std::max<std::streamoff>(in.tellg(), 0));
  std::string text(std::min(size, limit), '\0');
  in.seekg(0);
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<std::size_t>(in.gcount()));
  return text;
}

// A member's hazard that begins once the profiler met it (release_signal):
// the signal sent after its first sample, and when.
struct Release {
  pid_t pid = 0;
  int signal = 0;
  std::optional<std::uint64_t> sent_unix_ns;
};

std::vector<Release> releases_of(const std::vector<RunningMember>& stage) {
  std::vector<Release> out;
  for (const auto& m : stage)
    if (m.target && m.member.release_signal != 0)
      out.push_back({static_cast<pid_t>(m.target->launched_pid()), m.member.release_signal, std::nullopt});
  return out;
}

std::uint64_t unix_now_ns() {
  return static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch()).count());
}

// Each member met by the profiler and not released yet gets its signal.
void release_met(std::vector<Release>& releases, const profiles::SampleStore& store) {
  for (auto& r : releases) {
    if (r.sent_unix_ns) continue;
    const bool met = store.wait_for([&](const std::vector<profiles::ProfileSample>& samples) {
      return std::any_of(samples.begin(), samples.end(), [&](const auto& s) { return s.pid && *s.pid == r.pid; });
    }, std::chrono::milliseconds(0));
    if (met && ::kill(r.pid, r.signal) == 0) r.sent_unix_ns = unix_now_ns();
  }
}

// Enough samples of every member that ran (of a released member, taken
// after its release), or the profiler gone, or the cap.
void await_samples(const ProfilerRunOptions& o, const std::vector<RunningMember>& stage, const Intake& in, Target* profiler) {
  // A member a conforming reader leaves alone may never be sampled: not waited for.
  std::map<std::int64_t, std::size_t> wanted;  // by pid
  for (const auto& m : stage)
    if (m.target && !m.member.must_not_be_read)
      wanted[m.target->launched_pid()] = std::max(o.samples_per_member, m.member.samples_wanted);
  auto releases = releases_of(stage);
  // A released member's samples count from its release (none before it is sent).
  const auto counts_from = [&](std::int64_t pid) -> std::uint64_t {
    for (const auto& r : releases)
      if (r.pid == pid) return r.sent_unix_ns.value_or(UINT64_MAX);
    return 0;
  };
  const auto counted = [&](const profiles::ProfileSample& s) {
    if (!s.pid || !wanted.count(*s.pid)) return false;
    return !s.time || s.time->clock != profiles::Clock::Unix || s.time->nanos >= counts_from(*s.pid);
  };
  const auto enough = [&](const std::vector<profiles::ProfileSample>& samples) {
    std::map<std::int64_t, std::size_t> per_pid;
    for (const auto& s : samples)
      if (counted(s)) ++per_pid[*s.pid];
    return std::all_of(wanted.begin(), wanted.end(), [&](const auto& w) { return per_pid[w.first] >= w.second; });
  };
  // And the profiler watched the stage for min_observed since its first
  // sample came in: hazards that recur (a key appended late, again and again)
  // are met after it started reading, whenever that was.
  const auto deadline = Clock::now() + o.max_stage;
  std::optional<Clock::time_point> first;
  while (Clock::now() < deadline) {
    const bool full = in.store->wait_for(enough, std::chrono::milliseconds(500));
    if (!first && in.store->counters().samples > 0) first = Clock::now();
    release_met(releases, *in.store);
    if (full && first && Clock::now() - *first >= o.min_observed) return;
    if (profiler && !profiler->alive()) return;
    if (full) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

MemberEvidence stop_member(RunningMember& r, const std::vector<std::string>& kept_events) {
  MemberEvidence m;
  m.member = r.member;
  m.launch_error = r.launch_error;
  if (r.target) {
    m.pid = r.target->launched_pid();
    m.exit = r.target->stop();
  }
  m.truth = stage::read_journal(read_file(r.journal, 256u << 20), kept_events);
  if (m.truth.pid == 0) m.truth.pid = m.pid;
  return m;
}

std::vector<std::string> kept_events(const std::vector<const ReaderSuite*>& suites) {
  std::vector<std::string> kept;
  for (const auto* s : suites)
    for (auto& e : s->journal_events()) kept.push_back(std::move(e));
  return kept;
}

// A JSON-lines adapter may give CLOCK_MONOTONIC times (bpf_ktime_get_ns):
// placed on the journals' wall clock with the offset read now (the wall clock
// is not stepped during a stage; the offset's uncertainty is far below the
// tolerance).
void place_on_wall_clock(std::vector<profiles::ProfileSample>& samples) {
  const auto offset = wall_minus_monotonic();
  for (auto& s : samples)
    if (s.time && s.time->clock == profiles::Clock::Monotonic) {
      s.time->nanos = static_cast<std::uint64_t>(static_cast<std::int64_t>(s.time->nanos) + offset.wall_minus_monotonic_ns);
      s.time->clock = profiles::Clock::Unix;
    }
}

// Whether --only (ids or areas) selects any of the suite's reader requirements.
bool selects(const ReaderSuite& suite, const std::vector<std::string>& only) {
  for (const auto& r : suite.protocol().requirements)
    if (r.role == Role::Profiler &&
        (only.empty() || std::find_if(only.begin(), only.end(), [&](const std::string& t) { return t == r.id || t == r.area; }) != only.end()))
      return true;
  return false;
}

// The suites named (all when none): their writers make the stage (a suite
// may judge another's writers: OTEP 4719's readers read every member's
// process context).
std::vector<const ReaderSuite*> staged_suites(const std::vector<std::string>& protocols) {
  std::vector<const ReaderSuite*> chosen;
  for (const auto* s : reader_suites())
    if (protocols.empty() || std::find(protocols.begin(), protocols.end(), std::string(s->protocol().id)) != protocols.end())
      chosen.push_back(s);
  return chosen;
}

// Every member --stage-member names is one of the staged suites'.
Status members_exist(const std::vector<const ReaderSuite*>& staged, const StageOptions& stage) {
  std::vector<std::string> names;
  std::string listed;
  for (const auto* s : staged)
    for (const auto& m : s->stage(stage)) {
      names.push_back(m.name);
      listed += (listed.empty() ? "" : ", ") + m.name;
    }
  for (const auto& wanted : stage.members)
    if (std::find(names.begin(), names.end(), wanted) == names.end())
      return make_error(ErrorKind::kNotFound,
                        "no stage member " + printable_text(wanted) + " in the protocols staged (members: " + listed + ")",
                        "--stage-member");
  return Ok{};
}

// Of those, the ones with a requirement --only selects: they judge.
Expected<std::vector<const ReaderSuite*>> judging_suites(const std::vector<const ReaderSuite*>& staged,
                                                        const std::vector<std::string>& only) {
  std::vector<const ReaderSuite*> chosen;
  for (const auto* s : staged)
    if (selects(*s, only)) chosen.push_back(s);
  if (chosen.empty())
    return make_error(ErrorKind::kNotFound, "no reader requirement of the protocols named matches --only", "--protocol");
  return chosen;
}

void progress(const ProfilerRunOptions& o, const std::string& line) {
  if (o.progress) std::fprintf(o.progress, "tracecorr conform --profiler: %s\n", line.c_str());
}

std::string member_note(const MemberEvidence& m) {
  std::ostringstream out;
  out << "stage member " << m.member.name << " (" << m.member.layout << "): ";
  if (!m.launch_error.empty()) return out.str() + "could not launch: " + m.launch_error;
  out << "pid " << m.pid << ", " << m.truth.states.size() << " states journaled, " << m.samples.size()
      << " samples taken in";
  if (!m.truth.hazards_shown.empty()) {
    out << "; hazards shown:";
    for (const auto& h : m.truth.hazards_shown) out << ' ' << h;
  }
  if (!m.truth.hazards_skipped.empty()) {
    out << "; hazards its writer cannot show:";
    for (const auto& h : m.truth.hazards_skipped) out << ' ' << h;
  }
  for (const auto& p : m.truth.problems) out << "; journal " << p;
  return out.str();
}

void describe_run(const ProfilerRunOptions& o, const Intake& in, const ReaderEvidence& e, RunResult& run) {
  run.notes.push_back("intake: " + intake_endpoints(in) + (o.json_lines.empty() ? "" : ", JSON lines " + o.json_lines));
  run.notes.push_back("profiler: " + e.profiler + (e.profiler_exit.empty() ? "" : " (" + e.profiler_exit + ")"));
  // Its output where it may say why the run judged little: nothing came in, or it ended badly.
  if (e.samples.empty() || e.profiler_exit != "exited with 0")
    for (const auto& line : e.profiler_output) run.notes.push_back("profiler output: " + line);
  for (const auto& m : e.members) run.notes.push_back(member_note(m));
  const auto c = in.store->counters();
  run.counters["profile_exports"] = c.exports;
  run.counters["profile_exports_accepted"] = c.of(profiles::Outcome::Accepted);
  run.counters["profile_exports_refused"] = c.of(profiles::Outcome::Refused);
  run.counters["profile_exports_malformed"] = c.of(profiles::Outcome::Malformed);
  run.counters["profile_samples"] = c.samples;
  run.counters["profile_samples_not_kept"] = c.samples_not_kept;
  run.counters["stage_members"] = e.members.size();
}

// The launched profiler's last lines, printable and bounded.
std::vector<std::string> output_tail(const Target& profiler) {
  constexpr std::size_t kLines = 20, kLineBytes = 300;
  const auto lines = profiler.output_lines();
  std::vector<std::string> tail;
  for (auto it = lines.size() > kLines ? lines.end() - kLines : lines.begin(); it != lines.end(); ++it)
    tail.push_back(printable_text(std::string_view(it->text).substr(0, kLineBytes)));
  return tail;
}

// Launches (or finds) the profiler, runs the stage, stops both in order.
ReaderEvidence collect(const ProfilerRunOptions& o, const std::vector<const ReaderSuite*>& suites, Intake& in) {
  ReaderEvidence e;
  e.tolerance_ns = static_cast<std::uint64_t>(std::chrono::nanoseconds(o.tolerance).count());
  JournalDir dir;
  auto stage = launch_stage(suites, o.stage, dir.path(), o.stage_nice);
  progress(o, "stage of " + std::to_string(stage.size()) + " writers launched; intake: " + intake_endpoints(in));
  std::unique_ptr<Target> profiler;
  if (o.profiler_pid) {
    auto attached = Target::attach(*o.profiler_pid);
    if (attached) profiler = std::move(*attached);
    e.profiler = "pid " + std::to_string(*o.profiler_pid);
  } else {
    LaunchSpec spec{o.command, otlp_environment(o, in), {}, {}, {}};
    auto launched = Target::launch(spec);
    if (launched) profiler = std::move(*launched);
    e.profiler = shell_join(o.command);
    if (!launched) e.profiler_exit = "could not launch: " + launched.error().message();
    if (profiler) in.admission->follow(profiler.get());
  }
  const auto began = Clock::now();
  const auto seconds = [&] {
    return std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - began).count() / 1000.0) + " s";
  };
  if (profiler) await_samples(o, stage, in, profiler.get());
  progress(o, "stage ran " + seconds() + ": " + std::to_string(in.store->counters().samples) + " samples taken in");
  if (profiler && !o.profiler_pid) {
    e.profiler_exit = profiler->stop(o.flush_grace);
    e.profiler_output = output_tail(*profiler);
    in.admission->follow(nullptr);
    progress(o, "profiler stopped at " + seconds() + " (" + e.profiler_exit + ")");
  } else if (profiler && !profiler->alive()) {
    e.profiler_exit = "exited during the run";
  }
  // Each member's stop waits for its tree to go: all at once, not one after another.
  const auto kept = kept_events(suites);
  e.members.resize(stage.size());
  {
    std::vector<std::thread> stopping;
    for (std::size_t i = 0; i < stage.size(); ++i)
      stopping.emplace_back([&, i] { e.members[i] = stop_member(stage[i], kept); });
    for (auto& t : stopping) t.join();
  }
  progress(o, "stage stopped at " + seconds());
  e.samples = in.store->samples();
  place_on_wall_clock(e.samples);
  e.intake = in.store->counters();
  attach_samples(e);
  return e;
}

}  // namespace

Expected<RunResult> run_profiler_conformance(const ProfilerRunOptions& o) {
  if (o.command.empty() == !o.profiler_pid) return make_error(ErrorKind::kUnspecified, "give the profiler's command or --profiler-pid, one of the two");
  const auto staged = staged_suites(o.protocols);
  auto suites = judging_suites(staged, o.only);
  if (!suites) return suites.error();
  if (auto st = members_exist(staged, o.stage); !st) return st.error();
  RunResult run;
  run.tool_version = std::string(kToolVersion);
  run.started = std::chrono::system_clock::now();
  run.strict = o.strict;
  run.only = o.only;
  Intake in;
  if (auto st = start_intake(o, in); !st) return st.error();
  ReaderEvidence evidence = collect(o, staged, in);
  run.target.description = evidence.profiler;
  if (o.profiler_pid) run.target.pid = *o.profiler_pid;
  for (const auto* s : *suites) {
    run.protocols.push_back(ProtocolRun{std::string(s->protocol().id), !o.protocols.empty(), "--profiler", ""});
    run.protocol += (run.protocol.empty() ? "" : ",") + std::string(s->protocol().id);
  }
  run.results = judge_readers(evidence, *suites, o.only, o.strict);
  run.figures.timelines = member_timelines(evidence);
  describe_run(o, in, evidence, run);
  run.finished = std::chrono::system_clock::now();
  return run;
}

}  // namespace tracecorr::profiler

// See thread_context_watch.hpp.
#include "thread_context_watch.hpp"

#include <time.h>

#include <algorithm>

#include "otel_thread_context/registry.hpp"
#include "tracecorr/procfs.hpp"
#include "tracecorr/process_context.hpp"
#include "tracecorr/tls.hpp"

namespace tracecorr::otel_thread_context {
namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kFindInterval = std::chrono::milliseconds(10);
constexpr auto kContextPollInterval = std::chrono::milliseconds(1);
// Each thread is stopped this often (every thread in each round): a record
// that lives a few tens of milliseconds is read several times.
constexpr unsigned kSamplingHz = 200;
// The writer's threads start once its context is published: let them.
constexpr auto kThreadsSettle = std::chrono::milliseconds(100);
constexpr std::size_t kMaxWatchedThreads = 16;

bool carries_thread_keys(const ReferenceData& data) { return data.schema_version_value || data.key_map_value; }

std::int64_t clock_ns(clockid_t clock) {
  timespec t{};
  clock_gettime(clock, &t);
  return static_cast<std::int64_t>(t.tv_sec) * 1000000000 + t.tv_nsec;
}

// CLOCK_REALTIME - CLOCK_MONOTONIC, the wall clock read between two
// monotonic reads (their midpoint: the error is half a clock read).
std::int64_t wall_minus_monotonic_ns() {
  const std::int64_t before = clock_ns(CLOCK_MONOTONIC);
  const std::int64_t wall = clock_ns(CLOCK_REALTIME);
  const std::int64_t after = clock_ns(CLOCK_MONOTONIC);
  return wall - (before + (after - before) / 2);
}

}  // namespace

ThreadContextWatch::ThreadContextWatch(std::string session, std::chrono::milliseconds window)
    : sampled_(session == kSampledSession), window_(window) {
  facts_.session = std::move(session);
}

ThreadContextWatch::~ThreadContextWatch() { stop_watching(); }

void ThreadContextWatch::add_publication(Publication p) {
  std::lock_guard lock(mutex_);
  for (const auto& seen : facts_.publications)
    if (seen.published_at_ns == p.published_at_ns) return;
  facts_.publications.push_back(std::move(p));
}

// TCTXR-02: no symbol is looked for until a process context names the keys.
bool ThreadContextWatch::find_publisher(conform::Session& session, conform::DiscoveryWait& wait) {
  std::size_t looked_at = 0;
  std::optional<Error> last_error;
  for (;;) {
    auto tree = session.target().processes();
    looked_at = std::max(looked_at, tree.size());
    for (const auto& p : tree) {
      auto snapshot = process_context::take_snapshot(p.pid);
      if (!snapshot) {
        last_error = snapshot.error();
        continue;
      }
      auto data = reference_data_of(*snapshot);
      if (!data || !carries_thread_keys(*data)) continue;
      const auto& mapping = *std::find_if(snapshot->mappings.begin(), snapshot->mappings.end(),
                                          [](const auto& m) { return m.decoded && m.decoded->ok(); });
      if (!session.target().judge(p, "pid " + std::to_string(p.pid) + " (" + p.comm + ") publishes threadlocal.* keys in " +
                                         mapping.mapping.mapping.path))
        continue;  // a run before the agent that stays
      facts_.judged_pid = p.pid;
      add_publication({mapping.read.header->published_at_ns, *data, std::nullopt});
      context_header_ = mapping.mapping.mapping.start;
      context_reader_ = std::thread([this] { follow_context(context_header_); });
      return true;
    }
    if (wait.over() || tree.empty()) break;
    std::this_thread::sleep_for(kFindInterval);
  }
  facts_.not_found = make_error("no process context carrying threadlocal.schema_version or "
                                "threadlocal.attribute_key_map appeared in " +
                                    std::to_string(looked_at) + " processes of the target: discovery waited until " +
                                    wait.figures() +
                                    (last_error ? " (last error: " + last_error->message() + ")" : ""),
                                "pid " + std::to_string(session.pid()));
  return false;
}

// Every publication while the session runs: the key map's history (TCTX-08,
// 10) and what the samples' timestamps name.
void ThreadContextWatch::follow_context(std::uint64_t header) {
  LiveProcessMemory memory(facts_.judged_pid);
  process_context::ReadOptions options;
  options.retry_pause = std::chrono::microseconds(50);
  process_context::CachedContextReader reader(memory, header, options);
  std::uint64_t last = 0;
  while (!stop_.load()) {
    const auto& read = reader.refresh();
    if (read.ok() && read.header && read.header->published_at_ns != last) {
      last = read.header->published_at_ns;
      Publication p;
      p.published_at_ns = last;
      if (auto payload = process_context::decode_payload(read.payload)) p.data = reference_data_of(*payload);
      else p.error = payload.error();
      add_publication(std::move(p));
    }
    std::this_thread::sleep_for(kContextPollInterval);
  }
}

void ThreadContextWatch::opened(conform::Session& session, conform::DiscoveryWait& wait) {
  facts_.launched = session.launched();
  if (!find_publisher(session, wait)) return;
  const pid_t pid = facts_.judged_pid;
  LiveProcessMemory memory(pid);
  LibraryCache cache;
  for (;;) {  // TCTXR-04: the executable and every mapped library
    auto found = discover_process(pid, discovery_options(), cache);
    if (found && *found) {
      facts_.module = **found;
      break;
    }
    if (wait.over() || !session.target().alive()) {
      facts_.module_error = found ? make_error(ErrorKind::kNotFound, "no module the process maps defines " +
                                                                         std::string(spec::kTlsSymbol) + " in its .dynsym",
                                               "pid " + std::to_string(pid))
                                  : found.error();
      break;
    }
    std::this_thread::sleep_for(kFindInterval);
  }
  if (!facts_.module) return;
  auto c_library = detect_c_library(pid, facts_.module->elf.machine);
  for (;;) {  // TCTXR-05: whichever model reaches it; the loader's relocation is worth waiting for
    auto access = resolve_tls_access(memory, *facts_.module, c_library ? *c_library : CLibrary::Unknown);
    if (access) {
      access_ = *access;
      facts_.access_model = to_string(access->model);
      break;
    }
    if (access.error().kind != ErrorKind::kNotReady || wait.over() || !session.target().alive()) {
      facts_.access_error = access.error();
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  if (!access_) return;
  if (!sampled_) {
#if !defined(__x86_64__) && !defined(__aarch64__)
    facts_.watch_unavailable = "hardware watchpoints are implemented for x86-64 and arm64 hosts only";
#endif
    if (runs_under_qemu_user(pid))
      facts_.watch_unavailable = "the target runs under qemu-user: its threads' pointers are the guest's, not the host's";
    if (!facts_.watch_unavailable.empty()) return;
  }
  reading_ = true;
  if (sampled_) readers_ = std::thread([this] { sample(context_header_); });
  else readers_ = std::thread([this] { watch_threads(); });
}

void ThreadContextWatch::sample(std::uint64_t header) {
  PtraceSamplerOptions options;
  options.frequency_hz = kSamplingHz;
  options.max_frames = 1;  // the record is what is judged, not the stack
  auto sampler = make_ptrace_sampler(options);
  const pid_t pid = facts_.judged_pid;
  if (auto st = sampler->track(pid, thread_context_record_layout(), access_->site); !st) {
    std::lock_guard lock(mutex_);
    facts_.access_error = st.error().within("the ptrace sampler");
    done_ = true;
    return;
  }
  if (header) (void)sampler->track_process_context(pid, header);
  {
    std::lock_guard lock(mutex_);
    facts_.wall_minus_monotonic_at_start_ns = wall_minus_monotonic_ns();
  }
  const auto until = Clock::now() + window_;
  while (!stop_.load() && Clock::now() < until) {
    auto polled = sampler->poll(
        [this](const Sample& s) {
          std::lock_guard lock(mutex_);
          if (facts_.samples.size() >= ThreadContextFacts::kMaxSamples) {
            ++facts_.samples_dropped;
            return;
          }
          facts_.samples.push_back({s.tid, s.time_ns, s.record_pointer, s.error, s.record, s.record_declared_length,
                                    s.context_published_at});
        },
        std::chrono::milliseconds(50));
    if (!polled) break;  // the process is gone, or ptrace is refused: the samples so far stand
  }
  {
    std::lock_guard lock(mutex_);
    facts_.wall_minus_monotonic_at_end_ns = wall_minus_monotonic_ns();
  }
  done_ = true;
}

void ThreadContextWatch::watch_threads() {
  const pid_t pid = facts_.judged_pid;
  std::this_thread::sleep_for(kThreadsSettle);
  auto tids = numbered_entries("/proc/" + std::to_string(pid) + "/task");
  if (tids.size() > kMaxWatchedThreads) tids.resize(kMaxWatchedThreads);
  const PointerSite site = access_->site;
  std::vector<std::thread> watches;
  std::vector<ThreadWatch> results(tids.size());
  for (std::size_t i = 0; i < tids.size(); ++i) {
    watches.emplace_back([this, pid, site, tid = static_cast<pid_t>(tids[i]), &result = results[i]] {
      LiveProcessMemory memory(pid);
      const RecordLayout& layout = thread_context_record_layout();
      result.tid = tid;
      auto report = conform::watch_published_record(
          pid, tid, layout,
          [&](std::uint64_t thread_pointer) { return pointer_address(memory, layout, site, thread_pointer); }, window_);
      if (report) result.report = std::move(*report);
      else result.error = report.error();
    });
  }
  for (auto& w : watches) w.join();
  {
    std::lock_guard lock(mutex_);
    facts_.watches = std::move(results);
  }
  done_ = true;
}

void ThreadContextWatch::stop_watching() {
  stop_ = true;
  if (readers_.joinable()) readers_.join();
  if (context_reader_.joinable()) context_reader_.join();
  done_ = true;
}

std::shared_ptr<const conform::ProtocolEvidence> ThreadContextWatch::evidence() const {
  std::lock_guard lock(mutex_);
  return std::make_shared<ThreadContextFacts>(facts_);
}

const ThreadContextFacts* facts(const conform::SessionSet& sessions, const std::string& name) {
  const auto* s = sessions.find(name);
  return s ? s->protocol_as<ThreadContextFacts>() : nullptr;
}

}  // namespace tracecorr::otel_thread_context

// See context_watch.hpp.
#include "context_watch.hpp"

#include <sys/syscall.h>

#include <algorithm>
#include <cstdlib>
#include <map>

#include "tracecorr/maps.hpp"
#include "tracecorr/memory.hpp"
#include "tracecorr/procfs.hpp"

namespace tracecorr::otel_process_context {
namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kFindInterval = std::chrono::milliseconds(10);
// Looking for a misnamed header reads 8 bytes of every candidate mapping (a
// JVM has thousands): every 20th look, not every 10 ms.
constexpr std::size_t kMisnamedEvery = 20;
// Payloads remembered per timestamp to compare later reads with: the last
// ones seen (a writer that updates very often moves on; a torn read shows
// against the timestamp it was read under, which is recent).
constexpr std::size_t kRememberedTimestamps = 64;
// The pause after a read that found the timestamp where the last read left
// it. A reader only races a writer while the writer publishes: reading back
// to back then (a torture writer never stands still) is what makes some
// reads start over. A payload changed under a standing timestamp stays
// changed, so a thousand reads a second (more than any profiler samples)
// still see it, and the reader leaves the CPUs to the target and the kit.
constexpr auto kSteadyReadPause = std::chrono::milliseconds(1);

watch::MappingWatch::Settings watch_settings() {
  watch::MappingWatch::Settings s;
  s.is_watched_mapping = [](const std::string& name) { return process_context::kind_of_mapping_name(name).has_value(); };
  s.watched_bytes = process_context::kHeaderSize;
  s.syscalls = {SYS_prctl, SYS_madvise, SYS_memfd_create, SYS_munmap};
  return s;
}

TornRead torn(std::uint64_t timestamp, const std::vector<std::uint8_t>& first, const std::vector<std::uint8_t>& second) {
  TornRead t;
  t.timestamp = timestamp;
  t.first_size = first.size();
  t.second_size = second.size();
  auto mismatch = std::mismatch(first.begin(), first.end(), second.begin(), second.end());
  t.first_difference = static_cast<std::size_t>(mismatch.first - first.begin());
  t.first.assign(first.begin(), first.begin() + static_cast<long>(std::min(first.size(), TornRead::kKeptBytes)));
  t.second.assign(second.begin(), second.begin() + static_cast<long>(std::min(second.size(), TornRead::kKeptBytes)));
  return t;
}

}  // namespace

ContextWatch::ContextWatch(std::string session, bool watch, std::optional<watch::UpdateWaitBounds> wait_for_update)
    : wants_watch_(watch), wait_bounds_(wait_for_update) {
  facts_.session = std::move(session);
  if (!watch) facts_.watch_unavailable = "this session only reads";
}

ContextWatch::~ContextWatch() { stop_watching(); }

void ContextWatch::prepare_launch(conform::LaunchSpec& launch) {
  if (!wants_watch_) return;
  launch.before_exec = [this](pid_t pid) {
    auto w = watch::MappingWatch::follow_launch(pid, watch_settings());
    if (w) watch_ = std::move(*w);
    else facts_.watch_unavailable = w.error().message();  // e.g. a host without hardware watchpoints
  };
}

void ContextWatch::opened(conform::Session& session, conform::DiscoveryWait& wait) {
  facts_.launched = session.launched();
  if (!session.launched() && wants_watch_) facts_.watch_unavailable = "attach mode: the context was published before tracecorr attached";
  // The publisher may be any process of the launched tree (a script that
  // does not exec): the first, parents first, that maps a context.
  std::size_t looked_at = 0;
  std::optional<Error> last_error;
  // A header published where no reader looks. A memfd's name is final (no
  // prctl renames it), so one there settles PCTX-01 at once; an unnamed
  // anonymous mapping may still be named after its timestamp (or withdrawn,
  // as a writer whose naming failed does), so only one still there at the
  // deadline explains the failure.
  std::optional<std::string> misnamed;
  pid_t misnamed_in = 0;
  bool misnamed_is_final = false;
  auto look_for_misnamed = [&](pid_t pid, bool final_only) {
    auto maps = read_maps(pid);
    if (!maps) return;
    for (const auto& m : process_context::find_misnamed_headers(*maps, LiveProcessMemory(pid))) {
      const bool final = m.path.starts_with("/memfd:");
      if (final_only && !final) continue;
      misnamed = "a header with the signature OTEL_CTX is in " +
                 (m.path.empty() ? std::string("an unnamed anonymous mapping") : m.path) + " at " + hex_address(m.start);
      misnamed_in = pid;
      misnamed_is_final = final;
      if (final) return;
    }
  };
  for (std::size_t look = 0; !found() && !misnamed_is_final; ++look) {
    auto tree = session.target().processes();
    looked_at = std::max(looked_at, tree.size());
    for (const auto& p : tree) {
      auto mappings = process_context::discover(p.pid);
      if (!mappings) {
        last_error = mappings.error();
        continue;
      }
      if (mappings->empty()) {
        if (look % kMisnamedEvery == 0) look_for_misnamed(p.pid, /*final_only=*/true);
        if (misnamed_is_final) break;
        continue;
      }
      if (!session.target().judge(p, "pid " + std::to_string(p.pid) + " (" + p.comm + ") maps " + mappings->front().mapping.path))
        continue;  // a run before the agent that stays
      facts_.judged_pid = p.pid;
      break;
    }
    if (found() || misnamed_is_final || wait.over() || tree.empty()) break;
    std::this_thread::sleep_for(kFindInterval);
  }
  if (!found() && !misnamed_is_final)
    for (const auto& p : session.target().processes()) {
      look_for_misnamed(p.pid, /*final_only=*/false);
      if (misnamed) break;
    }
  if (!found()) {
    const std::string where = "pid " + std::to_string(misnamed ? misnamed_in : session.pid());
    if (misnamed)
      facts_.not_found = make_error(*misnamed + ", a mapping no reader looks for (the names are [anon_shmem:OTEL_CTX], "
                                    "[anon:OTEL_CTX] and /memfd:OTEL_CTX)", where);
    facts_.nothing_published = !misnamed;
    if (!misnamed)
      facts_.not_found = make_error("no mapping named [anon_shmem:OTEL_CTX], [anon:OTEL_CTX] or /memfd:OTEL_CTX appeared in " +
                                        std::to_string(looked_at) + " processes of the target: discovery waited until " +
                                        wait.figures() +
                                        (last_error ? " (last error: " + last_error->message() + ")" : ""),
                                    where);
    return;
  }
  facts_.under_qemu_user = runs_under_qemu_user(facts_.judged_pid);
  // The first look is at a published context: a mapping found right after
  // its mmap holds a header still being written (timestamp 0).
  for (;;) {
    if (auto snapshot = process_context::take_snapshot(facts_.judged_pid)) {
      // Published: a consistent read, or a header with its timestamp set that
      // a reader refuses (a bad signature or version stays bad: no use waiting).
      const auto* read = snapshot->mappings.empty() ? nullptr : &snapshot->mappings.front().read;
      const bool published = read && (read->ok() || (read->header && read->header->published_at_ns != 0 &&
                                                      read->stage == process_context::ReadStage::Header));
      facts_.first = std::move(*snapshot);
      if (published) break;
    }
    if (wait.over() || !session.target().alive()) break;
    std::this_thread::sleep_for(kFindInterval);
  }
  const std::uint64_t address =
      facts_.first && !facts_.first->mappings.empty() ? facts_.first->mappings.front().mapping.mapping.start : 0;
  if (address && wait_bounds_) update_wait_ = std::make_unique<watch::UpdateWait>(facts_.judged_pid, *wait_bounds_);
  if (address) reader_ = std::thread([this, pid = facts_.judged_pid, address] { read_until_stopped(pid, address); });
}

void ContextWatch::read_until_stopped(pid_t pid, std::uint64_t address) {
  LiveProcessMemory memory(pid);
  process_context::ReadOptions options;
  options.retry_pause = std::chrono::microseconds(50);
  std::map<std::uint64_t, std::vector<std::uint8_t>> payload_of;  // timestamp -> the first payload read under it
  std::vector<std::uint64_t> order;                                // timestamps, oldest first
  const auto began = Clock::now();
  std::uint64_t last_timestamp = 0;
  while (!stop_) {
    auto read = process_context::read_context(memory, address, options);
    const std::uint64_t timestamp = read.header ? read.header->published_at_ns : 0;
    if (timestamp != 0 && timestamp == last_timestamp) std::this_thread::sleep_for(kSteadyReadPause);
    last_timestamp = timestamp;
    std::lock_guard lock(mutex_);
    auto& tally = facts_.reads;
    ++tally.attempts;
    for (const auto& r : read.retries)
      ++(r.reason == process_context::RetryReason::TimestampZero ? tally.retries_zero : tally.retries_changed);
    if (!read.ok()) {
      ++(read.stage == process_context::ReadStage::Retries ? tally.gave_up : tally.other_failures);
      if (read.error->kind == ErrorKind::kGone) break;
      continue;
    }
    ++tally.consistent;
    consistent_ = tally.consistent;
    const std::uint64_t ts = read.header->published_at_ns;
    if (update_wait_) update_wait_->published(ts);
    auto [it, inserted] = payload_of.try_emplace(ts, read.payload);
    if (inserted) {
      ++tally.timestamps_seen;
      order.push_back(ts);
      if (order.size() > kRememberedTimestamps) {
        payload_of.erase(order.front());
        order.erase(order.begin());
      }
    } else if (it->second != read.payload) {
      ++tally.torn;
      if (tally.torn_reads.size() < ReadTally::kKeptTorn) tally.torn_reads.push_back(torn(ts, it->second, read.payload));
    }
  }
  std::lock_guard lock(mutex_);
  facts_.reads.window = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - began);
}

void ContextWatch::stop_watching() {
  stop_ = true;
  if (reader_.joinable()) reader_.join();
  if (watch_) {
    facts_.watch = watch_->finish();
    watch_.reset();
  }
  // The last look: a writer updating as fast as it can (the torture) can
  // outpace one read's retries, so a few more looks before settling for an
  // inconsistent one.
  for (int attempt = 0; found() && attempt < 50; ++attempt) {
    auto snapshot = process_context::take_snapshot(facts_.judged_pid);
    if (!snapshot) break;
    const bool consistent = !snapshot->mappings.empty() && snapshot->mappings.front().read.ok();
    facts_.last = std::move(*snapshot);
    if (consistent) break;
  }
}

std::shared_ptr<const conform::ProtocolEvidence> ContextWatch::evidence() const {
  std::lock_guard lock(mutex_);
  return std::make_shared<ContextFacts>(facts_);
}

const ContextWatch& context_watch(const conform::Session& session) {
  const auto* w = session.part<ContextWatch>();
  if (!w) std::abort();  // a session of this suite always has one
  return *w;
}

const ContextFacts* facts(const conform::SessionSet& sessions, const std::string& name) {
  const auto* s = sessions.find(name);
  return s ? s->protocol_as<ContextFacts>() : nullptr;
}

}  // namespace tracecorr::otel_process_context

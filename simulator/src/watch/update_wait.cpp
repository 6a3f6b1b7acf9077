// See update_wait.hpp.
#include "tracecorr/watch/update_wait.hpp"

#include <algorithm>
#include <cstdio>

#include "tracecorr/procfs.hpp"

namespace tracecorr::watch {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// tid -> (ns on a CPU, ns waiting on a run queue): "<on cpu> <waiting> <timeslices>".
std::map<pid_t, std::pair<std::uint64_t, std::uint64_t>> read_schedstat(pid_t pid) {
  std::map<pid_t, std::pair<std::uint64_t, std::uint64_t>> out;
  const std::string task = "/proc/" + std::to_string(pid) + "/task";
  for (int tid : numbered_entries(task)) {
    std::FILE* f = std::fopen((task + "/" + std::to_string(tid) + "/schedstat").c_str(), "re");
    if (!f) continue;
    unsigned long long on_cpu = 0, waiting = 0;
    if (std::fscanf(f, "%llu %llu", &on_cpu, &waiting) == 2) out[tid] = {on_cpu, waiting};
    std::fclose(f);
  }
  return out;
}

std::string seconds(milliseconds d) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f s", static_cast<double>(d.count()) / 1000.0);
  return text;
}

}  // namespace

milliseconds TargetProgress::Reading::available() const { return std::max(milliseconds(0), wall - longest_wait); }

std::string TargetProgress::Reading::describe() const {
  return seconds(available()) + " of the target's time in " + seconds(wall) + " (one thread waited " +
         seconds(longest_wait) + " for a CPU; " + seconds(cpu) + " of CPU used)";
}

TargetProgress::Snapshot TargetProgress::snapshot(pid_t pid) { return Snapshot{Clock::now(), read_schedstat(pid)}; }

std::optional<TargetProgress::Reading> TargetProgress::between(const Snapshot& then, const Snapshot& now) {
  if (now.threads.empty()) return std::nullopt;
  Reading r;
  r.wall = std::chrono::duration_cast<milliseconds>(now.at - then.at);
  std::uint64_t cpu_ns = 0, longest_wait_ns = 0;
  for (const auto& [tid, stat] : now.threads) {
    auto before = then.threads.find(tid);  // a thread begun since: all of its time
    const auto [cpu0, wait0] = before == then.threads.end() ? std::pair<std::uint64_t, std::uint64_t>{0, 0} : before->second;
    cpu_ns += stat.first - std::min(cpu0, stat.first);
    longest_wait_ns = std::max(longest_wait_ns, stat.second - std::min(wait0, stat.second));
  }
  r.cpu = milliseconds(cpu_ns / 1000000);
  r.longest_wait = milliseconds(longest_wait_ns / 1000000);
  return r;
}

TargetProgress::TargetProgress(pid_t pid) : pid_(pid) { mark(); }

void TargetProgress::mark() { mark_ = snapshot(pid_); }

std::optional<TargetProgress::Reading> TargetProgress::since_mark() const { return between(mark_, snapshot(pid_)); }

UpdateWait::UpdateWait(pid_t pid, UpdateWaitBounds bounds)
    : bounds_(bounds), began_(Clock::now()), since_publication_(pid) {
  bounds_.ceiling = std::max(bounds_.ceiling, bounds_.window);
}

void UpdateWait::start() {
  std::lock_guard lock(mutex_);
  began_ = Clock::now();
}

void UpdateWait::published(std::uint64_t key) {
  std::lock_guard lock(mutex_);
  if (last_key_ == key) return;
  if (first_ && *first_ != key) ++updates_;
  if (!first_) first_ = key;
  last_key_ = key;
  published_seen_ = true;
  // Before an update, the quiet stretch runs from the last publication; after
  // one, the settling stretch from the first update.
  if (updates_ <= 1) since_publication_.mark();
}

std::size_t UpdateWait::updates() const {
  std::lock_guard lock(mutex_);
  return updates_;
}

bool UpdateWait::keep_going() {
  std::lock_guard lock(mutex_);
  const auto elapsed = std::chrono::duration_cast<milliseconds>(Clock::now() - began_);
  watched_ = elapsed;
  if (elapsed < bounds_.window) return true;
  auto progress = since_publication_.since_mark();
  if (!progress) {
    why_ = "the target's threads could no longer be read (it ended)";
    return false;
  }
  auto end_because = [&](std::string why) {
    why_ = std::move(why);
    progress_at_end_ = progress;
    return false;
  };
  if (updates_ > 0) {
    if (progress->available() < bounds_.settle && elapsed < bounds_.ceiling) return true;
    return end_because("the writer updated (" + std::to_string(updates_) + " update(s) seen); after the first, " +
                       progress->describe());
  }
  if (!published_seen_) return end_because("no publication was seen: the window only");
  if (elapsed >= bounds_.ceiling)
    return end_because("no update before the ceiling of " + seconds(bounds_.ceiling) + " (after the last publication, " +
                       progress->describe() + "; " + seconds(bounds_.quiet) + " of it would have ended the wait)");
  if (progress->available() < bounds_.quiet) return true;
  return end_because("no update in " + seconds(bounds_.quiet) + " of the target's time after its last publication (" +
                     progress->describe() + ")");
}

std::optional<TargetProgress::Reading> UpdateWait::progress_at_end() const {
  std::lock_guard lock(mutex_);
  return progress_at_end_;
}

std::string UpdateWait::why_ended() const {
  std::lock_guard lock(mutex_);
  return why_;
}

std::chrono::milliseconds UpdateWait::watched() const {
  std::lock_guard lock(mutex_);
  return watched_;
}

}  // namespace tracecorr::watch

// See discovery_wait.hpp.
#include "tracecorr/conform/discovery_wait.hpp"

#include <cstdio>
#include <filesystem>

#include "tracecorr/procfs.hpp"

namespace tracecorr::conform {
namespace {

std::string seconds(double ms) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f s", ms / 1000.0);
  return text;
}

double ms_between(DiscoveryWait::Clock::time_point a, DiscoveryWait::Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

std::string image_of(pid_t pid) {
  std::error_code ec;
  auto exe = std::filesystem::read_symlink("/proc/" + std::to_string(pid) + "/exe", ec);
  return ec ? std::string() : exe.string();
}

// "<ns on a CPU> <ns waiting on a run queue> <timeslices>"
bool read_schedstat(pid_t pid, pid_t tid, std::uint64_t& on_cpu, std::uint64_t& waiting) {
  std::string path = "/proc/" + std::to_string(pid) + "/task/" + std::to_string(tid) + "/schedstat";
  std::FILE* f = std::fopen(path.c_str(), "re");
  if (!f) return false;
  unsigned long long a = 0, b = 0;
  const bool ok = std::fscanf(f, "%llu %llu", &a, &b) == 2;
  std::fclose(f);
  on_cpu = a;
  waiting = b;
  return ok;
}

// Whether the thread wants to run: runnable (running or waiting for a CPU),
// or in an uninterruptible sleep (I/O, page faults), not by its own choice.
bool wants_to_run(pid_t pid, pid_t tid) {
  const char state = task_state(pid, tid);
  return state == 'R' || state == 'D';
}

}  // namespace

std::string TreeProgress::describe() const {
  return "in " + seconds(wall_ms) + " the tree (" + std::to_string(processes) + " process" + (processes == 1 ? "" : "es") +
         ") ran " + seconds(cpu_ms) + " of CPU, waited " + seconds(run_queue_ms) + " for a CPU, was held up " +
         seconds(held_up_ms) + " (runnable or in an uninterruptible sleep, hardly running) and was idle " +
         seconds(idle_ms) + " since its last exec or new process (" + std::to_string(execs) + " execs or new processes)";
}

DiscoveryWait::DiscoveryWait(std::function<std::vector<pid_t>()> tree, DiscoveryLimits limits)
    : tree_(std::move(tree)), limits_(limits), began_(Clock::now()), measured_at_(began_) {
  // Only progress from now on counts: the threads' times so far are the baseline.
  for (pid_t pid : tree_()) {
    images_[pid] = image_of(pid);
    for (int tid : numbered_entries("/proc/" + std::to_string(pid) + "/task")) {
      ThreadTimes t;
      if (read_schedstat(pid, tid, t.on_cpu_ns, t.waiting_ns)) threads_[tid] = t;
    }
  }
  progress_.processes = images_.size();
}

bool DiscoveryWait::over() {
  if (ended_ != Ended::kNot) return true;
  const auto now = Clock::now();
  if (now - measured_at_ < kMeasureInterval) return false;
  measure(now);
  if (progress_.processes == 0) ended_ = Ended::kTreeGone;
  else if (progress_.cpu_ms >= static_cast<double>(limits_.cpu.count())) ended_ = Ended::kCpu;
  else if (progress_.idle_ms >= static_cast<double>(limits_.idle.count())) ended_ = Ended::kIdle;
  else if (now >= ceiling()) ended_ = Ended::kCeiling;
  return ended_ != Ended::kNot;
}

void DiscoveryWait::measure(Clock::time_point now) {
  const double interval = ms_between(measured_at_, now);
  measured_at_ = now;
  progress_.wall_ms = ms_between(began_, now);
  std::map<pid_t, ThreadTimes> threads;
  std::map<pid_t, std::string> images;
  double ran_ns = 0, waited_ns = 0;
  std::size_t events = 0;
  bool wanting = false;
  for (pid_t pid : tree_()) {
    auto image = image_of(pid);
    if (auto before = images_.find(pid); before == images_.end() || before->second != image) ++events;
    images.emplace(pid, std::move(image));
    for (int tid : numbered_entries("/proc/" + std::to_string(pid) + "/task")) {
      ThreadTimes t;
      if (!read_schedstat(pid, tid, t.on_cpu_ns, t.waiting_ns)) continue;
      wanting = wanting || wants_to_run(pid, tid);
      ThreadTimes base;  // a thread born during the wait: all of its time is the wait's
      if (auto before = threads_.find(tid); before != threads_.end()) base = before->second;
      if (t.on_cpu_ns >= base.on_cpu_ns) ran_ns += static_cast<double>(t.on_cpu_ns - base.on_cpu_ns);
      if (t.waiting_ns >= base.waiting_ns) waited_ns += static_cast<double>(t.waiting_ns - base.waiting_ns);
      threads.emplace(tid, t);
    }
  }
  threads_ = std::move(threads);
  images_ = std::move(images);
  progress_.processes = images_.size();
  progress_.cpu_ms += ran_ns / 1e6;
  progress_.run_queue_ms += waited_ns / 1e6;
  const bool hardly_ran = (ran_ns + waited_ns) / 1e6 < kActiveShare * interval;
  if (hardly_ran && wanting) progress_.held_up_ms += interval;
  if (events > 0) {
    progress_.execs += events;
    progress_.idle_ms = 0;
  } else if (hardly_ran && !wanting) {
    progress_.idle_ms += interval;
  }
}

bool DiscoveryWait::starved() const {
  return ended_ == Ended::kCeiling && progress_.run_queue_ms + progress_.held_up_ms > progress_.cpu_ms;
}

std::string DiscoveryWait::figures() const {
  std::string why;
  switch (ended_) {
    case Ended::kNot: why = "still waiting"; break;
    case Ended::kTreeGone: why = "the tree exited"; break;
    case Ended::kCpu: why = "it ran " + seconds(static_cast<double>(limits_.cpu.count())) + " of CPU without publishing it"; break;
    case Ended::kIdle:
      why = "it was idle (not running, not wanting to) " + seconds(static_cast<double>(limits_.idle.count())) +
            " since its last exec or new process";
      break;
    case Ended::kCeiling:
      why = "the wall-clock ceiling of " + seconds(static_cast<double>(limits_.ceiling.count())) + " passed" +
            (starved() ? " while the target waited for a CPU (or in an uninterruptible sleep) longer than it ran "
                         "(starved): too busy a machine to tell what it publishes"
                       : "");
      break;
  }
  return why + "; " + progress_.describe();
}

}  // namespace tracecorr::conform

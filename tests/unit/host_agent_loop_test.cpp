// The host agent's loop reaches its deadline and its stop flag while the
// sampler always has more: a sampler whose ring buffer never empties (an
// agent on a host whose CPUs the sampled threads keep busy) returns a bounded
// batch and says so (Sampler::backlog), and the loop takes the next batch at
// once instead of waiting, checking its end between batches.
#include <gtest/gtest.h>

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "tracecorr/host_agent.hpp"
#include "tracecorr/sampled_processes.hpp"
#include "tracecorr/sampler.hpp"

namespace tracecorr {
namespace {

using namespace std::chrono_literals;

// Every poll delivers a batch and leaves more behind, as a ring buffer fed
// faster than it is read does.
class NeverEmptySampler final : public Sampler {
 public:
  std::string name() const override { return "never-empty"; }
  Status track(pid_t, LayoutSlot, const RecordLayout&, PointerSite) override { return Ok{}; }
  Status track_process_context(pid_t, std::optional<std::uint64_t>) override { return Ok{}; }
  Status untrack(pid_t, LayoutSlot) override { return Ok{}; }
  Expected<std::size_t> poll(const Callback& callback, std::chrono::milliseconds timeout) override {
    {
      std::lock_guard lk(mu_);
      timeouts_.push_back(timeout);
      if (stopped_ && stopped_->load()) ++polls_after_stop_;
    }
    Sample s;
    s.pid = 0x3fffffff;  // no process this agent follows
    s.tid = s.pid;
    for (int i = 0; i < kBatch; ++i) callback(s);
    std::this_thread::sleep_for(2ms);  // the batch's bounded consumption
    polled_ = true;
    return std::size_t{kBatch};
  }
  bool backlog() const override { return polled_; }
  SamplerCounters counters() const override { return {}; }

  void watch(const std::atomic<bool>& stop) { stopped_ = &stop; }
  std::vector<std::chrono::milliseconds> timeouts() const {
    std::lock_guard lk(mu_);
    return timeouts_;
  }
  std::size_t polls_after_stop() const {
    std::lock_guard lk(mu_);
    return polls_after_stop_;
  }

 private:
  static constexpr int kBatch = 64;
  mutable std::mutex mu_;
  std::vector<std::chrono::milliseconds> timeouts_;
  std::size_t polls_after_stop_ = 0;
  const std::atomic<bool>* stopped_ = nullptr;
  std::atomic<bool> polled_{false};
};

HostAgentOptions quiet_options() {
  HostAgentOptions o;
  o.log = nullptr;
  return o;
}

TEST(HostAgentLoop, ANeverEmptySamplerEndsAtTheDurationAndIsPolledWithoutWaits) {
  NeverEmptySampler sampler;
  HostAgentOptions o = quiet_options();
  o.duration = 300ms;
  HostAgent agent(o, sampler);
  std::atomic<bool> stop{false};
  ASSERT_TRUE(agent.run(stop));
  const auto timeouts = sampler.timeouts();
  ASSERT_GE(timeouts.size(), 2u);
  // The first poll may wait (nothing known yet); after it, each had a batch waiting.
  for (std::size_t i = 1; i < timeouts.size(); ++i) EXPECT_EQ(timeouts[i], 0ms) << "poll " << i;
}

TEST(HostAgentLoop, ANeverEmptySamplerStopsWhenTheFlagIsSet) {
  NeverEmptySampler sampler;
  HostAgent agent(quiet_options(), sampler);  // no duration: until stopped (SIGTERM sets the flag)
  std::atomic<bool> stop{false};
  sampler.watch(stop);
  std::thread stopper([&] {
    std::this_thread::sleep_for(200ms);
    stop = true;
  });
  Status st = agent.run(stop);
  stopper.join();
  ASSERT_TRUE(st);
  // The batch in hand when the flag was set, and the final one: no more.
  EXPECT_LE(sampler.polls_after_stop(), 2u);
}

// --pid: the duration is how long the named processes are sampled, counted
// from when each was examined once (a starved machine may take longer than
// the duration to examine them, and a run that ended first sampled nothing).
TEST(HostAgentLoop, TheDurationCountsFromWhenTheNamedProcessesWereExamined) {
  NeverEmptySampler sampler;
  HostAgentOptions o = quiet_options();
  o.pids = {::getpid()};  // publishes no protocol: examined, then looked at again each rescan
  o.duration = 300ms;
  HostAgent agent(o, sampler);
  std::atomic<bool> stop{false};
  ASSERT_TRUE(agent.run(stop));
  const auto timeline = agent.summary()["timeline"];
  const double examining = timeline["examining_s"], sampling = timeline["sampling_s"];
  EXPECT_GT(examining, 0.0) << timeline;
  EXPECT_GE(sampling - examining, 0.3 - 1e-6) << timeline;
  // Examined: what it published is stated, not "not examined".
  for (const auto& why : agent.nothing_readable()) EXPECT_EQ(why.find("not examined"), std::string::npos) << why;
}

TEST(HostAgentLoop, ANamedProcessNotExaminedBeforeTheStopIsNotSaidToPublishNothing) {
  NeverEmptySampler sampler;
  HostAgentOptions o = quiet_options();
  o.pids = {::getpid()};
  HostAgent agent(o, sampler);
  std::atomic<bool> stop{true};  // stopped before the first rescan
  ASSERT_TRUE(agent.run(stop));
  const auto why = agent.nothing_readable();
  ASSERT_EQ(why.size(), 1u);
  EXPECT_NE(why[0].find("not examined"), std::string::npos) << why[0];
  EXPECT_EQ(why[0].find("publishes none"), std::string::npos) << why[0];
}

// ---- a process that publishes two protocols -------------------------------------------

// Delivers, for this very process, one sample per layout slot at each poll:
// a process tracked in both slots (a hook's layout and SampledProcesses').
class TwoSlotSampler final : public Sampler {
 public:
  std::string name() const override { return "two-slot"; }
  Status track(pid_t, LayoutSlot, const RecordLayout&, PointerSite) override { return Ok{}; }
  Status track_process_context(pid_t, std::optional<std::uint64_t>) override { return Ok{}; }
  Status untrack(pid_t, LayoutSlot) override { return Ok{}; }
  Expected<std::size_t> poll(const Callback& callback, std::chrono::milliseconds timeout) override {
    std::this_thread::sleep_for(std::min(timeout, 5ms));
    for (LayoutSlot slot = 0; slot < kLayoutsPerProcess; ++slot) {
      Sample s;
      s.pid = s.tid = ::getpid();
      s.slot = slot;
      callback(s);
      ++delivered_[slot];
    }
    return std::size_t{kLayoutsPerProcess};
  }
  SamplerCounters counters() const override { return {}; }
  std::uint64_t delivered(LayoutSlot slot) const { return delivered_[slot]; }

 private:
  std::uint64_t delivered_[kLayoutsPerProcess] = {};
};

// A hook's part that holds this process and counts what it is handed, by slot.
class HoldingPart final : public AgentPart {
 public:
  explicit HoldingPart(AgentRun run) : run_(std::move(run)) {}
  void retire_gone() override {}
  bool examine(pid_t pid, bool) override { return pid == ::getpid(); }
  bool on_sample(const Sample& s) override {
    if (s.pid != ::getpid()) return false;
    ++handed[s.slot];
    return true;
  }
  std::size_t processes() const override { return 1; }
  std::size_t sampling() const override { return 1; }
  std::string live_text() const override { return "holding"; }
  void each_context(const std::function<void(pid_t, const FollowedContext&)>&) const override {}
  void summarize(nlohmann::json&) const override {}
  bool ever_held(pid_t pid) const override { return pid == ::getpid(); }
  std::optional<std::string> nothing_readable(pid_t) const override { return std::nullopt; }
  std::string not_published() const override { return "holding"; }

  AgentRun run_;
  std::uint64_t handed[kLayoutsPerProcess] = {};
};

TEST(HostAgentRouting, EachSampleGoesToWhoeverTrackedItsLayoutSlot) {
  TwoSlotSampler sampler;
  HostAgentOptions o = quiet_options();
  o.pids = {::getpid()};
  o.duration = 200ms;
  HostAgent agent(o, sampler);
  auto run = agent.make_run();
  ASSERT_TRUE(run) << run.error().message();
  EXPECT_NE(run->slot, HostAgent::kSampledProcessesSlot) << "a hook's part has a slot of its own";
  auto owned = std::make_unique<HoldingPart>(std::move(*run));
  HoldingPart& part = *owned;
  agent.add_part(std::move(owned));
  std::atomic<bool> stop{false};
  ASSERT_TRUE(agent.run(stop));
  const LayoutSlot mine = part.run_.slot;
  ASSERT_GT(sampler.delivered(mine), 0u);
  // The part gets every sample of its slot and none of SampledProcesses': the
  // loop routes by slot, not by pid (the part holds the pid).
  EXPECT_EQ(part.handed[mine], sampler.delivered(mine));
  EXPECT_EQ(part.handed[HostAgent::kSampledProcessesSlot], 0u);
  // This process publishes no sampled protocol: SampledProcesses follows
  // nothing, and its slot's samples are counted as nobody's.
  EXPECT_EQ(agent.summary()["totals"]["unknown_pid_samples"].get<std::uint64_t>(),
            sampler.delivered(HostAgent::kSampledProcessesSlot));
}

TEST(HostAgentRouting, HooksGetTheSlotsBeforeSampledProcessesAndNoMore) {
  TwoSlotSampler sampler;
  HostAgent agent(quiet_options(), sampler);
  std::vector<LayoutSlot> slots;
  for (LayoutSlot i = 0; i < HostAgent::kSampledProcessesSlot; ++i) {
    auto run = agent.make_run();
    ASSERT_TRUE(run) << run.error().message();
    slots.push_back(run->slot);
  }
  for (LayoutSlot i = 0; i < slots.size(); ++i) EXPECT_EQ(slots[i], i);
  auto one_too_many = agent.make_run();
  ASSERT_FALSE(one_too_many) << "slot " << one_too_many->slot << " handed out twice";
  EXPECT_NE(one_too_many.error().message().find("no layout slot left"), std::string::npos)
      << one_too_many.error().message();
}

}  // namespace
}  // namespace tracecorr

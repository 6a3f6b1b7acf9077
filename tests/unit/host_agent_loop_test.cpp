// The host agent's loop reaches its deadline and its stop flag while the
// sampler always has more: a sampler whose ring buffer never empties (an
// agent on a host whose CPUs the sampled threads keep busy) returns a bounded
// batch and says so (Sampler::backlog), and the loop takes the next batch at
// once instead of waiting, checking its end between batches.
#include <gtest/gtest.h>

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>
#include <vector>

#include "tracecorr/host_agent.hpp"
#include "tracecorr/sampler.hpp"

namespace tracecorr {
namespace {

using namespace std::chrono_literals;

// Every poll delivers a batch and leaves more behind, as a ring buffer fed
// faster than it is read does.
class NeverEmptySampler final : public Sampler {
 public:
  std::string name() const override { return "never-empty"; }
  Status track(pid_t, const RecordLayout&, PointerSite) override { return Ok{}; }
  Status track_process_context(pid_t, std::optional<std::uint64_t>) override { return Ok{}; }
  Status untrack(pid_t) override { return Ok{}; }
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

}  // namespace
}  // namespace tracecorr

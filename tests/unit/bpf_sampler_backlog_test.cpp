// The BPF sampler's poll returns after a bounded time however fast samples
// come: a consumer slower than the sampled threads (an agent on a host whose
// CPUs they keep busy) never sees the ring buffer empty, and libbpf consumes
// until it is. `tracecorr agent --duration 10` over 40 busy processes ran
// over 12 minutes that way and ignored SIGTERM: its loop never got back to
// its deadline or its stop flag.
#include <gtest/gtest.h>
#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>

#include "forked_child.hpp"
#include "test_record_layout.hpp"
#include "tracecorr/sampler.hpp"
#if defined(TRACECORR_HAVE_BPF)
#include "bpf_sampler.hpp"
#include "sampler_loader.hpp"
#endif

namespace tracecorr {
namespace {

using namespace std::chrono_literals;

#if defined(TRACECORR_HAVE_BPF)
// Never set: every sample of the child says "no record", which is all this needs.
thread_local std::uint8_t* t_unset_record = nullptr;

std::int64_t unset_record_offset() {
  return reinterpret_cast<std::intptr_t>(&t_unset_record) -
         reinterpret_cast<std::intptr_t>(__builtin_thread_pointer());
}

void* spin(void*) {
  for (;;) __asm__ volatile("" ::: "memory");  // burns its CPU: a sample at every tick it runs
  return nullptr;
}

constexpr int kSpinningThreads = 4;
constexpr auto kSlowCallback = 1ms;  // ~1000 samples/s taken: fewer than the child's threads give at 2 kHz
// The most one bounded poll takes through a callback of kSlowCallback.
constexpr std::size_t kMostPerPoll = static_cast<std::size_t>(bpf::SamplerLoader::kConsumeLimit / kSlowCallback) + 1;

// A backlog read to the end by read_what_was_sampled through a callback of
// kSlowCallback, sampling stopped or not; how many samples it read.
::testing::AssertionResult read_backlog_slowly(Sampler& sampler, const std::atomic<bool>& stopped, std::size_t& read) {
  read = 0;
  auto st = read_what_was_sampled(
      sampler,
      [&](const Sample&) {
        ++read;
        std::this_thread::sleep_for(kSlowCallback);
      },
      stopped);
  if (!st) return ::testing::AssertionFailure() << st.error().message();
  return ::testing::AssertionSuccess();
}

// A child whose kSpinningThreads threads all burn their CPUs.
test::ForkedChild spinning_child() {
  return test::ForkedChild([](test::ForkedChild::Pipes pipes) {
    pthread_t t;
    for (int i = 1; i < kSpinningThreads; ++i) pthread_create(&t, nullptr, spin, nullptr);
    (void)!write(pipes.report, "r", 1);
    spin(nullptr);
  });
}

// Once all of the child's threads spin, the sampler tracks it.
::testing::AssertionResult track_when_spinning(Sampler& sampler, test::ForkedChild& child) {
  char ready = 0;
  if (child.pid() <= 0 || !child.read(&ready, 1)) return ::testing::AssertionFailure() << "the child did not start";
  if (!sampler.track(child.pid(), test_support::test_record_layout(), PointerSite::tls_offset(unset_record_offset())))
    return ::testing::AssertionFailure() << "the sampler did not track pid " << child.pid();
  return ::testing::AssertionSuccess();
}

TEST(BpfSamplerBacklog, PollReturnsWhileTheRingBufferNeverEmpties) {
  auto made = bpf::make_bpf_sampler({.frequency_hz = 2000});
  if (!made) GTEST_SKIP() << made.error().message();
  auto sampler = std::move(*made);
  test::ForkedChild child = spinning_child();
  ASSERT_TRUE(track_when_spinning(*sampler, child));
  // Before the bound, the poll below never returned while the child ran: stop
  // the child after a while, so that such a poll fails the counts below
  // instead of hanging the test.
  std::atomic<bool> done{false};
  std::thread watchdog([&] {
    for (auto give_up = std::chrono::steady_clock::now() + 20s; !done && std::chrono::steady_clock::now() < give_up;)
      std::this_thread::sleep_for(10ms);
    if (!done) ::kill(child.pid(), SIGSTOP);
  });
  std::this_thread::sleep_for(300ms);  // a backlog: hundreds of samples wait
  std::size_t polls_with_backlog = 0;
  for (int i = 0; i < 5; ++i) {
    std::size_t taken = 0;
    auto n = sampler->poll(
        [&](const Sample& s) {
          taken += s.pid == child.pid();
          std::this_thread::sleep_for(kSlowCallback);
        },
        0ms);
    ASSERT_TRUE(n) << n.error().message();
    EXPECT_GE(*n, 1u) << "poll " << i << ": samples were waiting";
    EXPECT_LE(*n, kMostPerPoll) << "poll " << i << " consumed past its limit";
    polls_with_backlog += sampler->backlog();
  }
  done = true;
  watchdog.join();
  EXPECT_EQ(polls_with_backlog, 5u) << "each poll stopped at its limit with samples left";

  // Nothing sampled any more: the ring empties, and a poll that empties it has no backlog.
  ASSERT_TRUE(sampler->untrack(child.pid()));
  bool emptied = false;
  for (int i = 0; i < 200 && !emptied; ++i) {
    auto n = sampler->poll([](const Sample&) {}, 10ms);
    ASSERT_TRUE(n) << n.error().message();
    emptied = !sampler->backlog();
  }
  EXPECT_TRUE(emptied);
}

// At a run's end, what was sampled is read, all of it: a consumer slower than
// the sampled threads is behind by what they made meanwhile (an emulated
// guest's agent read 832 of 17786 samples in its one last batch, and the
// processes it began sampling last had none read).
TEST(BpfSamplerBacklog, WhatWasSampledIsAllReadAtTheEnd) {
  auto made = bpf::make_bpf_sampler({.frequency_hz = 2000});
  if (!made) GTEST_SKIP() << made.error().message();
  auto sampler = std::move(*made);
  test::ForkedChild child = spinning_child();
  ASSERT_TRUE(track_when_spinning(*sampler, child));
  std::this_thread::sleep_for(300ms);  // never polled: hundreds of samples wait
  std::size_t read = 0;
  const std::atomic<bool> not_stopped{false};
  // The child spins on: the read ends because sampling stopped, not because the ring emptied by chance.
  ASSERT_TRUE(read_backlog_slowly(*sampler, not_stopped, read));
  const auto after = sampler->counters();
  EXPECT_GT(read, kMostPerPoll) << "more than one bounded batch";
  EXPECT_EQ(after.unread, 0u) << "emitted " << after.emitted << ", read " << read;
  EXPECT_EQ(read, after.emitted) << "every emitted sample was read";
  std::this_thread::sleep_for(50ms);
  EXPECT_EQ(sampler->counters().emitted, after.emitted) << "nothing is sampled after the end";
}

// Stopped (SIGTERM): one more batch, and what is left is counted unread.
TEST(BpfSamplerBacklog, AStoppedRunReadsOneBatchAndCountsTheRestUnread) {
  auto made = bpf::make_bpf_sampler({.frequency_hz = 2000});
  if (!made) GTEST_SKIP() << made.error().message();
  auto sampler = std::move(*made);
  test::ForkedChild child = spinning_child();
  ASSERT_TRUE(track_when_spinning(*sampler, child));
  std::this_thread::sleep_for(300ms);
  std::size_t read = 0;
  const std::atomic<bool> stopped{true};
  ASSERT_TRUE(read_backlog_slowly(*sampler, stopped, read));
  const auto after = sampler->counters();
  EXPECT_GE(read, 1u);
  EXPECT_GT(after.unread, 0u) << "read " << read << " of " << after.emitted;
  EXPECT_EQ(read + after.unread, after.emitted);
}
#else
TEST(BpfSamplerBacklog, PollReturnsWhileTheRingBufferNeverEmpties) { GTEST_SKIP() << "this build has no BPF sampler"; }
TEST(BpfSamplerBacklog, WhatWasSampledIsAllReadAtTheEnd) { GTEST_SKIP() << "this build has no BPF sampler"; }
TEST(BpfSamplerBacklog, AStoppedRunReadsOneBatchAndCountsTheRestUnread) { GTEST_SKIP() << "this build has no BPF sampler"; }
#endif

}  // namespace
}  // namespace tracecorr

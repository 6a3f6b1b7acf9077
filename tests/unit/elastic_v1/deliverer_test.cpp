// The deliverer's own progress: how long its sending thread, once woken,
// waited for a CPU (the summary's timeline.sender_*), proven on a thread the
// test keeps from its CPU with a SCHED_FIFO spinner on the same CPU.
#include <gtest/gtest.h>

#include <pthread.h>
#include <sched.h>

#include <atomic>
#include <chrono>
#include <optional>
#include <thread>

#include "elastic_v1/agent/deliverer.hpp"

namespace tracecorr::elastic_v1::agent {
namespace {

using std::chrono::milliseconds;

// Pins the calling thread to one CPU for its lifetime (threads it creates meanwhile inherit it).
class PinnedToOneCpu {
 public:
  PinnedToOneCpu() {
    ok_ = ::sched_getaffinity(0, sizeof before_, &before_) == 0;
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(::sched_getcpu(), &one);
    ok_ = ok_ && ::sched_setaffinity(0, sizeof one, &one) == 0;
  }
  ~PinnedToOneCpu() {
    if (ok_) (void)::sched_setaffinity(0, sizeof before_, &before_);
  }
  bool ok() const { return ok_; }

 private:
  cpu_set_t before_{};
  bool ok_ = false;
};

TEST(Deliverer, SaysHowLongItsThreadWaitedForACpuOnceWoken) {
  std::atomic<bool> realtime{true};
  std::optional<Deliverer> deliverer;
  {
    PinnedToOneCpu pinned;
    if (!pinned.ok()) GTEST_SKIP() << "cannot pin a thread to one CPU here";
    deliverer.emplace(Deliverer::Options{});  // its thread shares the CPU, and wakes at least every 100 ms
    std::this_thread::sleep_for(milliseconds(50));
    // Holds the CPU for 300 ms: the deliverer's thread, woken by its timeout meanwhile, waits for it.
    std::thread spinner([&] {
      sched_param param{};
      param.sched_priority = 1;
      if (::pthread_setschedparam(::pthread_self(), SCHED_FIFO, &param) != 0) {
        realtime = false;
        return;
      }
      const auto until = std::chrono::steady_clock::now() + milliseconds(300);
      while (std::chrono::steady_clock::now() < until) {
      }
    });
    spinner.join();
  }
  if (!realtime) GTEST_SKIP() << "SCHED_FIFO not allowed here (not root?)";
  std::this_thread::sleep_for(milliseconds(250));  // it runs, sleeps again: the wait is counted then
  const Deliverer::CpuWait waited = deliverer->cpu_wait();
  EXPECT_GE(waited.longest, milliseconds(150)) << "woken within 100 ms of the spinner's start, it waited the rest";
  EXPECT_GE(waited.total, waited.longest);
  EXPECT_GT(waited.wakes, 2u);
}

}  // namespace
}  // namespace tracecorr::elastic_v1::agent

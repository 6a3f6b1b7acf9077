// TakeUpClock: when the agent read what tracecorr sent, from SIOCOUTQ on the
// sending socket. A datagram socketpair stands in for tracecorr and the agent.
#include "tracecorr/watch/take_up_clock.hpp"

#include <gtest/gtest.h>
#include <sys/socket.h>

#include <array>
#include <chrono>
#include <thread>

#include "tracecorr/fd.hpp"

namespace tracecorr::watch {
namespace {

using namespace std::chrono_literals;

struct Pair {
  UniqueFd sender, agent;
  Pair() {
    int fds[2];
    EXPECT_EQ(::socketpair(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0, fds), 0);
    sender.reset(fds[0]);
    agent.reset(fds[1]);
  }
  std::uint64_t send(TakeUpClock& clock) {
    const char byte = 'x';
    EXPECT_EQ(::send(sender.get(), &byte, 1, MSG_DONTWAIT), 1);
    return clock.sent();
  }
  void read_one() {
    char byte;
    EXPECT_EQ(::recv(agent.get(), &byte, 1, 0), 1);
  }
};

TEST(TakeUpClock, AMessageIsReadOnlyOnceTheAgentTookItOffItsQueue) {
  TakeUpClock clock;
  Pair p;
  clock.watch(p.sender.get());
  auto first = p.send(clock);
  auto second = p.send(clock);
  EXPECT_EQ(clock.unread(), 2u);
  std::this_thread::sleep_for(20ms);  // the clock looks many times meanwhile
  EXPECT_FALSE(clock.read_after(first)) << "nothing was read yet";
  p.read_one();
  std::this_thread::sleep_for(20ms);
  EXPECT_FALSE(clock.read_after(first)) << "one of two read: the queue was never seen empty";
  auto before = std::chrono::system_clock::now();
  p.read_one();
  auto read = clock.wait_until_read(2000ms);
  ASSERT_TRUE(read);
  EXPECT_GE(*read, before);
  ASSERT_TRUE(clock.read_after(first));
  ASSERT_TRUE(clock.read_after(second));
  EXPECT_EQ(*clock.read_after(first), *clock.read_after(second));
  EXPECT_EQ(clock.unread(), 0u);
}

TEST(TakeUpClock, AReaderFasterThanTheSenderStillCounts) {
  // The agent reads before the sender has told the clock: matched by
  // sequence number, the message is still seen read.
  TakeUpClock clock;
  Pair p;
  clock.watch(p.sender.get());
  const char byte = 'x';
  ASSERT_EQ(::send(p.sender.get(), &byte, 1, MSG_DONTWAIT), 1);
  p.read_one();
  auto sequence = clock.sent();
  ASSERT_TRUE(clock.wait_until_read(2000ms));
  EXPECT_TRUE(clock.read_after(sequence));
}

TEST(TakeUpClock, AStuckReaderIsNeverSeenToRead) {
  TakeUpClock clock;
  Pair p;
  clock.watch(p.sender.get());
  auto sequence = p.send(clock);
  EXPECT_FALSE(clock.wait_until_read(50ms));
  EXPECT_FALSE(clock.read_after(sequence));
}

TEST(TakeUpClock, AReplacedSocketIsWatchedUntilItsQueueIsRead) {
  // A profiler restart: the old connection's datagrams are still queued.
  TakeUpClock clock;
  Pair old_connection, new_connection;
  clock.watch(old_connection.sender.get());
  auto on_old = old_connection.send(clock);
  clock.watch(new_connection.sender.get());
  auto on_new = new_connection.send(clock);
  new_connection.read_one();
  std::this_thread::sleep_for(20ms);
  EXPECT_FALSE(clock.read_after(on_old)) << "the old socket still holds a datagram";
  EXPECT_FALSE(clock.read_after(on_new));
  old_connection.read_one();
  ASSERT_TRUE(clock.wait_until_read(2000ms));
  EXPECT_TRUE(clock.read_after(on_old));
  EXPECT_TRUE(clock.read_after(on_new));
}

}  // namespace
}  // namespace tracecorr::watch

// When the agent read what tracecorr sent it.
//
// A unix datagram stays charged to its sender's socket (SIOCOUTQ) until the
// receiver takes it off its queue. The moment tracecorr's sending socket is
// seen holding none of its bytes therefore bounds, from above, when every
// datagram sent before it was read. Judges use that bound instead of assuming
// a message takes effect when it is sent: a slow poller (EDOT Java polls every
// 20 ms) or an agent starved of CPU reads it seconds later.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "tracecorr/fd.hpp"

namespace tracecorr::watch {

class TakeUpClock {
 public:
  using TimePoint = std::chrono::system_clock::time_point;
  // How often the sending sockets are looked at while something is unread.
  static constexpr auto kInterval = std::chrono::microseconds(500);

  TakeUpClock();
  ~TakeUpClock();  // stops and joins
  TakeUpClock(const TakeUpClock&) = delete;
  TakeUpClock& operator=(const TakeUpClock&) = delete;

  // The socket tracecorr sends on from now on (duplicated, so the caller may
  // close its own). A socket replaced by a reconnect is still watched until
  // the agent has read what it queued there.
  void watch(int socket_fd);
  // A datagram was queued just now on the watched socket; its sequence
  // number (1, 2, ...), by which read_after() knows it.
  std::uint64_t sent();
  // Datagrams sent since the sockets were last seen empty.
  std::size_t unread() const;
  // When the datagram with sequence number `sequence` had been read at the
  // latest: the first look that found every socket empty after it was sent.
  // (By sequence, not by time: a reader fast enough to take a datagram
  // before its sender has stamped it must still be seen to have read it.)
  std::optional<TimePoint> read_after(std::uint64_t sequence) const;
  // Waits up to `patience` for everything sent so far to be read; when.
  std::optional<TimePoint> wait_until_read(std::chrono::milliseconds patience);

 private:
  void run();
  bool all_read_locked();

  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<UniqueFd> sockets_;  // the current one last
  std::size_t sent_since_read_ = 0;  // datagrams sent since the sockets were last seen empty
  std::uint64_t sent_total_ = 0;
  bool stopping_ = false;
  struct Read {
    TimePoint at;
    std::uint64_t covers;  // sequence numbers up to this one had been read
  };
  std::vector<Read> read_;  // ascending, one per transition to "all read"
  std::thread thread_;
};

}  // namespace tracecorr::watch

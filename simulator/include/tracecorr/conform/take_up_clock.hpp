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
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "tracecorr/fd.hpp"

namespace tracecorr::conform {

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
  // A datagram was queued just now on the watched socket.
  void sent();
  // The first moment after `t` at which every socket was seen empty.
  std::optional<TimePoint> read_after(TimePoint t) const;
  // Waits up to `patience` for everything sent so far to be read; when.
  std::optional<TimePoint> wait_until_read(std::chrono::milliseconds patience);

 private:
  void run();
  bool all_read_locked();

  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<UniqueFd> sockets_;  // the current one last
  bool unread_ = false;
  bool stopping_ = false;
  std::vector<TimePoint> read_at_;  // ascending, one per transition to "all read"
  std::thread thread_;
};

}  // namespace tracecorr::conform

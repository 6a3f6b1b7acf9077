#include "tracecorr/watch/take_up_clock.hpp"

#include <fcntl.h>
#include <linux/sockios.h>
#include <sys/ioctl.h>

#include <algorithm>

namespace tracecorr::watch {

TakeUpClock::TakeUpClock() : thread_([this] { run(); }) {}

TakeUpClock::~TakeUpClock() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  thread_.join();
}

void TakeUpClock::watch(int socket_fd) {
  UniqueFd copy(::fcntl(socket_fd, F_DUPFD_CLOEXEC, 0));
  if (!copy) return;
  std::lock_guard lock(mutex_);
  sockets_.push_back(std::move(copy));
}

std::uint64_t TakeUpClock::sent() {
  std::uint64_t sequence;
  {
    std::lock_guard lock(mutex_);
    ++sent_since_read_;
    sequence = ++sent_total_;
  }
  changed_.notify_all();
  return sequence;
}

std::size_t TakeUpClock::unread() const {
  std::lock_guard lock(mutex_);
  return sent_since_read_;
}

bool TakeUpClock::all_read_locked() {
  // Replaced sockets are dropped once empty: nothing more is sent on them.
  for (std::size_t i = 0; i < sockets_.size();) {
    int unread = 0;
    if (::ioctl(sockets_[i].get(), SIOCOUTQ, &unread) != 0) unread = 0;  // a dead socket holds nothing to read
    bool current = i + 1 == sockets_.size();
    if (unread > 0) return false;
    if (!current) {
      sockets_.erase(sockets_.begin() + static_cast<long>(i));
      continue;
    }
    ++i;
  }
  return true;
}

void TakeUpClock::run() {
  std::unique_lock lock(mutex_);
  for (;;) {
    changed_.wait(lock, [this] { return stopping_ || sent_since_read_ > 0; });
    if (stopping_) return;
    // The moment is taken before the look: a datagram sent during the look
    // is stamped later than it, so it is never taken for read.
    auto looked_at = std::chrono::system_clock::now();
    if (all_read_locked()) {
      sent_since_read_ = 0;
      read_.push_back({std::max(looked_at, read_.empty() ? looked_at : read_.back().at), sent_total_});
      changed_.notify_all();
      continue;
    }
    changed_.wait_for(lock, kInterval, [this] { return stopping_; });
  }
}

std::optional<TakeUpClock::TimePoint> TakeUpClock::read_after(std::uint64_t sequence) const {
  std::lock_guard lock(mutex_);
  auto it = std::partition_point(read_.begin(), read_.end(), [&](const Read& r) { return r.covers < sequence; });
  if (it == read_.end()) return std::nullopt;
  return it->at;
}

std::optional<TakeUpClock::TimePoint> TakeUpClock::wait_until_read(std::chrono::milliseconds patience) {
  auto asked = std::chrono::system_clock::now();
  std::unique_lock lock(mutex_);
  bool read = changed_.wait_for(lock, patience, [&] { return sent_since_read_ == 0 || stopping_; });
  if (!read) return std::nullopt;
  // Nothing unread: the last "all read" moment covers everything sent so far.
  return read_.empty() ? asked : std::max(read_.back().at, asked);
}

}  // namespace tracecorr::watch

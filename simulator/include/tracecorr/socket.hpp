// The agent's datagram socket, seen from the host.
//
// The path comes from the target, so it is resolved inside /proc/PID/root with
// openat2(RESOLVE_IN_ROOT) and never escapes it; what is found must be a socket.
// Sending never blocks: a full queue is reported, not waited on.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <span>
#include <string>

#include "tracecorr/error.hpp"
#include "tracecorr/fd.hpp"

namespace tracecorr {

// An O_PATH descriptor for `path` as seen by `pid`.
Expected<UniqueFd> open_in_target_root(pid_t pid, const std::string& path, int extra_flags = 0);

struct SocketFacts {
  bool is_socket = false;
  std::uint64_t inode = 0;
  uid_t owner = 0;
  unsigned mode = 0;                 // permission bits
  bool bound_by_target = false;      // the target holds an fd on this socket inode
  bool datagram = false;             // from /proc/PID/net/unix
  bool target_nonblocking = false;   // O_NONBLOCK in the target's fdinfo
};
Expected<SocketFacts> examine_socket(pid_t pid, const std::string& path);

enum class SendOutcome { Sent, WouldBlock, Refused };

class AgentSocket {
 public:
  static Expected<AgentSocket> connect(pid_t pid, const std::string& path);
  SendOutcome send(std::span<const std::uint8_t> datagram);  // MSG_DONTWAIT
  int last_errno() const { return last_errno_; }
  int fd() const { return fd_.get(); }

 private:
  explicit AgentSocket(UniqueFd fd) : fd_(std::move(fd)) {}
  UniqueFd fd_;
  int last_errno_ = 0;
};

}  // namespace tracecorr

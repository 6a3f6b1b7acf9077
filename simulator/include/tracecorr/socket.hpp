// The agent's datagram socket, seen from the host.
//
// The path comes from the target, so it is resolved inside /proc/PID/root with
// openat2(RESOLVE_IN_ROOT) and never escapes it; what is found must be a socket.
// Sending never blocks: a full queue is reported, not waited on.
#pragma once

#include <fcntl.h>
#include <sys/types.h>

#include <cstdint>
#include <span>
#include <string>

#include "tracecorr/error.hpp"
#include "tracecorr/fd.hpp"

namespace tracecorr {

// A descriptor for `path` as seen by `pid`: resolved inside /proc/PID/root
// (RESOLVE_IN_ROOT: absolute paths and ".." stay inside; RESOLVE_NO_MAGICLINKS:
// no /proc/*/fd jumps). `open_flags` defaults to O_PATH; pass O_RDONLY to read
// the file. O_CLOEXEC is always added.
Expected<UniqueFd> open_in_target_root(pid_t pid, const std::string& path, int open_flags = O_PATH);

// The socket is identified by the file the path resolves to (device and
// inode), matched against the files that the target's own socket descriptors
// (/proc/PID/fd -> socket:[N]) are bound to, as the kernel reports them
// (sock_diag UNIX_DIAG_VFS, in the target's network namespace). The path
// string is never compared, so "/tmp/s/../s/x.sock", "//tmp/s/x.sock", a
// symlinked directory and a socket bound by a relative name all match.
struct SocketFacts {
  bool is_socket = false;
  unsigned file_type = 0;           // S_IFMT bits of what the path names (describe_file_type)
  std::uint64_t inode = 0;          // of the socket file
  std::uint64_t socket_inode = 0;   // of the socket object ("socket:[N]"), when bound_by_target
  uid_t owner = 0;
  gid_t group = 0;
  unsigned mode = 0;                 // permission bits
  uid_t target_uid = 0;              // the target's effective uid, to judge ownership
  bool bound_by_target = false;      // one of the target's socket fds is bound to this file
  bool datagram = false;             // its type is SOCK_DGRAM
  unsigned socket_type = 0;          // its type (1 SOCK_STREAM, 2 SOCK_DGRAM, 5 SOCK_SEQPACKET)
  bool target_nonblocking = false;   // O_NONBLOCK in the target's fdinfo
  int target_fd = -1;                // the target's descriptor for it, when bound_by_target
};
// Errors: the path does not resolve in the target's root, or the
// process is gone. A path naming something that is not a socket is not an
// error: is_socket says so.
Expected<SocketFacts> examine_socket(pid_t pid, const std::string& path);
std::string describe_file_type(unsigned file_type);  // "a FIFO", "a regular file", ...

enum class SendOutcome { Sent, WouldBlock, Refused };
const char* to_string(SendOutcome o);

class AgentSocket {
 public:
  // Connects to the socket file `path` names inside the target's root. Sends
  // only where the target itself could: refuses anything that is not a
  // datagram socket the target holds a descriptor for (examine_socket's
  // bound_by_target), so a target cannot aim root's datagrams at another
  // service's socket.
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

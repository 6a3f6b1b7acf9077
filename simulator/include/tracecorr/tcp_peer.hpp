// Who is at the other end of a local TCP connection: the OTLP receiver asks it
// of every connection, because any local user can reach a loopback port.
//
// The kernel knows both ends of a loopback connection. Given the accepted
// socket's two addresses, sock_diag (NETLINK_SOCK_DIAG, inet_diag, an exact
// lookup, not a dump) names the inode of the socket at the other end, bound to
// the peer's address and connected to ours; the process holding it is the one
// whose /proc/PID/fd lists "socket:[inode]". Both lookups happen in the
// network namespace the connection lives in (a container's own loopback).
#pragma once

#include <sys/socket.h>
#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "tracecorr/error.hpp"
#include "tracecorr/fd.hpp"

namespace tracecorr {

// Whether `pid` lives in tracecorr's own network namespace (/proc/PID/ns/net
// against /proc/self/ns/net). Errors: the process is gone or unreadable.
Expected<bool> shares_network_namespace(pid_t pid);
// "net:[4026532301]": the namespace /proc/PID/ns/net names, for messages.
std::string network_namespace_name(pid_t pid);

// Runs `make` on a short-lived thread that enters `pid`'s network namespace
// (setns) and returns what it made: a socket created there stays in that
// namespace for its life, wherever it is used from. `make` returns an invalid
// descriptor on failure, errno set. Errors name the namespace and why.
Expected<UniqueFd> make_in_network_namespace(pid_t pid, const std::function<UniqueFd()>& make);

// A NETLINK_SOCK_DIAG socket in the network namespace of `pid`, or in
// tracecorr's own when `pid` shares it (or is 0).
Expected<UniqueFd> open_sock_diag(pid_t pid = 0);

// The socket at the other end of a TCP connection whose accepted side has
// the addresses `local` and `peer` (getsockname and getpeername of it): the
// socket bound to `peer` and connected to `local`. kNotFound when no such
// socket exists any more; inode 0 when it exists but no descriptor holds it
// (closed by its process, or the process exited).
//
// A kernel whose sock_diag has no TCP handler (inet_diag and tcp_diag are
// modules, not loaded and not loadable: a minimal VM or initramfs, a host
// with module loading locked) answers every lookup "no such socket", as for
// a peer that is gone. Our own end of the connection is there (the caller
// holds it): when sock_diag does not find it either, the peer is looked up in
// /proc/PID/net/tcp or tcp6 instead (PID `proc_net_of`, 0: tracecorr's own
// network namespace), at most kMaxProcNetTcpLines lines.
struct TcpPeerSocket {
  std::uint64_t inode = 0;  // sockfs inode ("socket:[N]")
  uid_t uid = 0;            // of the process that created it
  int state = 0;            // TCP state (linux/tcp_states.h: 1 ESTABLISHED, 4 FIN_WAIT1, 8 CLOSE_WAIT, ...)
};
// "ESTABLISHED", "CLOSE-WAIT", ... for messages.
std::string tcp_state_name(int state);
Expected<TcpPeerSocket> tcp_peer_socket(int diag_fd, const sockaddr_storage& local, const sockaddr_storage& peer,
                                        pid_t proc_net_of = 0);
inline constexpr std::size_t kMaxProcNetTcpLines = 1u << 18;
// The same lookup in /proc/PID/net/tcp or tcp6 alone (the kernel's listing of
// the namespace's TCP sockets, there whatever modules are loaded).
Expected<TcpPeerSocket> tcp_peer_socket_from_proc(pid_t proc_net_of, const sockaddr_storage& local,
                                                  const sockaddr_storage& peer);

// Which of `pids` holds a descriptor for the socket with sockfs inode
// `inode` (/proc/PID/fd -> socket:[inode]); at most `max_fds_per_process`
// descriptors of each are looked at. nullopt: none of them.
inline constexpr std::size_t kMaxFdsLookedAt = 65536;
std::optional<pid_t> holder_of_socket(std::uint64_t inode, const std::vector<pid_t>& pids,
                                      std::size_t max_fds_per_process = kMaxFdsLookedAt);
// Which process of the host holds it, looking at `max_fds` descriptors in all
// at most: a bound of work, not of time, so that a loaded machine names the
// same holder as an idle one. nullopt: none found within it.
std::optional<pid_t> host_holder_of_socket(std::uint64_t inode, std::size_t max_fds);

}  // namespace tracecorr

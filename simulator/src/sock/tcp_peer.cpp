#include "tracecorr/tcp_peer.hpp"

#include <fcntl.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <optional>
#include <string_view>
#include <thread>

#include "tracecorr/procfs.hpp"

namespace tracecorr {
namespace {

std::string ns_path(pid_t pid) { return process_dir(pid) + "/ns/net"; }

// The "socket:[N]" a descriptor link names, or 0.
std::uint64_t socket_inode_of_link(std::string_view text) {
  if (text.substr(0, 8) != "socket:[" || text.empty() || text.back() != ']') return 0;
  std::uint64_t inode = 0;
  auto [p, ec] = std::from_chars(text.data() + 8, text.data() + text.size() - 1, inode);
  return ec == std::errc() && p == text.data() + text.size() - 1 ? inode : 0;
}

// Whether `pid` holds the socket, looking at no more descriptors than
// `budget` allows (what it looked at is taken from it).
bool process_holds_socket(pid_t pid, std::uint64_t inode, std::size_t& budget) {
  const std::string fd_dir = process_dir(pid) + "/fd";
  for (int fd : numbered_entries(fd_dir)) {
    if (budget == 0) break;
    --budget;
    char link[64];
    ssize_t n = ::readlink((fd_dir + "/" + std::to_string(fd)).c_str(), link, sizeof link);
    if (n > 0 && socket_inode_of_link(std::string_view(link, static_cast<std::size_t>(n))) == inode) return true;
  }
  return false;
}

// Fills the inet_diag socket id for the socket bound to `bound` and connected to `to`.
bool fill_id(inet_diag_sockid& id, const sockaddr_storage& bound, const sockaddr_storage& to) {
  if (bound.ss_family != to.ss_family) return false;
  id.idiag_cookie[0] = id.idiag_cookie[1] = INET_DIAG_NOCOOKIE;
  if (bound.ss_family == AF_INET) {
    const auto& b = reinterpret_cast<const sockaddr_in&>(bound);
    const auto& t = reinterpret_cast<const sockaddr_in&>(to);
    id.idiag_sport = b.sin_port;
    id.idiag_dport = t.sin_port;
    std::memcpy(id.idiag_src, &b.sin_addr, sizeof b.sin_addr);
    std::memcpy(id.idiag_dst, &t.sin_addr, sizeof t.sin_addr);
    return true;
  }
  if (bound.ss_family == AF_INET6) {
    const auto& b = reinterpret_cast<const sockaddr_in6&>(bound);
    const auto& t = reinterpret_cast<const sockaddr_in6&>(to);
    id.idiag_sport = b.sin6_port;
    id.idiag_dport = t.sin6_port;
    std::memcpy(id.idiag_src, &b.sin6_addr, sizeof b.sin6_addr);
    std::memcpy(id.idiag_dst, &t.sin6_addr, sizeof t.sin6_addr);
    id.idiag_if = b.sin6_scope_id;
    return true;
  }
  return false;
}

}  // namespace

Expected<bool> shares_network_namespace(pid_t pid) {
  struct stat theirs {}, ours {};
  if (::stat(ns_path(pid).c_str(), &theirs) != 0)
    return make_error(std::string("cannot read its network namespace: ") + std::strerror(errno), ns_path(pid));
  if (::stat("/proc/self/ns/net", &ours) != 0)
    return make_error(std::string("cannot read tracecorr's network namespace: ") + std::strerror(errno));
  return theirs.st_dev == ours.st_dev && theirs.st_ino == ours.st_ino;
}

std::string network_namespace_name(pid_t pid) {
  char link[64];
  ssize_t n = ::readlink(ns_path(pid).c_str(), link, sizeof link - 1);
  return n > 0 ? std::string(link, static_cast<std::size_t>(n)) : std::string("net:[?]");
}

Expected<UniqueFd> make_in_network_namespace(pid_t pid, const std::function<UniqueFd()>& make) {
  UniqueFd ns(::open(ns_path(pid).c_str(), O_RDONLY | O_CLOEXEC));
  if (!ns) return make_error(std::string("cannot open the network namespace: ") + std::strerror(errno), ns_path(pid));
  UniqueFd made;
  int err = 0;
  // setns changes the calling thread only: a thread of its own enters, makes
  // and ends, and tracecorr's other threads stay where they were.
  std::thread([&] {
    if (::setns(ns.get(), CLONE_NEWNET) != 0) {
      err = errno;
      return;
    }
    made = make();
    if (!made) err = errno;
  }).join();
  if (!made)
    return make_error(std::string("in the network namespace ") + network_namespace_name(pid) + ": " + std::strerror(err),
                      ns_path(pid));
  return made;
}

Expected<UniqueFd> open_sock_diag(pid_t pid) {
  auto open_diag = [] { return UniqueFd(::socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG)); };
  if (pid > 0) {
    auto shared = shares_network_namespace(pid);
    if (!shared) return shared.error();
    if (!*shared) return make_in_network_namespace(pid, open_diag);
  }
  UniqueFd fd = open_diag();
  if (!fd) return make_error(std::string("netlink sock_diag socket failed: ") + std::strerror(errno));
  return fd;
}

namespace {

// sock_diag's exact lookup of the socket bound to `bound` and connected to
// `to`; kNotFound when the kernel answers ENOENT (no such socket, or no TCP
// handler at all).
Expected<TcpPeerSocket> diag_lookup(int diag_fd, const sockaddr_storage& bound, const sockaddr_storage& to) {
  struct {
    nlmsghdr header;
    inet_diag_req_v2 request;
  } message{};
  message.header.nlmsg_len = sizeof message;
  message.header.nlmsg_type = SOCK_DIAG_BY_FAMILY;
  message.header.nlmsg_flags = NLM_F_REQUEST;  // one socket by its addresses, not a dump
  message.request.sdiag_family = static_cast<std::uint8_t>(bound.ss_family);
  message.request.sdiag_protocol = IPPROTO_TCP;
  message.request.idiag_states = ~0u;
  if (!fill_id(message.request.id, bound, to)) return make_error("not a TCP/IP connection");
  sockaddr_nl kernel{};
  kernel.nl_family = AF_NETLINK;
  if (::sendto(diag_fd, &message, sizeof message, 0, reinterpret_cast<sockaddr*>(&kernel), sizeof kernel) < 0)
    return make_error(std::string("sock_diag request failed: ") + std::strerror(errno));
  alignas(nlmsghdr) char buffer[8192];
  for (;;) {
    ssize_t n = ::recv(diag_fd, buffer, sizeof buffer, MSG_DONTWAIT);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) {
      pollfd p{diag_fd, POLLIN, 0};
      if (::poll(&p, 1, 1000) <= 0) return make_error("no sock_diag answer within 1 s");
      continue;
    }
    if (n <= 0) return make_error(std::string("sock_diag answer failed: ") + std::strerror(n < 0 ? errno : EIO));
    int len = static_cast<int>(n);
    for (auto* h = reinterpret_cast<nlmsghdr*>(buffer); NLMSG_OK(h, len); h = NLMSG_NEXT(h, len)) {
      if (h->nlmsg_type == NLMSG_ERROR) {
        const int error = -static_cast<nlmsgerr*>(NLMSG_DATA(h))->error;
        if (error == ENOENT) return make_error(ErrorKind::kNotFound, "the peer's socket is gone");
        return make_error(std::string("sock_diag: ") + std::strerror(error) + " (is the inet_diag module available?)");
      }
      if (h->nlmsg_type != SOCK_DIAG_BY_FAMILY || h->nlmsg_len < NLMSG_LENGTH(sizeof(inet_diag_msg))) continue;
      const auto* found = static_cast<inet_diag_msg*>(NLMSG_DATA(h));
      return TcpPeerSocket{found->idiag_inode, static_cast<uid_t>(found->idiag_uid), found->idiag_state};
    }
  }
}

// An address as /proc/net/tcp{,6} prints it: each 32-bit word of the
// network-order bytes read as a native integer, "%08X" (so "0100007F" for
// 127.0.0.1 on a little-endian machine), then ":" and the port, "%04X".
std::string proc_net_address(const sockaddr_storage& a) {
  const unsigned char* bytes = nullptr;
  std::size_t size = 0;
  std::uint16_t port = 0;
  if (a.ss_family == AF_INET) {
    const auto& in = reinterpret_cast<const sockaddr_in&>(a);
    bytes = reinterpret_cast<const unsigned char*>(&in.sin_addr);
    size = sizeof in.sin_addr;
    port = ntohs(in.sin_port);
  } else {
    const auto& in6 = reinterpret_cast<const sockaddr_in6&>(a);
    bytes = reinterpret_cast<const unsigned char*>(&in6.sin6_addr);
    size = sizeof in6.sin6_addr;
    port = ntohs(in6.sin6_port);
  }
  std::string text;
  char word_text[16];
  for (std::size_t at = 0; at < size; at += 4) {
    std::uint32_t word = 0;
    std::memcpy(&word, bytes + at, 4);
    std::snprintf(word_text, sizeof word_text, "%08X", word);
    text += word_text;
  }
  std::snprintf(word_text, sizeof word_text, ":%04X", port);
  return text + word_text;
}

}  // namespace

Expected<TcpPeerSocket> tcp_peer_socket_from_proc(pid_t proc_net_of, const sockaddr_storage& local,
                                                  const sockaddr_storage& peer) {
  if (local.ss_family != peer.ss_family || (peer.ss_family != AF_INET && peer.ss_family != AF_INET6))
    return make_error("not a TCP/IP connection");
  const std::string path = (proc_net_of > 0 ? process_dir(proc_net_of) : std::string("/proc/self")) +
                           (peer.ss_family == AF_INET ? "/net/tcp" : "/net/tcp6");
  std::FILE* f = std::fopen(path.c_str(), "re");
  if (!f) return make_error(std::string("cannot read the TCP socket list: ") + std::strerror(errno), path);
  const std::string bound = proc_net_address(peer), connected = proc_net_address(local);
  char line[512];
  std::size_t lines = 0;
  std::optional<TcpPeerSocket> found;
  while (!found && std::fgets(line, sizeof line, f)) {
    if (++lines > kMaxProcNetTcpLines) break;
    // Most lines are other sockets (TIME-WAIT ones pile up under a stream of
    // short connections): the local address, after "sl:", is compared first.
    const char* colon = std::strchr(line, ':');
    const char* address = colon ? colon + 1 + std::strspn(colon + 1, " ") : nullptr;
    if (!address || std::strncmp(address, bound.c_str(), bound.size()) != 0) continue;
    char local_text[40], remote_text[40];
    unsigned state = 0, uid = 0;
    unsigned long long inode = 0;
    // "  sl  local_address rem_address   st tx_queue:rx_queue tr:tm->when retrnsmt   uid  timeout inode"
    if (std::sscanf(line, " %*u: %39s %39s %x %*x:%*x %*x:%*x %*x %u %*d %llu", local_text, remote_text, &state, &uid,
                    &inode) == 5 &&
        bound == local_text && connected == remote_text)
      found = TcpPeerSocket{inode, static_cast<uid_t>(uid), static_cast<int>(state)};
  }
  std::fclose(f);
  if (found) return *found;
  if (lines > kMaxProcNetTcpLines)
    return make_error(ErrorKind::kTooLong, "more than " + std::to_string(kMaxProcNetTcpLines) +
                                                  " TCP sockets listed, the peer's not among the first", path);
  return make_error(ErrorKind::kNotFound, "the peer's socket is gone", path);
}

Expected<TcpPeerSocket> tcp_peer_socket(int diag_fd, const sockaddr_storage& local, const sockaddr_storage& peer,
                                        pid_t proc_net_of) {
  auto found = diag_lookup(diag_fd, peer, local);
  if (found || found.error().kind != ErrorKind::kNotFound) return found;
  // Gone, or a sock_diag blind to TCP: it does not find our own end either.
  auto ours = diag_lookup(diag_fd, local, peer);
  if (ours || ours.error().kind != ErrorKind::kNotFound) return found;
  return tcp_peer_socket_from_proc(proc_net_of, local, peer);
}

std::string tcp_state_name(int state) {
  static constexpr const char* kNames[] = {"?",         "ESTABLISHED", "SYN-SENT",   "SYN-RECV", "FIN-WAIT-1", "FIN-WAIT-2",
                                           "TIME-WAIT", "CLOSE",       "CLOSE-WAIT", "LAST-ACK", "LISTEN",     "CLOSING"};
  return state >= 0 && state < static_cast<int>(std::size(kNames)) ? kNames[state] : "state " + std::to_string(state);
}

std::optional<pid_t> holder_of_socket(std::uint64_t inode, const std::vector<pid_t>& pids, std::size_t max_fds) {
  if (inode == 0) return std::nullopt;
  for (pid_t pid : pids)
    if (std::size_t budget = max_fds; process_holds_socket(pid, inode, budget)) return pid;
  return std::nullopt;
}

std::optional<pid_t> host_holder_of_socket(std::uint64_t inode, std::size_t max_fds) {
  if (inode == 0) return std::nullopt;
  std::size_t budget = max_fds;
  for (int pid : numbered_entries("/proc")) {
    if (budget == 0) break;
    if (process_holds_socket(pid, inode, budget)) return pid;
  }
  return std::nullopt;
}

}  // namespace tracecorr

#include "tracecorr/socket.hpp"

#include <linux/netlink.h>
#include <linux/openat2.h>
#include <linux/rtnetlink.h>
#include <linux/sock_diag.h>
#include <linux/unix_diag.h>
#include <poll.h>
#include <sys/sysmacros.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <optional>
#include <string_view>
#include <vector>

#include "tracecorr/maps.hpp"
#include "tracecorr/procfs.hpp"
#include "tracecorr/tcp_peer.hpp"

namespace tracecorr {
namespace {

std::string in_root(pid_t pid, const std::string& path) {
  return "\"" + path + "\" in the root of pid " + std::to_string(pid);
}

// The fields of /proc/PID/fdinfo/N we need: "flags:\t0104002" (octal).
std::optional<unsigned long> fdinfo_flags(pid_t pid, int fd) {
  auto text = read_proc_text(pid, "fdinfo/" + std::to_string(fd), 1 << 20);
  if (!text) return std::nullopt;
  auto pos = text->find("flags:");
  if (pos == std::string::npos) return std::nullopt;
  std::string_view rest(*text);
  rest.remove_prefix(pos + 6);
  while (!rest.empty() && (rest.front() == ' ' || rest.front() == '\t')) rest.remove_prefix(1);
  unsigned long flags = 0;
  auto [p, ec] = std::from_chars(rest.data(), rest.data() + rest.size(), flags, 8);
  if (ec != std::errc()) return std::nullopt;
  return flags;
}

}  // namespace

const char* to_string(SendOutcome o) {
  switch (o) {
    case SendOutcome::Sent: return "sent";
    case SendOutcome::WouldBlock: return "would block";
    case SendOutcome::Refused: return "refused";
  }
  return "?";
}

Expected<UniqueFd> open_in_target_root(pid_t pid, const std::string& path, int open_flags) {
  if (path.empty()) return make_error(ErrorKind::kNotFound, "empty path", in_root(pid, path));
  if (path.size() > 4096) return make_error("path longer than PATH_MAX", "path in the root of pid " + std::to_string(pid));
  if (path.find('\0') != std::string::npos) return make_error("path contains a NUL byte", in_root(pid, path));
  std::string root_path = process_dir(pid) + "/root";
  UniqueFd root(::open(root_path.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!root) {
    int err = errno;
    return make_error(err == ENOENT   ? "the process is gone"
                      : err == EACCES ? "permission denied (need root or CAP_SYS_PTRACE)"
                                      : std::string("cannot open: ") + std::strerror(err),
                      root_path);
  }
  open_how how{};
  how.flags = static_cast<std::uint64_t>(open_flags | O_CLOEXEC);
  how.resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS;
  // Relative to the root either way: RESOLVE_IN_ROOT treats "/" as the root.
  long fd = ::syscall(SYS_openat2, root.get(), path.c_str(), &how, sizeof how);
  if (fd < 0) {
    int err = errno;
    if (err == ENOSYS) return make_error("openat2 is not available (Linux >= 5.6 needed)", in_root(pid, path));
    return make_error(ErrorKind::kNotFound, std::string("does not resolve: ") + std::strerror(err), in_root(pid, path));
  }
  return UniqueFd(static_cast<int>(fd));
}

namespace {

// A netlink sock_diag socket in the target's network namespace: unix sockets
// are listed per namespace, so a containerised target's are only found from
// inside its namespace (entered by a short-lived thread; the socket keeps it).
// A namespace that cannot be read is taken to be ours.
Expected<UniqueFd> diag_socket_for(pid_t pid) {
  auto shared = shares_network_namespace(pid);
  return open_sock_diag(shared && !*shared ? pid : 0);
}

struct BoundSocket {
  std::uint64_t socket_inode = 0;  // sockfs inode ("socket:[N]")
  unsigned type = 0;               // SOCK_STREAM, SOCK_DGRAM, SOCK_SEQPACKET
};

// Every unix socket of the diag socket's namespace that is bound to the file
// (dev, ino), as the kernel reports it (UNIX_DIAG_VFS: the kernel's dev_t,
// major << 20 | minor, and a 32-bit inode). One dump, not one request per
// descriptor: an exact request makes the kernel walk every unix socket, so
// per-descriptor requests cost O(descriptors x sockets) (5.4 s at 10,000
// descriptors; the dump takes milliseconds).
Expected<std::vector<BoundSocket>> unix_sockets_bound_to(int diag_fd, std::uint32_t dev, std::uint32_t ino) {
  struct {
    nlmsghdr header;
    unix_diag_req request;
  } message{};
  message.header.nlmsg_len = sizeof message;
  message.header.nlmsg_type = SOCK_DIAG_BY_FAMILY;
  message.header.nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP;
  message.request.sdiag_family = AF_UNIX;
  message.request.udiag_states = ~0u;
  message.request.udiag_show = UDIAG_SHOW_VFS;
  sockaddr_nl kernel{};
  kernel.nl_family = AF_NETLINK;
  if (::sendto(diag_fd, &message, sizeof message, 0, reinterpret_cast<sockaddr*>(&kernel), sizeof kernel) < 0)
    return make_error(std::string("sock_diag request failed: ") + std::strerror(errno));
  std::vector<BoundSocket> out;
  alignas(nlmsghdr) char buffer[32768];
  for (;;) {
    ssize_t n = ::recv(diag_fd, buffer, sizeof buffer, MSG_DONTWAIT);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) {
      pollfd p{diag_fd, POLLIN, 0};
      if (::poll(&p, 1, 1000) <= 0) return make_error("no sock_diag answer within 1 s");
      continue;
    }
    if (n < 0) return make_error(std::string("sock_diag answer failed: ") + std::strerror(errno));
    if (n == 0) return make_error("sock_diag closed the dump early");
    int len = static_cast<int>(n);
    for (auto* h = reinterpret_cast<nlmsghdr*>(buffer); NLMSG_OK(h, len); h = NLMSG_NEXT(h, len)) {
      if (h->nlmsg_type == NLMSG_DONE) return out;
      if (h->nlmsg_type == NLMSG_ERROR) {
        auto* e = static_cast<nlmsgerr*>(NLMSG_DATA(h));
        return make_error(std::string("sock_diag: ") + std::strerror(-e->error) + " (is the unix_diag module available?)");
      }
      if (h->nlmsg_type != SOCK_DIAG_BY_FAMILY || h->nlmsg_len < NLMSG_LENGTH(sizeof(unix_diag_msg))) continue;
      auto* msg = static_cast<unix_diag_msg*>(NLMSG_DATA(h));
      int attr_len = static_cast<int>(h->nlmsg_len - NLMSG_LENGTH(sizeof(unix_diag_msg)));
      for (auto* a = reinterpret_cast<rtattr*>(msg + 1); RTA_OK(a, attr_len); a = RTA_NEXT(a, attr_len)) {
        if (a->rta_type != UNIX_DIAG_VFS || RTA_PAYLOAD(a) < sizeof(unix_diag_vfs)) continue;
        unix_diag_vfs vfs{};
        std::memcpy(&vfs, RTA_DATA(a), sizeof vfs);
        if (vfs.udiag_vfs_dev == dev && vfs.udiag_vfs_ino == ino) out.push_back({msg->udiag_ino, msg->udiag_type});
      }
    }
  }
}

// The target's socket descriptors, in fd order: (fd, sockfs inode).
std::vector<std::pair<int, std::uint64_t>> target_socket_fds(pid_t pid) {
  std::vector<std::pair<int, std::uint64_t>> out;
  const std::string fd_dir = process_dir(pid) + "/fd";
  for (int fdnum : numbered_entries(fd_dir)) {
    char link[128];
    const std::string entry = fd_dir + "/" + std::to_string(fdnum);
    ssize_t n = ::readlink(entry.c_str(), link, sizeof link - 1);
    if (n <= 0) continue;
    std::string_view text(link, static_cast<std::size_t>(n));
    if (text.substr(0, 8) != "socket:[" || text.back() != ']') continue;
    std::uint64_t inode = 0;
    auto [p, ec] = std::from_chars(text.data() + 8, text.data() + text.size() - 1, inode);
    if (ec == std::errc() && p == text.data() + text.size() - 1) out.emplace_back(fdnum, inode);
  }
  return out;
}

// What `fd` (an O_PATH descriptor resolved in the target's root) is, and
// whether the target holds the socket bound to it. The socket is identified by
// the file's device and inode, never by the path string: any spelling of the
// path, a symlinked directory or a relative bind lead to the same file.
Expected<SocketFacts> examine_resolved(pid_t pid, int fd, const std::string& path) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) return make_error(std::string("fstat failed: ") + std::strerror(errno), in_root(pid, path));
  SocketFacts f;
  f.is_socket = S_ISSOCK(st.st_mode);
  f.inode = st.st_ino;
  f.owner = st.st_uid;
  f.group = st.st_gid;
  f.mode = st.st_mode & 07777;
  f.file_type = st.st_mode & S_IFMT;
  {
    std::string status = "/proc/" + std::to_string(pid);
    struct stat ps {};
    if (::stat(status.c_str(), &ps) == 0) f.target_uid = ps.st_uid;  // the euid owns /proc/PID
  }
  if (!f.is_socket) return f;

  const auto held = target_socket_fds(pid);
  if (held.empty()) return f;
  auto diag = diag_socket_for(pid);
  if (!diag) return diag.error();
  const std::uint32_t want_dev = (major(st.st_dev) << 20) | minor(st.st_dev);
  auto bound = unix_sockets_bound_to(diag->get(), want_dev, static_cast<std::uint32_t>(st.st_ino));
  if (!bound) return bound.error();
  for (auto [fdnum, socket_inode] : held) {
    auto it = std::find_if(bound->begin(), bound->end(),
                           [&](const BoundSocket& b) { return b.socket_inode == socket_inode; });
    if (it == bound->end()) continue;
    f.bound_by_target = true;
    f.socket_inode = socket_inode;
    f.socket_type = it->type;
    f.datagram = it->type == SOCK_DGRAM;
    f.target_fd = fdnum;
    if (auto flags = fdinfo_flags(pid, fdnum)) f.target_nonblocking = (*flags & O_NONBLOCK) != 0;
    break;
  }
  return f;
}

Expected<UniqueFd> resolve_socket_path(pid_t pid, const std::string& path) {
  return open_in_target_root(pid, path);
}

}  // namespace

std::string describe_file_type(unsigned file_type) {
  switch (file_type) {
    case S_IFSOCK: return "a socket";
    case S_IFIFO: return "a FIFO";
    case S_IFREG: return "a regular file";
    case S_IFDIR: return "a directory";
    case S_IFCHR: return "a character device";
    case S_IFBLK: return "a block device";
    case S_IFLNK: return "a symbolic link";
  }
  return "a file of unknown type";
}

Expected<SocketFacts> examine_socket(pid_t pid, const std::string& path) {
  auto fd = resolve_socket_path(pid, path);
  if (!fd) return fd.error();
  return examine_resolved(pid, fd->get(), path);
}

Expected<AgentSocket> AgentSocket::connect(pid_t pid, const std::string& path) {
  auto target = resolve_socket_path(pid, path);
  if (!target) return target.error();
  // Send only where the target itself could: the file must be a datagram
  // socket whose socket object the target holds a descriptor for. A path to
  // another service's socket (which the target may not even be allowed to
  // write to, while we run as root) is refused before anything is sent.
  auto facts = examine_resolved(pid, target->get(), path);
  if (!facts) return facts.error();
  if (!facts->is_socket)
    return make_error(ErrorKind::kNotASocket, "not a socket (" + describe_file_type(facts->file_type) + ")",
                      in_root(pid, path));
  if (!facts->bound_by_target)
    return make_error(ErrorKind::kNotHeld,
                      "the process holds no descriptor for the socket bound there; tracecorr sends only to a "
                      "socket the target itself holds",
                      in_root(pid, path));
  if (!facts->datagram)
    return make_error(ErrorKind::kWrongType,
                      "the socket is not a datagram socket (type " + std::to_string(facts->socket_type) + ")",
                      in_root(pid, path));
  UniqueFd sock(::socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!sock) return make_error(std::string("socket(AF_UNIX, SOCK_DGRAM) failed: ") + std::strerror(errno));
  // Connecting through our O_PATH descriptor's /proc/self/fd entry reaches the
  // very file we resolved and checked, not whatever the path names by now; a
  // socket file stays bound to one socket object for its life.
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::string via = "/proc/self/fd/" + std::to_string(target->get());
  std::memcpy(addr.sun_path, via.c_str(), via.size() + 1);
  if (::connect(sock.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    int err = errno;
    auto kind = err == EPROTOTYPE ? ErrorKind::kWrongType : err == ECONNREFUSED ? ErrorKind::kNotHeld
                                                                                : ErrorKind::kUnspecified;
    return make_error(kind, std::string("connect failed: ") + std::strerror(err) +
                                (err == EPROTOTYPE ? " (the socket is not a datagram socket)" : ""),
                      in_root(pid, path));
  }
  return AgentSocket(std::move(sock));
}

SendOutcome AgentSocket::send(std::span<const std::uint8_t> datagram) {
  for (;;) {
    ssize_t n = ::send(fd_.get(), datagram.data(), datagram.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n >= 0) {
      last_errno_ = 0;
      return SendOutcome::Sent;
    }
    last_errno_ = errno;
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return SendOutcome::WouldBlock;
    return SendOutcome::Refused;
  }
}

}  // namespace tracecorr

#include "tracecorr/socket.hpp"

#include <linux/openat2.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>
#include <optional>
#include <string_view>

#include "tracecorr/maps.hpp"
#include "tracecorr/procfs.hpp"

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
  if (path.empty()) return make_error("empty path", in_root(pid, path), "SOCK-02");
  if (path.size() > 4096) return make_error("path longer than PATH_MAX", "path in the root of pid " + std::to_string(pid));
  if (path.find('\0') != std::string::npos) return make_error("path contains a NUL byte", in_root(pid, path));
  std::string root_path = "/proc/" + std::to_string(pid) + "/root";
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
    return make_error(std::string("does not resolve: ") + std::strerror(err), in_root(pid, path));
  }
  return UniqueFd(static_cast<int>(fd));
}

Expected<SocketFacts> examine_socket(pid_t pid, const std::string& path) {
  auto fd = open_in_target_root(pid, path);
  if (!fd) {
    Error e = fd.error();
    if (e.requirement.empty() && e.what.rfind("does not resolve", 0) == 0) e.requirement = "SOCK-02";
    return e;
  }
  struct stat st {};
  if (::fstat(fd->get(), &st) != 0) return make_error(std::string("fstat failed: ") + std::strerror(errno), in_root(pid, path));
  SocketFacts f;
  f.is_socket = S_ISSOCK(st.st_mode);
  f.inode = st.st_ino;
  f.owner = st.st_uid;
  f.group = st.st_gid;
  f.mode = st.st_mode & 07777;
  {
    std::string status = "/proc/" + std::to_string(pid);
    struct stat ps {};
    if (::stat(status.c_str(), &ps) == 0) f.target_uid = ps.st_uid;  // the euid owns /proc/PID
  }
  if (!f.is_socket) return f;

  // /proc/PID/net/unix: "Num RefCount Protocol Flags Type St Inode Path".
  // Its Inode column is the socket object's inode, not the file's, so the
  // entry is found by the bound path (as the target named it).
  if (auto unix_text = read_proc_text(pid, "net/unix", 64u << 20)) {
    std::string_view text(*unix_text);
    std::size_t line_no = 0;
    while (!text.empty()) {
      std::size_t nl = text.find('\n');
      std::string_view line = text.substr(0, nl);
      text.remove_prefix(nl == std::string_view::npos ? text.size() : nl + 1);
      if (line_no++ == 0) continue;  // header
      std::string_view cols[8];
      std::size_t n = 0;
      std::string_view rest = line;
      while (n < 7) {
        auto b = rest.find_first_not_of(' ');
        if (b == std::string_view::npos) break;
        rest.remove_prefix(b);
        auto e = rest.find(' ');
        cols[n++] = rest.substr(0, e);
        rest.remove_prefix(e == std::string_view::npos ? rest.size() : e);
      }
      if (n < 7) continue;
      auto b = rest.find_first_not_of(' ');
      cols[7] = b == std::string_view::npos ? std::string_view{} : rest.substr(b);
      std::uint64_t inode = 0;
      std::from_chars(cols[6].data(), cols[6].data() + cols[6].size(), inode);
      unsigned type = 0;
      std::from_chars(cols[4].data(), cols[4].data() + cols[4].size(), type, 16);
      if (cols[7] == path) {
        f.listed_in_net_unix = true;
        f.socket_type = type;
        f.datagram = type == SOCK_DGRAM;  // printed as 0002
        f.socket_inode = inode;  // what the target's fd links to
        break;
      }
    }
  }

  // /proc/PID/fd: does the target hold it, and non-blocking?
  if (!f.socket_inode) return f;
  const std::string fd_dir = "/proc/" + std::to_string(pid) + "/fd";
  const std::string want = "socket:[" + std::to_string(f.socket_inode) + "]";
  for (int fdnum : numbered_entries(fd_dir)) {
    char link[128];
    const std::string entry = fd_dir + "/" + std::to_string(fdnum);
    ssize_t n = ::readlink(entry.c_str(), link, sizeof link - 1);
    if (n <= 0) continue;
    link[n] = '\0';
    if (want != link) continue;
    f.bound_by_target = true;
    f.target_fd = fdnum;
    if (auto flags = fdinfo_flags(pid, fdnum)) f.target_nonblocking = (*flags & O_NONBLOCK) != 0;
    break;
  }
  return f;
}

Expected<AgentSocket> AgentSocket::connect(pid_t pid, const std::string& path) {
  auto target = open_in_target_root(pid, path);
  if (!target) {
    Error e = target.error();
    if (e.requirement.empty() && e.what.rfind("does not resolve", 0) == 0) e.requirement = "SOCK-02";
    return e;
  }
  struct stat st {};
  if (::fstat(target->get(), &st) != 0) return make_error(std::string("fstat failed: ") + std::strerror(errno), in_root(pid, path));
  if (!S_ISSOCK(st.st_mode)) return make_error("not a socket", in_root(pid, path), "SOCK-01");
  UniqueFd sock(::socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!sock) return make_error(std::string("socket(AF_UNIX, SOCK_DGRAM) failed: ") + std::strerror(errno));
  // Connecting through our O_PATH descriptor's /proc/self/fd entry reaches the
  // very file we resolved and checked, not whatever the path names by now.
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::string via = "/proc/self/fd/" + std::to_string(target->get());
  std::memcpy(addr.sun_path, via.c_str(), via.size() + 1);
  if (::connect(sock.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    int err = errno;
    std::string req = err == EPROTOTYPE ? "SOCK-01" : err == ECONNREFUSED ? "SOCK-02" : "";
    return make_error(std::string("connect failed: ") + std::strerror(err) +
                          (err == EPROTOTYPE ? " (the socket is not a datagram socket)" : ""),
                      in_root(pid, path), req);
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

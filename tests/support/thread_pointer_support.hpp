// Thread pointers in tests: the calling thread's own, to compare with what the
// readers find from outside (fs_base on x86-64, TPIDR_EL0 on arm64), and what
// a test needs to read an arm64 guest's through qemu-aarch64's gdbstub.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>
#if defined(__x86_64__)
#include <asm/prctl.h>
#endif

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "tracecorr/fd.hpp"

namespace tracecorr::test_support {

inline std::uint64_t own_thread_pointer() {
#if defined(__x86_64__)
  unsigned long fs = 0;
  ::syscall(SYS_arch_prctl, ARCH_GET_FS, &fs);
  return fs;
#else
  return reinterpret_cast<std::uint64_t>(__builtin_thread_pointer());
#endif
}

// A loopback TCP port that was free a moment ago (bound, read, closed): for
// `qemu-aarch64 -g PORT`.
inline int unused_loopback_port() {
  UniqueFd s(::socket(AF_INET, SOCK_STREAM, 0));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(s.get(), reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  ::getsockname(s.get(), reinterpret_cast<sockaddr*>(&a), &len);
  return ntohs(a.sin_port);
}

// Whether something listens on `port` (from /proc/net, without connecting:
// qemu's stub serves one connection only).
inline bool listening_on(int port) {
  char want[16];
  std::snprintf(want, sizeof want, ":%04X", port);
  for (const char* table : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    std::ifstream in(table);
    std::string line;
    std::getline(in, line);
    while (std::getline(in, line)) {
      std::istringstream cols(line);
      std::string sl, local, remote, state;
      cols >> sl >> local >> remote >> state;
      if (state == "0A" && local.size() > 5 && local.ends_with(want)) return true;
    }
  }
  return false;
}

}  // namespace tracecorr::test_support

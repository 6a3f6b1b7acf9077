// A child process forked for a test, and the two pipes tests use to talk to
// it: the child reports on `report` (its tid, a thread pointer, "ready"),
// the test lets it go on through `release`. The child runs `body` and exits
// when it returns; the test's process is never resumed in the child.
// Destruction kills (SIGKILL) and reaps it unless the test already did.
#pragma once

#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tracecorr::test {

class ForkedChild {
 public:
  struct Pipes {
    int report;   // the child writes here
    int release;  // the child reads here
  };

  explicit ForkedChild(const std::function<void(Pipes)>& body) {
    int report[2], release[2];
    if (::pipe(report) != 0) return;
    if (::pipe(release) != 0) {
      ::close(report[0]), ::close(report[1]);
      return;
    }
    const pid_t parent = ::getpid();
    pid_ = ::fork();
    if (pid_ == 0) {
      // A test binary killed mid-test (a ctest timeout) must not leave its
      // child spinning: it dies with the parent (exec keeps the setting).
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) ::_exit(1);  // the parent died before prctl
      ::close(report[0]);
      ::close(release[1]);
      body(Pipes{report[1], release[0]});
      ::_exit(0);
    }
    ::close(report[1]);
    ::close(release[0]);
    report_ = report[0];
    release_ = release[1];
  }
  ~ForkedChild() {
    if (pid_ > 0 && !reaped_) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    if (report_ >= 0) ::close(report_);
    if (release_ >= 0) ::close(release_);
  }
  ForkedChild(const ForkedChild&) = delete;
  ForkedChild& operator=(const ForkedChild&) = delete;

  // In the child's body: becomes the program `argv` names (argv[0] a path),
  // or exits 127 when it cannot.
  [[noreturn]] static void exec(std::vector<std::string> argv) {
    std::vector<char*> args;
    for (auto& a : argv) args.push_back(a.data());
    args.push_back(nullptr);
    ::execv(args[0], args.data());
    ::_exit(127);
  }

  pid_t pid() const { return pid_; }
  bool started() const { return pid_ > 0; }
  // The read end of `report`, for a test that reads lines (fdopen a dup of it).
  int report_fd() const { return report_; }

  // Reads exactly `size` bytes the child reported; false on end of file or
  // when `bound` passes first (a broken child fails the test, never hangs it).
  bool read(void* out, std::size_t size, std::chrono::milliseconds bound = std::chrono::seconds(10)) {
    auto* p = static_cast<char*>(out);
    const auto give_up = std::chrono::steady_clock::now() + bound;
    while (size > 0) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(give_up - std::chrono::steady_clock::now());
      if (left.count() <= 0) return false;
      pollfd fd{report_, POLLIN, 0};
      if (::poll(&fd, 1, static_cast<int>(left.count())) <= 0) continue;
      ssize_t n = ::read(report_, p, size);
      if (n <= 0) return false;
      p += n;
      size -= static_cast<std::size_t>(n);
    }
    return true;
  }

  // Lets the child past its read of `release`.
  void release() {
    const char go = 1;
    (void)!::write(release_, &go, 1);
  }

  // For a child that reads commands on `release` (e.g. an exec'd program
  // with it as stdin): writes `text` whole; false when the child is gone.
  bool send(std::string_view text) {
    while (!text.empty()) {
      ssize_t n = ::write(release_, text.data(), text.size());
      if (n <= 0) return false;
      text.remove_prefix(static_cast<std::size_t>(n));
    }
    return true;
  }

  // The next line the child reported, without its newline; nullopt on end of
  // file, or when `bound` passes first.
  std::optional<std::string> read_line(std::chrono::milliseconds bound = std::chrono::seconds(10)) {
    std::string line;
    const auto give_up = std::chrono::steady_clock::now() + bound;
    for (;;) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(give_up - std::chrono::steady_clock::now());
      if (left.count() <= 0) return std::nullopt;
      char c;
      if (!read(&c, 1, left)) return std::nullopt;
      if (c == '\n') return line;
      line += c;
    }
  }

  // Waits for the child's exit; its wait status.
  int wait() {
    int status = 0;
    ::waitpid(pid_, &status, 0);
    reaped_ = true;
    return status;
  }

 private:
  pid_t pid_ = -1;
  int report_ = -1, release_ = -1;
  bool reaped_ = false;
};

}  // namespace tracecorr::test

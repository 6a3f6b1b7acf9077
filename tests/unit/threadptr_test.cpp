// Thread pointers: ptrace of a child process, and the gdb remote protocol
// client against an in-process stub that speaks like qemu 7.2's.
#include <gtest/gtest.h>

#include "eventually.hpp"
#include "forked_child.hpp"
#include "thread_pointer_support.hpp"

#include <arpa/inet.h>
#include <asm/prctl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <sys/ptrace.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <fstream>
#include <sstream>
#include <map>
#include <memory>
#include <stop_token>
#include <thread>

#include "tracecorr/fd.hpp"
#include "tracecorr/procfs.hpp"
#include "tracecorr/threadptr.hpp"

namespace tracecorr {
namespace {

using test_support::eventually;
using test_support::own_thread_pointer;
using test_support::listening_on;
using test_support::unused_loopback_port;

// '?' for a thread that is gone (its stat read may fail with ESRCH, never throw).
char thread_state(pid_t pid, pid_t tid) {
  const char state = task_state(pid, tid);
  return state ? state : '?';
}

// A child with two threads that report (tid, thread pointer) and then wait.
void report(int fd) {
  std::uint64_t msg[2] = {static_cast<std::uint64_t>(::gettid()), own_thread_pointer()};
  (void)!::write(fd, msg, sizeof msg);
}

void two_reporting_threads(test::ForkedChild::Pipes pipes) {
  static int fd = pipes.report;
  report(fd);
  pthread_t t;
  pthread_create(&t, nullptr, [](void*) -> void* {
    report(fd);
    for (;;) ::pause();
  }, nullptr);
  for (;;) ::pause();
}

std::map<pid_t, std::uint64_t> read_reports(test::ForkedChild& child) {
  std::map<pid_t, std::uint64_t> reported;
  for (int i = 0; i < 2; ++i) {
    std::uint64_t msg[2];
    if (!child.read(msg, sizeof msg)) break;
    reported[static_cast<pid_t>(msg[0])] = msg[1];
  }
  return reported;
}

TEST(PtraceSource, ReadsEveryThreadsPointerAndLeavesThemRunning) {
  test::ForkedChild child(two_reporting_threads);
  auto reported = read_reports(child);
  ASSERT_EQ(reported.size(), 2u);
  auto source = make_ptrace_source(child.pid());
  EXPECT_EQ(source->describe(), "ptrace");
  auto tids = source->threads();
  ASSERT_TRUE(tids.ok()) << tids.error().message();
  ASSERT_EQ(tids->size(), 2u);
  for (pid_t tid : *tids) {
    ASSERT_TRUE(reported.count(tid)) << tid;
    auto tp = source->thread_pointer(tid);
    ASSERT_TRUE(tp.ok()) << tp.error().message();
    EXPECT_EQ(*tp, reported[tid]);
    EXPECT_NE(*tp, 0u);
    // Detached and resumed: not in a ptrace-stop or group-stop.
    char state = thread_state(child.pid(), tid);
    EXPECT_TRUE(state != 't' && state != 'T' && state != '?') << tid << " is in state " << state;
  }
  // A second read works: no attachment was left behind.
  auto again = source->thread_pointer(child.pid());
  ASSERT_TRUE(again.ok()) << again.error().message();
}

TEST(PtraceSource, ReadStoppedRunsTheReadWhileTheThreadIsStopped) {
  test::ForkedChild child(two_reporting_threads);
  auto reported = read_reports(child);
  ASSERT_EQ(reported.size(), 2u);
  auto source = make_ptrace_source(child.pid());
  for (const auto& [tid, pointer] : reported) {
    char state_during = '?';
    std::uint64_t tp_seen = 0;
    auto st = source->read_stopped(tid, [&, tid = tid](std::uint64_t tp) {
      tp_seen = tp;
      state_during = thread_state(child.pid(), tid);
    });
    ASSERT_TRUE(st.ok()) << st.error().message();
    EXPECT_EQ(tp_seen, pointer);
    EXPECT_EQ(state_during, 't') << tid << ": in a ptrace stop while read";
    char after = thread_state(child.pid(), tid);
    EXPECT_TRUE(after != 't' && after != 'T') << tid << " is still stopped (" << after << ")";
  }
}

TEST(PtraceSource, ThreadThatIsGoneIsAnError) {
  test::ForkedChild child([](test::ForkedChild::Pipes) {});
  ASSERT_TRUE(child.started());
  child.wait();
  auto source = make_ptrace_source(child.pid());
  auto tp = source->thread_pointer(child.pid());
  ASSERT_FALSE(tp.ok());
  EXPECT_NE(tp.error().message().find("gone"), std::string::npos) << tp.error().message();
  EXPECT_FALSE(source->threads().ok());
  bool called = false;
  EXPECT_FALSE(source->read_stopped(child.pid(), [&](std::uint64_t) { called = true; }).ok());
  EXPECT_FALSE(called);
}

// Two threads report and wait; the main thread reports, then execs a sleep
// once released (its exec kills the other two).
void execs_once_released(test::ForkedChild::Pipes pipes) {
  static int fd = pipes.report;
  report(fd);
  for (int i = 0; i < 2; ++i) {
    pthread_t t;
    pthread_create(&t, nullptr, [](void*) -> void* {
      report(fd);
      for (;;) ::pause();
    }, nullptr);
  }
  char go;
  (void)!::read(pipes.release, &go, 1);
  test::ForkedChild::exec({"/bin/sleep", "60"});
}

// Holds a thread of `child` (execs_once_released) stopped, lets the child exec,
// and waits until the exec has killed the held thread and waits for us to reap it.
void hold_a_thread_through_its_exec(test::ForkedChild& child) {
  std::vector<pid_t> tids;
  for (int i = 0; i < 3; ++i) {
    std::uint64_t msg[2];
    ASSERT_TRUE(child.read(msg, sizeof msg));
    tids.push_back(static_cast<pid_t>(msg[0]));
  }
  const pid_t pid = child.pid();
  const pid_t held = tids[1] == pid ? tids[2] : tids[1];
  ASSERT_EQ(::ptrace(PTRACE_SEIZE, held, nullptr, nullptr), 0) << std::strerror(errno);
  ASSERT_EQ(::ptrace(PTRACE_INTERRUPT, held, nullptr, nullptr), 0) << std::strerror(errno);
  ASSERT_EQ(wait_for_ptrace_stop(held, std::chrono::seconds(10)).kind, PtraceStop::Kind::kStopped);
  child.release();
  ASSERT_TRUE(eventually([&] { return task_state(pid, held) == 'Z'; }, std::chrono::seconds(10)))
      << "state " << thread_state(pid, held);
}

// Seizes the child's main thread from a thread of its own; whether that
// returned within 20 s, and then whether the exec completed.
void expect_the_seize_and_the_exec_to_end(pid_t pid) {
  auto done = std::make_shared<std::atomic<bool>>(false);
  std::thread([pid, done] {
    (void)seize_thread(pid, pid);
    *done = true;
  }).detach();  // should it never return, the test fails below and the process's exit ends it
  ASSERT_TRUE(eventually([&] { return done->load(); }, std::chrono::seconds(20)))
      << "PTRACE_SEIZE still blocked 20 s after the exec began: the exec is deadlocked with us";
  EXPECT_TRUE(eventually([&] { return executable_of(pid) == "/usr/bin/sleep"; }, std::chrono::seconds(10)))
      << "the exec did not complete: " << executable_of(pid);
}

// The deadlock seize_thread exists for, made to happen: we hold one thread
// stopped, the process execs (its de_thread waits for us to reap that thread,
// holding the mutex PTRACE_SEIZE waits for), and we seize another. A plain
// PTRACE_SEIZE waits for ever; seize_thread's watcher reaps the held thread,
// the exec completes, and the seize returns.
TEST(SeizeThread, ReturnsWhileTheProcessExecsAndWeHoldAnotherOfItsThreads) {
  test::ForkedChild child(execs_once_released);
  ASSERT_TRUE(child.started());
  ASSERT_NO_FATAL_FAILURE(hold_a_thread_through_its_exec(child));
  expect_the_seize_and_the_exec_to_end(child.pid());
}

// The same, while another thread of ours (a session of its own) keeps seizing
// and releasing a thread of another process every few milliseconds: each of
// those seizes is watched too, and none hides the blocked one.
TEST(SeizeThread, ReturnsWhileAnotherThreadKeepsSeizingItsOwnTarget) {
  test::ForkedChild other(two_reporting_threads);
  ASSERT_TRUE(other.started());
  const auto reports = read_reports(other);
  ASSERT_FALSE(reports.empty());
  const pid_t other_tid = reports.begin()->first;
  std::jthread session([&](std::stop_token stop) {  // stopped and joined however the test ends
    while (!stop.stop_requested()) {
      if (seize_thread(other.pid(), other_tid) == 0 && ::ptrace(PTRACE_INTERRUPT, other_tid, nullptr, nullptr) == 0 &&
          wait_for_ptrace_stop(other_tid).kind == PtraceStop::Kind::kStopped)
        ::ptrace(PTRACE_DETACH, other_tid, nullptr, nullptr);
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  });
  test::ForkedChild child(execs_once_released);
  ASSERT_TRUE(child.started());
  ASSERT_NO_FATAL_FAILURE(hold_a_thread_through_its_exec(child));
  expect_the_seize_and_the_exec_to_end(child.pid());
}

TEST(HostPort, Parses) {
  auto a = parse_host_port("127.0.0.1:1234");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->first, "127.0.0.1");
  EXPECT_EQ(a->second, 1234);
  auto b = parse_host_port("[::1]:99");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->first, "::1");
  EXPECT_FALSE(parse_host_port("localhost").ok());
  EXPECT_FALSE(parse_host_port("h:0").ok());
  EXPECT_FALSE(parse_host_port("h:70000").ok());
  EXPECT_FALSE(parse_host_port("h:12x").ok());
}

// ---- a fake qemu gdbstub -------------------------------------------------------
class FakeStub {
 public:
  // Thread id -> TPIDR_EL0.
  std::map<unsigned, std::uint64_t> tpidr = {{0x2823, 0x5502874420ull}, {0x2863, 0x55032438e0ull}};
  bool corrupt_first_reply = true;
  std::vector<std::string> received;
  int interrupts = 0;

  FakeStub() {
    listener_.reset(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(listener_.get(), reinterpret_cast<sockaddr*>(&a), sizeof a);
    ::listen(listener_.get(), 1);
    socklen_t len = sizeof a;
    ::getsockname(listener_.get(), reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this] { serve(); });
  }
  ~FakeStub() {
    if (thread_.joinable()) thread_.join();
  }
  int port() const { return port_; }

 private:
  static std::string frame(const std::string& body, bool corrupt = false) {
    unsigned sum = 0;
    for (unsigned char c : body) sum += c;
    char cs[3];
    std::snprintf(cs, sizeof cs, "%02x", (sum + (corrupt ? 1 : 0)) & 0xff);
    return "$" + body + "#" + cs;
  }
  void put(int fd, const std::string& s) { (void)!::write(fd, s.data(), s.size()); }

  void reply(int fd, const std::string& body) {
    if (corrupt_first_reply) {
      corrupt_first_reply = false;
      put(fd, frame(body, true));
      char c;
      if (::read(fd, &c, 1) != 1 || c != '-') return;  // the client must nack
    }
    put(fd, frame(body));
    char c;
    (void)!::read(fd, &c, 1);  // the client's ack
  }

  std::string xfer(const std::string& doc, const std::string& args) {
    unsigned long off = 0, len = 0;
    std::sscanf(args.c_str(), "%lx,%lx", &off, &len);
    len = std::min(len, 40ul);  // small chunks: the client must loop
    if (off >= doc.size()) return "l";
    std::string part = doc.substr(off, len);
    return (off + part.size() >= doc.size() ? "l" : "m") + part;
  }

  std::string answer(const std::string& p) {
    static const std::string target =
        "<?xml version=\"1.0\"?><!DOCTYPE target SYSTEM \"gdb-target.dtd\"><target><architecture>aarch64</architecture>"
        "<xi:include href=\"core.xml\"/><xi:include href=\"sys.xml\"/></target>";
    static const std::string core =
        "<feature name=\"org.gnu.gdb.aarch64.core\"><!-- <reg name=\"TPIDR_EL0\"/> in a comment -->"
        "<reg name=\"x0\" bitsize=\"64\"/><reg name=\"x1\" bitsize=\"64\"/><reg name=\"pc\" bitsize=\"64\"/></feature>";
    static const std::string sys =
        "<feature name=\"org.qemu.gdb.arm.sys.regs\"><reg name=\"ID_MMFR5\" bitsize=\"64\" regnum=\"86\"/>"
        "<reg name=\"TPIDR_EL1\" bitsize=\"64\"/><reg name='TPIDR_EL0' bitsize=\"64\" regnum=\"240\"/></feature>";
    if (p.rfind("qSupported", 0) == 0) return "PacketSize=1000;qXfer:features:read+;multiprocess+";
    if (p == "?") return "T05thread:2823;";
    if (p.rfind("qXfer:features:read:", 0) == 0) {
      std::string rest = p.substr(20);
      auto colon = rest.find(':');
      std::string annex = rest.substr(0, colon), args = rest.substr(colon + 1);
      if (annex == "target.xml") return xfer(target, args);
      if (annex == "core.xml") return xfer(core, args);
      if (annex == "sys.xml") return xfer(sys, args);
      return "E00";
    }
    if (p == "qfThreadInfo") return "m2823";
    if (p == "qsThreadInfo") return sent_second_ ? "l" : (sent_second_ = true, "m2863");
    if (p.rfind("Hg", 0) == 0) {
      selected_ = static_cast<unsigned>(std::stoul(p.substr(2), nullptr, 16));
      return tpidr.count(selected_) ? "OK" : "E22";
    }
    if (p == "pf0") {  // 240
      std::uint64_t v = tpidr[selected_];
      std::string hex;
      for (int i = 0; i < 8; ++i) {
        char b[3];
        std::snprintf(b, sizeof b, "%02x", static_cast<unsigned>((v >> (8 * i)) & 0xff));
        hex += b;
      }
      return hex;
    }
    if (p.rfind("p", 0) == 0) return "E14";
    if (p == "D") return "OK";
    return "";
  }

  void serve() {
    UniqueFd conn(::accept(listener_.get(), nullptr, nullptr));
    if (!conn) return;
    int one = 1;
    ::setsockopt(conn.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    for (;;) {
      char c;
      if (::read(conn.get(), &c, 1) != 1) return;
      if (c == '\x03') {  // interrupt while running
        ++interrupts;
        reply(conn.get(), "T02thread:2823;");
        continue;
      }
      if (c != '$') continue;
      std::string body;
      while (::read(conn.get(), &c, 1) == 1 && c != '#') body += c;
      char cs[2];
      if (::read(conn.get(), cs, 2) != 2) return;
      put(conn.get(), "+");
      received.push_back(body);
      if (body == "c" || body.rfind("C", 0) == 0) continue;  // running: no reply until a stop
      reply(conn.get(), answer(body));
      if (body == "D") return;
    }
  }

  UniqueFd listener_;
  int port_ = 0;
  std::thread thread_;
  unsigned selected_ = 0;
  bool sent_second_ = false;
};

TEST(GdbstubSource, ReadsTpidrEl0OfEveryThreadFromTheStub) {
  FakeStub stub;
  {
    auto source = make_gdbstub_source("127.0.0.1", stub.port());
    ASSERT_TRUE(source.ok()) << source.error().message();
    auto& s = **source;
    auto tids = s.threads();
    ASSERT_TRUE(tids.ok()) << tids.error().message();
    ASSERT_EQ(*tids, (std::vector<pid_t>{0x2823, 0x2863}));
    for (pid_t tid : *tids) {
      auto tp = s.thread_pointer(tid);
      ASSERT_TRUE(tp.ok()) << tp.error().message();
      EXPECT_EQ(*tp, stub.tpidr[static_cast<unsigned>(tid)]);
    }
    EXPECT_FALSE(s.thread_pointer(0x9999).ok());
    // Let the guest run; the next read interrupts it (^C without a qemu pid).
    ASSERT_TRUE(s.resume().ok());
    auto tp = s.thread_pointer(0x2863);
    ASSERT_TRUE(tp.ok()) << tp.error().message();
    EXPECT_EQ(*tp, 0x55032438e0ull);
    EXPECT_EQ(stub.interrupts, 1);
  }  // destroyed while the guest is stopped: it detaches, which lets the guest run
  EXPECT_EQ(stub.interrupts, 1);
  ASSERT_FALSE(stub.received.empty());
  EXPECT_EQ(stub.received.back(), "D");
  // The register came from regnum 240, found through the include and the
  // explicit regnum, not the commented-out decoy.
  EXPECT_NE(std::find(stub.received.begin(), stub.received.end(), "pf0"), stub.received.end());
}

TEST(GdbstubSource, NothingListeningIsAClearError) {
  const int port = unused_loopback_port();
  auto source = make_gdbstub_source("127.0.0.1", port);
  ASSERT_FALSE(source.ok());
  EXPECT_NE(source.error().message().find("connect"), std::string::npos) << source.error().message();
}

#ifdef TC_PRINT_TPIDR_ARM64
// A real qemu-aarch64 -g: the guest prints its own TPIDR_EL0 per thread
// (mrs x0, tpidr_el0) and the gdbstub source must read the same values.
TEST(GdbstubSource, ReadsWhatAQemuGuestPrintsAsItsOwnTpidrEl0) {
  if (::access("/usr/bin/qemu-aarch64", X_OK) != 0) GTEST_SKIP() << "qemu-aarch64 not installed";
  const int port = unused_loopback_port();
  // Killed and reaped however the test ends.
  test::ForkedChild guest([port](test::ForkedChild::Pipes pipes) {
    ::dup2(pipes.report, 1);
    std::string p = std::to_string(port);
    ::execl("/usr/bin/qemu-aarch64", "qemu-aarch64", "-g", p.c_str(), TC_PRINT_TPIDR_ARM64, nullptr);
    ::_exit(127);
  });
  const pid_t qemu = guest.pid();
  ASSERT_GT(qemu, 0);
  // Wait for the stub to listen without connecting (it serves one connection).
  for (int i = 0; i < 3000 && !listening_on(port); ++i) {
    ASSERT_EQ(::waitpid(qemu, nullptr, WNOHANG), 0) << "qemu exited";
    ::usleep(10000);
  }
  ASSERT_TRUE(listening_on(port));

  auto source = make_gdbstub_source("127.0.0.1", port, qemu);
  ASSERT_TRUE(source.ok()) << source.error().message();
  ASSERT_TRUE((*source)->resume().ok());  // qemu -g holds the guest until now
  std::map<pid_t, std::uint64_t> printed;
  {
    FILE* f = ::fdopen(::dup(guest.report_fd()), "r");
    char line[128];
    while (std::fgets(line, sizeof line, f) && std::string(line) != "ready\n") {
      long tid = 0;
      unsigned long tp = 0;
      ASSERT_EQ(std::sscanf(line, "%ld %lx", &tid, &tp), 2) << line;
      printed[static_cast<pid_t>(tid)] = tp;
    }
    ::fclose(f);
  }
  ASSERT_EQ(printed.size(), 2u);
  auto tids = (*source)->threads();
  ASSERT_TRUE(tids.ok()) << tids.error().message();
  ASSERT_EQ(tids->size(), 2u);
  for (pid_t tid : *tids) {
    ASSERT_TRUE(printed.count(tid)) << tid;
    auto tp = (*source)->thread_pointer(tid);
    ASSERT_TRUE(tp.ok()) << tp.error().message();
    EXPECT_EQ(*tp, printed[tid]) << "thread " << tid;
  }
  ASSERT_TRUE((*source)->resume().ok());
  // Read again while it runs: the source stops it (SIGVTALRM, swallowed).
  auto again = (*source)->thread_pointer(qemu);
  ASSERT_TRUE(again.ok()) << again.error().message();
  EXPECT_EQ(*again, printed[qemu]);
  source->reset();  // detach
  EXPECT_EQ(::waitpid(qemu, nullptr, WNOHANG), 0) << "the guest died of the inspection";
}
#endif

}  // namespace
}  // namespace tracecorr

// Issue 16, target side: what a hostile or odd process can put in tracecorr's
// way, at the library level (the whole-command cases are tests/py/test_hostile.py).
#include <gtest/gtest.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "forked_child.hpp"
#include "tracecorr/discovery.hpp"
#include "tracecorr/memory.hpp"
#include "tracecorr/procfs.hpp"
#include "tracecorr/threadptr.hpp"

using namespace tracecorr;

namespace {

std::string temp_dir() {
  char tmpl[] = "/tmp/tc-hostile-XXXXXX";
  const char* d = ::mkdtemp(tmpl);
  EXPECT_NE(d, nullptr);
  return d ? d : "/tmp";
}

}  // namespace

// A page mapped without read permission is "unreadable (PROT_NONE)", not "nothing mapped".
TEST(HostileMemory, ProtNoneIsNotCalledUnmapped) {
  void* p = ::mmap(nullptr, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(p, MAP_FAILED);
  LiveProcessMemory mem(::getpid());
  std::uint8_t out[8];
  auto st = mem.read(reinterpret_cast<std::uintptr_t>(p), out);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.error().message().find("unreadable memory (PROT_NONE)"), std::string::npos) << st.error().message();
  EXPECT_EQ(st.error().message().find("nothing mapped"), std::string::npos) << st.error().message();
  ::munmap(p, 4096);
}

// When map_files cannot be opened, discovery falls back to the path in the
// maps. A FIFO the target put there must not block the open, and a file that
// is not the mapped one (other inode) must be refused.
TEST(HostileDiscovery, MappedFileFallbackRefusesFifoWithoutBlocking) {
  std::string dir = temp_dir();
  std::string fifo = dir + "/libagent-x64.so";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  Mapping m;
  m.start = 0x1000;  // no such mapping: map_files has no entry for it
  m.end = 0x2000;
  m.device = "00:00";
  m.inode = 12345;
  m.path = fifo;
  auto started = std::chrono::steady_clock::now();
  auto fd = open_mapped_file(::getpid(), m);  // blocked forever before the fix
  ASSERT_FALSE(fd.ok());
  EXPECT_NE(fd.error().message().find("not a regular file"), std::string::npos) << fd.error().message();
  EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(10));

  std::string other = dir + "/other.so";
  std::ofstream(other) << "x";
  m.path = other;
  auto wrong = open_mapped_file(::getpid(), m);
  ASSERT_FALSE(wrong.ok());
  EXPECT_NE(wrong.error().message().find("not the mapped file"), std::string::npos) << wrong.error().message();
  std::filesystem::remove_all(dir);
}

// A child whose thread sits in vfork (its child never execs) does not stop for
// PTRACE_INTERRUPT: the read gives up after the bound and names the reason,
// and the attachment is released once the thread can stop again.
TEST(HostilePtrace, ThreadParkedInVforkIsReportedNotWaitedFor) {
  test::ForkedChild parked([](test::ForkedChild::Pipes pipes) {
    // The vfork child waits for a byte, then exits; until then the parent is parked.
    char c = 1;
    (void)!::write(pipes.report, &c, 1);
    pid_t v = ::vfork();
    if (v == 0) {
      (void)!::read(pipes.release, &c, 1);
      ::_exit(0);
    }
    for (;;) ::pause();
  });
  const pid_t child = parked.pid();
  char c;
  ASSERT_TRUE(parked.read(&c, 1));
  // Wait until the child's main thread is in vfork (state D).
  for (int i = 0; i < 400 && task_state(child, child) != 'D'; ++i) ::usleep(5000);
  ASSERT_EQ(task_state(child, child), 'D');

  auto source = make_ptrace_source(child);
  auto started = std::chrono::steady_clock::now();
  auto tp = source->thread_pointer(child);  // hung in waitpid before the fix
  ASSERT_FALSE(tp.ok());
  EXPECT_NE(tp.error().message().find("did not stop"), std::string::npos) << tp.error().message();
  EXPECT_TRUE(is_parked(child));
  EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(10));
  // A second read does not wait again.
  EXPECT_FALSE(source->thread_pointer(child).ok());

  // Let the vfork child exit: the parent stops for our pending interrupt and
  // must be detached (not left stopped) by the next reap.
  parked.release();
  for (int i = 0; i < 400 && is_parked(child); ++i) {
    ::usleep(5000);
    reap_parked_attachments();
  }
  EXPECT_FALSE(is_parked(child));
  auto again = source->thread_pointer(child);
  EXPECT_TRUE(again.ok()) << again.error().message();
}

// The main thread called pthread_exit; the workers run on. The process's
// shared state is read through a live thread.
TEST(HostileProc, ZombieLeaderIsReadThroughALiveThread) {
  test::ForkedChild leaderless([](test::ForkedChild::Pipes pipes) {
    pthread_t t;
    ::pthread_create(&t, nullptr, [](void* fd) -> void* {
      char c = 1;
      (void)!::write(static_cast<int>(reinterpret_cast<std::intptr_t>(fd)), &c, 1);
      for (;;) ::pause();
    }, reinterpret_cast<void*>(static_cast<std::intptr_t>(pipes.report)));
    // pthread_exit would unwind through GoogleTest's catch(...): end only this
    // thread with the raw syscall instead.
    ::syscall(SYS_exit, 0);
  });
  const pid_t child = leaderless.pid();
  char c;
  ASSERT_TRUE(leaderless.read(&c, 1));
  for (int i = 0; i < 400 && task_state(child, child) != 'Z'; ++i) ::usleep(5000);
  ASSERT_EQ(task_state(child, child), 'Z');
  EXPECT_NE(live_task(child), child);
  auto maps = read_maps(child);
  ASSERT_TRUE(maps.ok()) << maps.error().message();
  EXPECT_FALSE(maps->empty());
  // Memory: the child's copy of a global we know the address of.
  static std::uint64_t marker = 0x5eed5eed5eed5eedull;
  LiveProcessMemory mem(child);
  auto v = mem.read_u64(reinterpret_cast<std::uintptr_t>(&marker));
  ASSERT_TRUE(v.ok()) << v.error().message();
  EXPECT_EQ(*v, marker);
  auto tids = list_threads(child);
  EXPECT_EQ(tids.size(), 1u);
  auto source = make_ptrace_source(child);
  ASSERT_FALSE(tids.empty());
  EXPECT_TRUE(source->thread_pointer(tids[0]).ok());
}

// Every TLS access model, read from outside a running process the tests own
// (tests/unit/data/tls_model_target.c): its worker threads each point the
// tests' TLS variable at a record naming their tid, and the reader, knowing
// only the process, must find exactly those pointers per thread, through the
// model the variable's module was built, linked and loaded with. glibc and
// musl, x86-64 natively and arm64 under qemu-aarch64 (thread pointers from
// its gdbstub). One idle thread never touches the variable: in glibc's
// dynamic TLS it has no block yet, which the reader must say.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "forked_child.hpp"
#include "test_record_layout.hpp"
#include "thread_pointer_support.hpp"
#include "tracecorr/discovery.hpp"
#include "tracecorr/memory.hpp"
#include "tracecorr/sampler.hpp"
#include "tracecorr/threadptr.hpp"
#include "tracecorr/tls.hpp"

namespace tracecorr {
namespace {

using namespace std::chrono_literals;
using test_support::test_record_layout;

const std::string kData = TRACECORR_TEST_DATA_DIR;
const std::string kQemu = "/usr/bin/qemu-aarch64";
// The cross toolchain's C library, for dynamic arm64 guests (qemu -L).
const std::string kArm64Sysroot = "/usr/aarch64-linux-gnu";
constexpr const char* kDynamicTls = "GLIBC_TUNABLES=glibc.rtld.optional_static_tls=0";

std::string data(const std::string& name) { return kData + "/" + name; }

struct ModelCase {
  std::string name;
  std::vector<std::string> command;      // the program and its arguments (the guest's under qemu)
  std::vector<std::string> environment;  // NAME=value added for the program
  TlsAccessModel model;
  CLibrary c_library;
  // The idle thread has no TLS block for the module (glibc allocates dynamic
  // TLS at a thread's first use; musl at dlopen, for every thread).
  bool idle_unallocated = false;
  bool arm64 = false;  // run under qemu-aarch64, thread pointers from its gdbstub
};

std::ostream& operator<<(std::ostream& o, const ModelCase& c) { return o << c.name; }

// What the program announced: each worker's tid and record, the idle thread.
struct Announced {
  std::map<pid_t, std::uint64_t> records;
  pid_t idle = 0;
};

// The launched program, killed and reaped whatever the test does. Its stdout
// is the report pipe.
class ModelTarget {
 public:
  ModelTarget(const ModelCase& c, int gdb_port)
      : child_([&c, gdb_port](test::ForkedChild::Pipes pipes) {
          std::vector<std::string> argv;
          if (c.arm64) {
            argv = {kQemu, "-g", std::to_string(gdb_port), "-L", kArm64Sysroot};
            for (const auto& e : c.environment) argv.insert(argv.end(), {"-E", e});
          } else {
            for (const auto& e : c.environment) ::putenv(const_cast<char*>(e.c_str()));
          }
          argv.insert(argv.end(), c.command.begin(), c.command.end());
          ::dup2(pipes.report, STDOUT_FILENO);
          ::dup2(pipes.release, STDIN_FILENO);
          test::ForkedChild::exec(std::move(argv));
        }) {}

  pid_t pid() const { return child_.pid(); }

  // The announcements up to "ready"; nullopt when the program ended or stalled first.
  std::optional<Announced> wait_ready() {
    Announced a;
    for (;;) {
      auto line = child_.read_line(20s);
      if (!line) return std::nullopt;
      if (*line == "ready") return a;
      long tid = 0;
      unsigned long long record = 0;
      if (std::sscanf(line->c_str(), "thread %ld %llx", &tid, &record) == 2)
        a.records[static_cast<pid_t>(tid)] = record;
      else if (std::sscanf(line->c_str(), "idle %ld", &tid) == 1)
        a.idle = static_cast<pid_t>(tid);
    }
  }

 private:
  test::ForkedChild child_;
};

DiscoveryOptions models_discovery_options() {
  DiscoveryOptions o = test_support::test_discovery_options();
  o.look_in_executables = true;  // local exec: the variable is the program's own
  return o;
}

std::uint64_t owner_of(const RecordBytes& record) {
  std::uint64_t owner = 0;
  std::memcpy(&owner, record.data() + TC_TEST_RECORD_OWNER_OFFSET, sizeof owner);
  return owner;
}

// A launched program whose variable has been found: what every test starts from.
struct Resolved {
  std::unique_ptr<ModelTarget> target;
  std::unique_ptr<ThreadPointerSource> thread_pointers;
  Announced announced;
  AgentLibrary library;
  CLibrary c_library = CLibrary::Unknown;
  std::optional<TlsVariableAccess> access;
};

// Launches `c`'s program, waits for its threads, finds the module defining the
// variable and resolves how it is reached. Fails the test (callers check
// HasFatalFailure()) or skips it when a build product is missing.
void launch_and_resolve(const ModelCase& c, Resolved& out) {
  for (const auto& file : c.command)
    if (file.front() == '/' && ::access(file.c_str(), R_OK) != 0) GTEST_SKIP() << file << " was not built";
  if (c.arm64 && ::access(kQemu.c_str(), X_OK) != 0) GTEST_SKIP() << "qemu-aarch64 is not installed";
  if (c.arm64 && ::access((kArm64Sysroot + "/lib/ld-linux-aarch64.so.1").c_str(), R_OK) != 0)
    GTEST_SKIP() << "no arm64 C library under " << kArm64Sysroot;

  const int port = c.arm64 ? test_support::unused_loopback_port() : 0;
  out.target = std::make_unique<ModelTarget>(c, port);
  const pid_t pid = out.target->pid();
  ASSERT_GT(pid, 0);
  if (c.arm64) {
    for (int i = 0; i < 3000 && !test_support::listening_on(port); ++i) {
      ASSERT_EQ(::waitpid(pid, nullptr, WNOHANG), 0) << "qemu exited";
      ::usleep(10000);
    }
    auto gdb = make_gdbstub_source("127.0.0.1", port, pid);
    ASSERT_TRUE(gdb.ok()) << gdb.error().message();
    out.thread_pointers = std::move(*gdb);
    ASSERT_TRUE(out.thread_pointers->resume().ok());  // qemu -g holds the guest at its entry until now
  } else {
    out.thread_pointers = make_ptrace_source(pid);
  }
  auto announced = out.target->wait_ready();
  ASSERT_TRUE(announced) << "the program did not get ready";
  out.announced = *announced;
  ASSERT_EQ(out.announced.records.size(), 3u);
  ASSERT_NE(out.announced.idle, 0);

  LibraryCache cache;
  auto found = discover_process(pid, models_discovery_options(), cache);
  ASSERT_TRUE(found.ok()) << found.error().message();
  ASSERT_TRUE(found->has_value()) << "no module defining the variable";
  out.library = **found;
  EXPECT_EQ(out.library.elf.machine, c.arm64 ? elf::Machine::AArch64 : elf::Machine::X86_64);
  auto c_library = detect_c_library(pid, out.library.elf.machine);
  ASSERT_TRUE(c_library.ok()) << c_library.error().message();
  out.c_library = *c_library;
  EXPECT_EQ(out.c_library, c.c_library);

  auto access = resolve_tls_access(LiveProcessMemory(pid), out.library, out.c_library);
  ASSERT_TRUE(access.ok()) << access.error().message();
  out.access = *access;
  EXPECT_EQ(access->model, c.model) << access->explanation;
  EXPECT_EQ(access->dynamic(), c.model == TlsAccessModel::DescriptorDynamic || c.model == TlsAccessModel::GeneralDynamic)
      << access->explanation;
}

class TlsModels : public ::testing::TestWithParam<ModelCase> {};

TEST_P(TlsModels, ReadsWhatEachThreadSet) {
  const ModelCase& c = GetParam();
  Resolved r;
  launch_and_resolve(c, r);
  if (HasFatalFailure() || IsSkipped()) return;
  const auto& announced = r.announced;
  const auto& thread_pointers = r.thread_pointers;
  const auto& access = r.access;
  LiveProcessMemory memory(r.target->pid());

  // Thread pointers while the guest is stopped (a gdbstub source stops it at
  // its first read); the memory is read after, as a sampler reads it.
  std::map<pid_t, std::uint64_t> pointers;
  for (const auto& [tid, record] : announced.records) {
    auto tp = thread_pointers->thread_pointer(tid);
    ASSERT_TRUE(tp.ok()) << tp.error().message();
    pointers[tid] = *tp;
  }
  auto idle_tp = thread_pointers->thread_pointer(announced.idle);
  ASSERT_TRUE(idle_tp.ok()) << idle_tp.error().message();
  ASSERT_TRUE(thread_pointers->resume().ok());

  for (const auto& [tid, record] : announced.records) {
    auto read = read_thread_record(memory, test_record_layout(), pointers[tid], access->site);
    ASSERT_TRUE(read.ok()) << "thread " << tid << ": " << read.error().message();
    EXPECT_EQ(read->record_pointer, record) << "thread " << tid;
    ASSERT_TRUE(read->bytes) << "thread " << tid;
    EXPECT_EQ(owner_of(*read->bytes), static_cast<std::uint64_t>(tid));
  }
  auto idle = read_thread_record(memory, test_record_layout(), *idle_tp, access->site);
  if (c.idle_unallocated) {
    ASSERT_FALSE(idle.ok()) << "the idle thread's pointer read " << idle->record_pointer;
    EXPECT_EQ(idle.error().kind, ErrorKind::kNotAllocated) << idle.error().message();
  } else {
    ASSERT_TRUE(idle.ok()) << idle.error().message();
    EXPECT_EQ(idle->record_pointer, 0u);
  }
}

std::vector<ModelCase> model_cases() {
  const std::string target = data("tls_model_target");
  const std::string desc = TC_TESTLIB_DESC, traditional = TC_TESTLIB_TRADITIONAL, ie = TC_TESTLIB_INITIAL_EXEC;
  const auto preload = [](const std::string& library) { return "LD_PRELOAD=" + library; };
  std::vector<ModelCase> cases = {
      // glibc gives a dlopened TLSDESC library static TLS while its surplus lasts...
      {"GlibcDescriptorDlopened", {target, "--library", desc}, {}, TlsAccessModel::DescriptorStatic, CLibrary::Glibc},
      // ...and dynamic TLS without one: the descriptor's argument is {module, offset, generation}.
      {"GlibcDescriptorDynamic", {target, "--library", desc}, {kDynamicTls}, TlsAccessModel::DescriptorDynamic,
       CLibrary::Glibc, true},
      {"GlibcDescriptorAtStartup", {target, "--library", desc}, {preload(desc)}, TlsAccessModel::DescriptorStatic,
       CLibrary::Glibc},
      // General dynamic: glibc gives a dlopened module dynamic TLS unless its code needs static TLS.
      {"GlibcGeneralDynamicDlopened", {target, "--library", traditional}, {}, TlsAccessModel::GeneralDynamic,
       CLibrary::Glibc, true},
      // At startup the block is static, still found through the DTV (filled when a thread starts).
      {"GlibcGeneralDynamicAtStartup", {target, "--library", traditional}, {preload(traditional)},
       TlsAccessModel::GeneralDynamic, CLibrary::Glibc},
      {"GlibcInitialExecAtStartup", {target, "--library", ie}, {preload(ie)}, TlsAccessModel::InitialExec,
       CLibrary::Glibc},
      {"GlibcInitialExecDlopened", {target, "--library", ie}, {}, TlsAccessModel::InitialExec, CLibrary::Glibc},
      {"GlibcLocalExecPie", {data("tls_model_target_exe")}, {}, TlsAccessModel::LocalExec, CLibrary::Glibc},
      // No loader, no C library file mapped: nothing to know it by, and nothing needed.
      {"GlibcLocalExecStaticPie", {data("tls-model-target-static-pie")}, {}, TlsAccessModel::LocalExec,
       CLibrary::Unknown},
      // musl gives every dlopened module dynamic TLS, allocated at dlopen for every thread.
      {"MuslDescriptorDlopened", {data("tls-model-target.musl"), "--library", data("musl-tc-desc.so")}, {},
       TlsAccessModel::DescriptorDynamic, CLibrary::Musl},
      {"MuslDescriptorAtStartup", {data("tls-model-target.musl"), "--library", data("musl-tc-desc.so")},
       {preload(data("musl-tc-desc.so"))}, TlsAccessModel::DescriptorStatic, CLibrary::Musl},
      {"MuslGeneralDynamicDlopened", {data("tls-model-target.musl"), "--library", data("musl-tc-traditional.so")}, {},
       TlsAccessModel::GeneralDynamic, CLibrary::Musl},
      {"MuslInitialExecAtStartup", {data("tls-model-target.musl"), "--library", data("musl-tc-initial-exec.so")},
       {preload(data("musl-tc-initial-exec.so"))}, TlsAccessModel::InitialExec, CLibrary::Musl},
      {"MuslLocalExecStaticPie", {data("tls-model-target-static-pie.musl")}, {}, TlsAccessModel::LocalExec,
       CLibrary::Unknown},
  };
  const std::string arm64 = data("tls-model-target.arm64");
  const std::string arm64_desc = data("aarch64-desc.so"), arm64_traditional = data("aarch64-traditional.so"),
                    arm64_ie = data("aarch64-initial-exec.so");
  const std::vector<ModelCase> arm64_cases = {
      {"Arm64GlibcDescriptorDlopened", {arm64, "--library", arm64_desc}, {}, TlsAccessModel::DescriptorStatic,
       CLibrary::Glibc},
      {"Arm64GlibcDescriptorDynamic", {arm64, "--library", arm64_desc}, {kDynamicTls},
       TlsAccessModel::DescriptorDynamic, CLibrary::Glibc, true},
      {"Arm64GlibcGeneralDynamicDlopened", {arm64, "--library", arm64_traditional}, {},
       TlsAccessModel::GeneralDynamic, CLibrary::Glibc, true},
      {"Arm64GlibcInitialExecAtStartup", {arm64, "--library", arm64_ie}, {preload(arm64_ie)},
       TlsAccessModel::InitialExec, CLibrary::Glibc},
      {"Arm64GlibcLocalExecStaticPie", {data("tls-model-target-static-pie.arm64")}, {}, TlsAccessModel::LocalExec,
       CLibrary::Unknown},
  };
  for (auto c : arm64_cases) {
    c.arm64 = true;
    cases.push_back(c);
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Processes, TlsModels, ::testing::ValuesIn(model_cases()),
                         [](const auto& info) { return info.param.name; });

ModelCase model_case(const std::string& name) {
  for (const auto& c : model_cases())
    if (c.name == name) return c;
  ADD_FAILURE() << "no case " << name;
  return {};
}

// The ptrace sampler reads each thread's record in dynamic TLS through its
// DTV, and counts the thread that has no block yet apart from failed reads.
TEST(TlsModelSampling, PtraceSamplerReadsDynamicTls) {
  Resolved r;
  launch_and_resolve(model_case("GlibcDescriptorDynamic"), r);
  if (HasFatalFailure() || IsSkipped()) return;
  auto sampler = make_ptrace_sampler(PtraceSamplerOptions{});
  ASSERT_TRUE(sampler->track(r.target->pid(), test_record_layout(), r.access->site));
  std::map<pid_t, Sample> latest;
  const auto all_sampled = [&] {
    for (const auto& [tid, record] : r.announced.records)
      if (!latest.count(tid)) return false;
    return latest.count(r.announced.idle) > 0;
  };
  for (int round = 0; round < 100 && !all_sampled(); ++round) {
    auto polled = sampler->poll([&](const Sample& s) { latest[s.tid] = s; }, 200ms);
    ASSERT_TRUE(polled.ok()) << polled.error().message();
  }
  for (const auto& [tid, record] : r.announced.records) {
    ASSERT_TRUE(latest.count(tid)) << "thread " << tid << " never sampled";
    const Sample& s = latest[tid];
    EXPECT_EQ(s.error, SampleError::Ok) << to_string(s.error);
    EXPECT_EQ(s.record_pointer, record);
    ASSERT_TRUE(s.record);
    EXPECT_EQ(owner_of(*s.record), static_cast<std::uint64_t>(tid));
  }
  ASSERT_TRUE(latest.count(r.announced.idle));
  EXPECT_EQ(latest[r.announced.idle].error, SampleError::TlsBlockNotAllocated);
  EXPECT_GE(sampler->counters().tls_block_not_allocated, 1u);
  EXPECT_EQ(sampler->counters().record_pointer_read_failed, 0u);
}

}  // namespace
}  // namespace tracecorr

// Discovery and the TLS descriptor against the tests' own library
// (tests/unit/data/tls_test_library.c, its symbols and record in
// tests/support/test_record.h) this process dlopens itself: the reader must
// land on the very thread_local the test sees.
#include <gtest/gtest.h>

#include <regex>

#include "thread_pointer_support.hpp"

#include <asm/prctl.h>
#include <dlfcn.h>
#include <elf.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstring>
#include <map>
#include <thread>

#include "test_record_layout.hpp"
#include "tracecorr/discovery.hpp"
#include "tracecorr/memory.hpp"
#include "tracecorr/tls.hpp"

namespace tracecorr {
namespace {

struct TestLibrary {
  void* handle = nullptr;
  void* (*tls_address)() = nullptr;
  void (*set_record)(void*) = nullptr;
  void (*publish_area)(void*) = nullptr;
};

const TestLibrary& desc_library() {
  static TestLibrary lib = [] {
    TestLibrary l;
    l.handle = ::dlopen(TC_TESTLIB_DESC, RTLD_NOW | RTLD_GLOBAL);
    if (!l.handle) return l;
    l.tls_address = reinterpret_cast<void* (*)()>(::dlsym(l.handle, "tc_test_tls_address"));
    l.set_record = reinterpret_cast<void (*)(void*)>(::dlsym(l.handle, "tc_test_set_record"));
    l.publish_area = reinterpret_cast<void (*)(void*)>(::dlsym(l.handle, "tc_test_publish_area"));
    return l;
  }();
  return lib;
}

using test_support::own_thread_pointer;
using test_support::test_record_layout;

using test_support::test_discovery_options;

TEST(Discovery, FindsTheDlopenedLibraryWithItsRuntimeAddresses) {
  const auto& lib = desc_library();
  ASSERT_NE(lib.handle, nullptr) << ::dlerror();
  LibraryCache cache;
  auto found = discover_process(::getpid(), test_discovery_options(), cache);
  ASSERT_TRUE(found.ok()) << found.error().message();
  ASSERT_TRUE(found->has_value());
  const auto& a = **found;
  EXPECT_EQ(a.path, TC_TESTLIB_DESC);
  EXPECT_TRUE(a.name_matches);
  EXPECT_EQ(a.name_suffix, "unittest");
  ASSERT_TRUE(a.process_pointer_addr);
  EXPECT_EQ(*a.process_pointer_addr,
            reinterpret_cast<std::uintptr_t>(::dlsym(lib.handle, test_support::kTestProcessSymbol)));
  // What the library publishes there is read back through that address.
  static const std::uint64_t area = 0x5eed;
  lib.publish_area(const_cast<std::uint64_t*>(&area));
  auto published = LiveProcessMemory(::getpid()).read_u64(*a.process_pointer_addr);
  lib.publish_area(nullptr);
  ASSERT_TRUE(published.ok()) << published.error().message();
  EXPECT_EQ(*published, reinterpret_cast<std::uintptr_t>(&area));
  ASSERT_TRUE(a.tls_descriptor_addr);
  // A second scan hits the cache: no file is parsed again.
  auto parsed = cache.analyses();
  auto again = discover_process(::getpid(), test_discovery_options(), cache);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(cache.analyses(), parsed);
}

TEST(Discovery, MisnamedLibraryIsFoundByItsSymbols) {
  void* h = ::dlopen(TC_TESTLIB_MISNAMED, RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(h, nullptr) << ::dlerror();
  auto o = test_discovery_options();
  o.name_regex = ".*/no-such-agent-name\\.so";  // so only the symbols can find a library
  LibraryCache cache;
  auto found = discover_process(::getpid(), o, cache);
  ASSERT_TRUE(found.ok());
  ASSERT_TRUE(found->has_value());
  EXPECT_FALSE((*found)->name_matches);
  EXPECT_TRUE((*found)->elf.tls && (*found)->elf.tls->defined());
  o.look_past_names = false;
  auto strict = discover_process(::getpid(), o, cache);
  ASSERT_TRUE(strict.ok());
  EXPECT_FALSE(strict->has_value());
}

TEST(Discovery, NameRegexMatchesItsClassGroupOnly) {
  std::string suffix;
  auto re = test_discovery_options().name_regex;
  EXPECT_TRUE(library_name_matches("/opt/x/tc-test-agent-x64.so", re, &suffix));
  EXPECT_EQ(suffix, "x64");
  EXPECT_TRUE(library_name_matches("/a/tc-test-agent-arm64-v2.so", re, &suffix));
  EXPECT_FALSE(library_name_matches("/a/tc-test-agent-x64.so.1", re));
  EXPECT_FALSE(library_name_matches("tc-test-agent-x64.so", re));  // needs a directory
  EXPECT_FALSE(library_name_matches("/a/tc-test-agent-x.64.so", re));
  // A long hostile path does not blow the stack.
  EXPECT_FALSE(library_name_matches("/" + std::string(4096, 'a') + ".so", re));
}

// Issue 16: std::regex overflowed the stack on 25-30 KB paths (SIGSEGV in
// inspect and agent). The matcher is linear and does not recurse.
TEST(Discovery, NameMatcherSurvivesHugePaths) {
  auto re = test_discovery_options().name_regex;
  ASSERT_TRUE(library_name_pattern_supported(re));
  std::string deep;
  while (deep.size() < 200'000) deep += "/d";
  std::string suffix;
  EXPECT_TRUE(library_name_matches(deep + "/tc-test-agent-x64.so", re, &suffix));
  EXPECT_EQ(suffix, "x64");
  EXPECT_FALSE(library_name_matches(deep + "/tc-test-agent-" + std::string(200'000, 'x') + ".so.1", re));
  EXPECT_TRUE(library_name_matches("/a/tc-test-agent-" + std::string(200'000, 'x') + ".so", re));
}

// The matcher agrees with the regex it stands for (std::regex is safe on these short inputs).
TEST(Discovery, NameMatcherAgreesWithTheRegex) {
  for (std::string re : {test_discovery_options().name_regex, std::string(".*/no-such-agent-name\\.so"),
                         std::string(".*/lib([a-c0-9]+)\\.so")}) {
    ASSERT_TRUE(library_name_pattern_supported(re)) << re;
    std::regex reference(re, std::regex::ECMAScript);
    for (std::string path : {"/x/tc-test-agent-x64.so", "/x/tc-test-agent-.so", "//tc-test-agent-a_b-c.so",
                             "/x/tc-test-agent-x 64.so", "/x/tc-test-agent-x64.sox", "/x/y/tc-test-agent-x64.so/z",
                             "/x/no-such-agent-name.so", "/x/no-such-agent-nameXso", "/lib.so", "/libab0.so", "/libabd.so",
                             "/a\nb/libab.so", "libab.so", "/x/tc-test-agent-\xc3\xa9.so"}) {
      std::smatch m;
      bool want = std::regex_match(path, m, reference);
      std::string suffix;
      EXPECT_EQ(library_name_matches(path, re, &suffix), want) << re << " on " << path;
      if (want && m.size() > 1) EXPECT_EQ(suffix, m[1].str());
    }
  }
  EXPECT_FALSE(library_name_pattern_supported("(a|b).*"));
}

TEST(Discovery, NonexistentProcessIsAnError) {
  LibraryCache cache;
  auto found = discover_process(0x3ffffff0, test_discovery_options(), cache);
  EXPECT_FALSE(found.ok());
}

TEST(TlsDescriptor, StaticOffsetLeadsToTheThreadLocalThisThreadSees) {
  const auto& lib = desc_library();
  ASSERT_NE(lib.handle, nullptr) << ::dlerror();
  LibraryCache cache;
  auto found = discover_process(::getpid(), test_discovery_options(), cache);
  ASSERT_TRUE(found.ok() && found->has_value());
  LiveProcessMemory mem(::getpid());
  auto d = read_tls_descriptor(mem, *(*found)->tls_descriptor_addr, (*found)->elf.machine);
  ASSERT_TRUE(d.ok()) << d.error().message();
  ASSERT_EQ(d->model, TlsModel::StaticOffset) << d->explanation;
  const std::uint64_t tp = own_thread_pointer();
  EXPECT_EQ(tp + static_cast<std::uint64_t>(d->tp_offset), reinterpret_cast<std::uintptr_t>(lib.tls_address()));

  // And on another thread: same offset, that thread's own variable.
  std::uint64_t other_tp = 0, other_addr = 0;
  std::thread([&] {
    other_tp = own_thread_pointer();
    other_addr = reinterpret_cast<std::uintptr_t>(lib.tls_address());
  }).join();
  EXPECT_NE(other_addr, reinterpret_cast<std::uintptr_t>(lib.tls_address()));
  EXPECT_EQ(other_tp + static_cast<std::uint64_t>(d->tp_offset), other_addr);
}

TEST(ThreadRecord, ReadsThePublishedRecordThroughTheThreadPointer) {
  const auto& lib = desc_library();
  ASSERT_NE(lib.handle, nullptr);
  LibraryCache cache;
  auto found = discover_process(::getpid(), test_discovery_options(), cache);
  ASSERT_TRUE(found.ok() && found->has_value());
  LiveProcessMemory mem(::getpid());
  auto d = read_tls_descriptor(mem, *(*found)->tls_descriptor_addr, (*found)->elf.machine);
  ASSERT_TRUE(d.ok() && d->model == TlsModel::StaticOffset);

  lib.set_record(nullptr);
  auto none = read_thread_record(mem, test_record_layout(), own_thread_pointer(), PointerSite::tls_offset(d->tp_offset));
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->record_pointer, 0u);
  EXPECT_FALSE(none->bytes);

  auto bytes = test_support::test_record(0xab, 1);
  lib.set_record(bytes.data());
  auto got = read_thread_record(mem, test_record_layout(), own_thread_pointer(), PointerSite::tls_offset(d->tp_offset));
  ASSERT_TRUE(got.ok()) << got.error().message();
  EXPECT_EQ(got->record_pointer, reinterpret_cast<std::uintptr_t>(bytes.data()));
  ASSERT_TRUE(got->bytes);
  EXPECT_EQ(*got->bytes, RecordBytes(bytes));

  // A pointer into unmapped memory: kUnmapped, with the address.
  void* gone = ::mmap(nullptr, 4096, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ::munmap(gone, 4096);
  lib.set_record(gone);
  auto bad = read_thread_record(mem, test_record_layout(), own_thread_pointer(), PointerSite::tls_offset(d->tp_offset));
  lib.set_record(nullptr);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().kind, ErrorKind::kUnmapped);
  EXPECT_TRUE(bad.error().requirement.empty()) << "the engine names no requirement; the protocol reads the kind";
}

// A fake process memory: descriptor words and resolver code chosen by the test.
class FakeMemory : public ProcessMemory {
 public:
  std::map<std::uint64_t, std::vector<std::uint8_t>> regions;
  Status read(std::uint64_t addr, std::span<std::uint8_t> out) const override {
    for (const auto& [base, bytes] : regions) {
      if (addr >= base && addr - base <= bytes.size() && out.size() <= bytes.size() - (addr - base)) {
        std::memcpy(out.data(), bytes.data() + (addr - base), out.size());
        return Ok{};
      }
    }
    return make_error(ErrorKind::kUnmapped, "unmapped memory", "fake");
  }
  void descriptor(std::uint64_t at, std::uint64_t resolver, std::uint64_t argument) {
    std::vector<std::uint8_t> w(16);
    std::memcpy(w.data(), &resolver, 8);
    std::memcpy(w.data() + 8, &argument, 8);
    regions[at] = w;
  }
};

TEST(TlsDescriptor, ClassifiesResolversByTheirCode) {
  struct Case {
    elf::Machine machine;
    std::vector<std::uint8_t> code;
    TlsModel model;
  };
  const std::vector<Case> cases = {
      {elf::Machine::X86_64, {0x48, 0x8b, 0x40, 0x08, 0xc3}, TlsModel::StaticOffset},
      {elf::Machine::X86_64, {0xf3, 0x0f, 0x1e, 0xfa, 0x48, 0x8b, 0x40, 0x08, 0xc3}, TlsModel::StaticOffset},
      {elf::Machine::X86_64, {0xf3, 0x0f, 0x1e, 0xfa, 0x55, 0x48, 0x89, 0xe5, 0xc3}, TlsModel::Dynamic},
      {elf::Machine::AArch64, {0x00, 0x04, 0x40, 0xf9, 0xc0, 0x03, 0x5f, 0xd6}, TlsModel::StaticOffset},
      {elf::Machine::AArch64, {0x5f, 0x24, 0x03, 0xd5, 0x00, 0x04, 0x40, 0xf9, 0xc0, 0x03, 0x5f, 0xd6}, TlsModel::StaticOffset},
      {elf::Machine::AArch64, {0x3f, 0x23, 0x03, 0xd5, 0x00, 0x04, 0x40, 0xf9, 0xc0, 0x03, 0x5f, 0xd6}, TlsModel::StaticOffset},
      // Debian 12's ld-linux-aarch64.so.1: nop; ldr x0, [x0, #8]; ret
      {elf::Machine::AArch64, {0x1f, 0x20, 0x03, 0xd5, 0x00, 0x04, 0x40, 0xf9, 0xc0, 0x03, 0x5f, 0xd6}, TlsModel::StaticOffset},
      {elf::Machine::AArch64, {0xfd, 0x7b, 0xbf, 0xa9, 0xc0, 0x03, 0x5f, 0xd6, 0, 0, 0, 0}, TlsModel::Dynamic},
      // x86 code on an aarch64 library is not "return the argument".
      {elf::Machine::AArch64, {0x48, 0x8b, 0x40, 0x08, 0xc3, 0, 0, 0}, TlsModel::Dynamic},
  };
  for (const auto& c : cases) {
    FakeMemory mem;
    mem.descriptor(0x1000, 0x5000, static_cast<std::uint64_t>(-112));
    mem.regions[0x5000] = c.code;  // exactly the code: the reader must cope with a short mapping
    auto d = read_tls_descriptor(mem, 0x1000, c.machine);
    ASSERT_TRUE(d.ok()) << d.error().message();
    EXPECT_EQ(d->model, c.model) << ::testing::PrintToString(c.code);
    if (c.model == TlsModel::StaticOffset) EXPECT_EQ(d->tp_offset, -112);
    if (c.model == TlsModel::Dynamic) {
      EXPECT_NE(d->explanation.find("dynamic TLS"), std::string::npos);
      EXPECT_NE(d->explanation.find("LD_PRELOAD"), std::string::npos);
      EXPECT_NE(d->explanation.find("glibc.rtld.optional_static_tls"), std::string::npos);
    }
  }
}

TEST(TlsDescriptor, UnresolvedAndUnreadable) {
  FakeMemory mem;
  mem.descriptor(0x1000, 0, 0);
  auto d = read_tls_descriptor(mem, 0x1000, elf::Machine::X86_64);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->model, TlsModel::Unresolved);

  mem.descriptor(0x1000, 0x9999000, 8);  // resolver points nowhere
  auto e = read_tls_descriptor(mem, 0x1000, elf::Machine::X86_64);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.error().message().find("0x9999000"), std::string::npos) << e.error().message();

  auto f = read_tls_descriptor(mem, 0x2000, elf::Machine::X86_64);  // descriptor itself unmapped
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.error().message().find("0x2000"), std::string::npos);
}

}  // namespace
}  // namespace tracecorr

namespace tracecorr {
namespace {

// ---- the DTV walk, on DTVs written by the test --------------------------------------
// A fake thread: a thread pointer whose TCB names a DTV the test lays out.
struct FakeThread {
  static constexpr std::uint64_t kThreadPointer = 0x7000'0000;
  static constexpr std::uint64_t kDtv = 0x8000'0000;
  static constexpr std::uint64_t kBlock = 0x9000'0000;
  FakeMemory memory;
  DtvLayout layout;

  explicit FakeThread(DtvLayout l) : layout(l) {
    put(kThreadPointer + static_cast<std::uint64_t>(layout.dtv_at), kDtv);
  }
  void put(std::uint64_t address, std::uint64_t value) {
    std::vector<std::uint8_t> w(8);
    std::memcpy(w.data(), &value, 8);
    memory.regions[address] = w;
  }
  void entry(std::int64_t index, std::uint64_t value) {
    put(kDtv + static_cast<std::uint64_t>(index) * layout.entry_size, value);
  }
};

DtvLayout layout_of(CLibrary c, elf::Machine m) {
  auto l = dtv_layout(c, m);
  EXPECT_TRUE(l.has_value());
  return l.value_or(DtvLayout{});
}

TEST(DtvWalk, FindsTheModuleBlockInEachLayout) {
  for (auto c : {CLibrary::Glibc, CLibrary::Musl})
    for (auto m : {elf::Machine::X86_64, elf::Machine::AArch64}) {
      FakeThread t(layout_of(c, m));
      t.entry(t.layout.count_entry, 4);
      if (t.layout.generation_entry) t.entry(*t.layout.generation_entry, 9);
      t.entry(3, FakeThread::kBlock);
      auto address = pointer_address(t.memory, test_record_layout(),
                                     PointerSite::module_block(DtvModule{3, 9, t.layout}, 0x28), FakeThread::kThreadPointer);
      ASSERT_TRUE(address.ok()) << to_string(c) << " " << elf::to_string(m) << ": " << address.error().message();
      EXPECT_EQ(*address, FakeThread::kBlock + 0x28);
    }
  // Where each keeps the DTV, as their TLSDESC resolvers read it.
  EXPECT_EQ(layout_of(CLibrary::Glibc, elf::Machine::X86_64).dtv_at, 8);
  EXPECT_EQ(layout_of(CLibrary::Glibc, elf::Machine::AArch64).dtv_at, 0);
  EXPECT_EQ(layout_of(CLibrary::Musl, elf::Machine::X86_64).dtv_at, 8);
  EXPECT_EQ(layout_of(CLibrary::Musl, elf::Machine::AArch64).dtv_at, -8);
  EXPECT_FALSE(dtv_layout(CLibrary::Unknown, elf::Machine::X86_64));
  EXPECT_FALSE(dtv_layout(CLibrary::Glibc, elf::Machine::Other));
}

TEST(DtvWalk, AThreadWithoutABlockIsNotAllocatedNeverAnAddress) {
  const DtvLayout glibc = layout_of(CLibrary::Glibc, elf::Machine::X86_64);
  struct Case {
    const char* name;
    std::uint64_t count, generation, entry;
    std::uint64_t module_generation;
  };
  for (const Case& c : {Case{"entry unallocated (-1)", 4, 9, ~std::uint64_t{0}, 9},
                        Case{"entry 0", 4, 9, 0, 9},
                        Case{"DTV shorter than the module id", 2, 9, FakeThread::kBlock, 9},
                        Case{"DTV older than the module", 4, 8, FakeThread::kBlock, 9}}) {
    FakeThread t(glibc);
    t.entry(-1, c.count);
    t.entry(0, c.generation);
    t.entry(3, c.entry);
    auto address = module_block_address(t.memory, DtvModule{3, c.module_generation, glibc}, FakeThread::kThreadPointer);
    ASSERT_FALSE(address.ok()) << c.name;
    EXPECT_EQ(address.error().kind, ErrorKind::kNotAllocated) << c.name << ": " << address.error().message();
  }
  FakeThread no_dtv(glibc);
  no_dtv.put(FakeThread::kThreadPointer + 8, 0);
  auto none = module_block_address(no_dtv.memory, DtvModule{1, std::nullopt, glibc}, FakeThread::kThreadPointer);
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.error().kind, ErrorKind::kNotAllocated);
}

TEST(DtvWalk, HostileDtvsAreBoundedErrors) {
  const DtvLayout musl = layout_of(CLibrary::Musl, elf::Machine::X86_64);
  FakeThread huge(musl);
  huge.entry(0, std::uint64_t{1} << 40);  // a count no C library reaches
  auto count = module_block_address(huge.memory, DtvModule{1, std::nullopt, musl}, FakeThread::kThreadPointer);
  ASSERT_FALSE(count.ok());
  EXPECT_EQ(count.error().kind, ErrorKind::kMalformed);

  FakeThread t(musl);
  t.entry(0, 4);
  for (std::uint64_t module : {std::uint64_t{0}, kMaxTlsModules + 1}) {
    auto bad = module_block_address(t.memory, DtvModule{module, std::nullopt, musl}, FakeThread::kThreadPointer);
    ASSERT_FALSE(bad.ok());
    EXPECT_EQ(bad.error().kind, ErrorKind::kMalformed) << module;
  }
  // The DTV pointer leads nowhere: the memory's kind, with the address.
  FakeThread dangling(musl);
  dangling.put(FakeThread::kThreadPointer + 8, 0x1234'0000);
  auto unmapped = module_block_address(dangling.memory, DtvModule{1, std::nullopt, musl}, FakeThread::kThreadPointer);
  ASSERT_FALSE(unmapped.ok());
  EXPECT_EQ(unmapped.error().kind, ErrorKind::kUnmapped);
  EXPECT_NE(unmapped.error().message().find("0x12340000"), std::string::npos) << unmapped.error().message();
}

// Local exec offsets by the psABI's static TLS layouts, as linkers write them
// (checked against gcc/ld output: x86-64 -80 and arm64 +48 for a variable at
// 32 in a 112-byte, 8-aligned template).
TEST(LocalExec, OffsetsFollowEachVariant) {
  const elf::TlsSegment segment{0x1000, 0x20, 0x70, 8};
  auto x86 = local_exec_offset(segment, 0x20, elf::Machine::X86_64);
  ASSERT_TRUE(x86.ok());
  EXPECT_EQ(*x86, -80);
  auto arm = local_exec_offset(segment, 0x20, elf::Machine::AArch64);
  ASSERT_TRUE(arm.ok());
  EXPECT_EQ(*arm, 48);
  // A 64-byte alignment rounds the block (x86-64) and the TCB gap (arm64).
  const elf::TlsSegment aligned{0x1000, 0, 0x48, 64};
  EXPECT_EQ(*local_exec_offset(aligned, 8, elf::Machine::X86_64), 8 - 128);
  EXPECT_EQ(*local_exec_offset(aligned, 8, elf::Machine::AArch64), 64 + 8);
  // What no linker writes is refused, not computed.
  EXPECT_EQ(local_exec_offset({0, 0, 0x70, 12}, 0, elf::Machine::X86_64).error().kind, ErrorKind::kMalformed);
  EXPECT_EQ(local_exec_offset(segment, 0x70, elf::Machine::X86_64).error().kind, ErrorKind::kMalformed);
  EXPECT_EQ(local_exec_offset(segment, 0, elf::Machine::Other).error().kind, ErrorKind::kUnsupported);
}

// resolve_tls_access on a library whose relocations and memory the test writes.
std::vector<std::uint8_t> words(std::initializer_list<std::uint64_t> values) {
  std::vector<std::uint8_t> bytes(values.size() * 8);
  std::size_t at = 0;
  for (auto v : values) std::memcpy(bytes.data() + 8 * at++, &v, 8);
  return bytes;
}

AgentLibrary fake_library() {
  AgentLibrary l;
  l.path = "/fake/libtc.so";
  l.load_bias = 0x10000;
  l.elf.machine = elf::Machine::X86_64;
  l.elf.tls = elf::Symbol{"tc", 0x18, 8, STT_TLS, STB_GLOBAL, STV_DEFAULT, 20};
  return l;
}

TEST(TlsAccess, DynamicDescriptorNeedsAKnownCLibraryAndAPairForTheVariable) {
  auto l = fake_library();
  l.tls_descriptor_addr = 0x1000;
  FakeMemory mem;
  mem.descriptor(0x1000, 0x5000, 0x6000);
  mem.regions[0x5000] = {0xf3, 0x0f, 0x1e, 0xfa, 0x55, 0x48, 0x89, 0xe5, 0xc3};  // not "return the argument"
  mem.regions[0x6000] = words({2, 0x18, 7});  // {module 2, offset 0x18}, generation 7
  auto glibc = resolve_tls_access(mem, l, CLibrary::Glibc);
  ASSERT_TRUE(glibc.ok()) << glibc.error().message();
  EXPECT_EQ(glibc->model, TlsAccessModel::DescriptorDynamic);
  ASSERT_TRUE(glibc->site.module);
  EXPECT_EQ(glibc->site.module->module_id, 2u);
  EXPECT_EQ(glibc->site.module->generation, 7u);
  EXPECT_EQ(glibc->site.value, 0x18u);
  auto musl = resolve_tls_access(mem, l, CLibrary::Musl);
  ASSERT_TRUE(musl.ok());
  EXPECT_FALSE(musl->site.module->generation) << "musl's argument has no generation";

  auto unknown = resolve_tls_access(mem, l, CLibrary::Unknown);
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.error().kind, ErrorKind::kUnsupported);
  EXPECT_NE(unknown.error().message().find("DTV"), std::string::npos) << unknown.error().message();

  // glibc's lazy resolver points its argument at the relocation: no pair for this variable.
  mem.regions[0x6000] = words({0x3fe8, 0x24, 0});
  auto lazy = resolve_tls_access(mem, l, CLibrary::Glibc);
  ASSERT_FALSE(lazy.ok());
  EXPECT_EQ(lazy.error().kind, ErrorKind::kNotReady) << lazy.error().message();
}

TEST(TlsAccess, GotWordsGiveGeneralDynamicAndInitialExec) {
  auto l = fake_library();
  l.elf.tls_access.module_id_vaddr = 0x3000;
  FakeMemory mem;
  mem.descriptor(0x13000, 5, 0x18);  // the GOT's tls_index {module 5, offset 0x18}
  auto gd = resolve_tls_access(mem, l, CLibrary::Glibc);
  ASSERT_TRUE(gd.ok()) << gd.error().message();
  EXPECT_EQ(gd->model, TlsAccessModel::GeneralDynamic);
  EXPECT_EQ(gd->site.module->module_id, 5u);
  EXPECT_EQ(gd->site.value, 0x18u);
  mem.descriptor(0x13000, 0, 0);  // not relocated yet
  auto early = resolve_tls_access(mem, l, CLibrary::Glibc);
  ASSERT_FALSE(early.ok());
  EXPECT_EQ(early.error().kind, ErrorKind::kNotReady);

  // With an initial-exec word too, the first readable model wins; each failure is named.
  l.elf.tls_access.tp_offset_vaddr = 0x3010;
  mem.regions[0x13010] = {0x80, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff};  // -128
  auto ie = resolve_tls_access(mem, l, CLibrary::Glibc);
  ASSERT_TRUE(ie.ok()) << ie.error().message();
  EXPECT_EQ(ie->model, TlsAccessModel::InitialExec);
  EXPECT_FALSE(ie->dynamic());
  EXPECT_EQ(static_cast<std::int64_t>(ie->site.value), -128);
}

TEST(TlsAccess, SaysWhyNoModelCanBeRead) {
  auto l = fake_library();
  FakeMemory mem;
  auto nothing = resolve_tls_access(mem, l, CLibrary::Glibc);
  ASSERT_FALSE(nothing.ok());
  EXPECT_EQ(nothing.error().kind, ErrorKind::kNotFound);
  EXPECT_NE(nothing.error().message().find("no relocation names the variable"), std::string::npos);
  l.elf.tls->type = STT_OBJECT;  // one variable for every thread
  auto plain = resolve_tls_access(mem, l, CLibrary::Glibc);
  ASSERT_FALSE(plain.ok());
  EXPECT_NE(plain.error().message().find("not TLS"), std::string::npos) << plain.error().message();
  // An executable's own variable needs no relocation: PT_TLS places it.
  l = fake_library();
  l.elf.executable = true;
  l.elf.tls_segment = elf::TlsSegment{0x2000, 0, 0x20, 16};
  auto le = resolve_tls_access(mem, l, CLibrary::Unknown);
  ASSERT_TRUE(le.ok()) << le.error().message();
  EXPECT_EQ(le->model, TlsAccessModel::LocalExec);
  EXPECT_EQ(static_cast<std::int64_t>(le->site.value), 0x18 - 0x20);
}

}  // namespace
}  // namespace tracecorr

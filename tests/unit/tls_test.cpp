// Discovery and the TLS descriptor against the tests' own library
// (tests/unit/data/tls_test_library.c, its symbols and record in
// tests/support/test_record.h) this process dlopens itself: the reader must
// land on the very thread_local the test sees.
#include <gtest/gtest.h>

#include <regex>

#include "thread_pointer_support.hpp"

#include <asm/prctl.h>
#include <dlfcn.h>
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

// How the tests' protocol looks for its library (tests/unit/data/CMakeLists.txt
// names the libraries to fit, or not): a name pattern of the shape registries
// use, and the two symbols.
constexpr const char* kTestLibraryNameRegex = ".*/tc-test-agent-([\\w-]*)\\.so";

DiscoveryOptions test_discovery_options() {
  DiscoveryOptions o;
  o.name_regex = kTestLibraryNameRegex;
  o.process_symbol = test_support::kTestProcessSymbol;
  o.tls_symbol = test_support::kTestTlsSymbol;
  return o;
}

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

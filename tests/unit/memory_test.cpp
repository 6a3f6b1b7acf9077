#include <gtest/gtest.h>

#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <span>

#include "forked_child.hpp"
#include "tracecorr/memory.hpp"

namespace tracecorr {
namespace {

TEST(LiveProcessMemory, ReadsOwnMemory) {
  static const char text[] = "tracecorr reads this";
  LiveProcessMemory mem(::getpid());
  std::uint8_t out[sizeof text];
  ASSERT_TRUE(mem.read(reinterpret_cast<std::uintptr_t>(text), out).ok());
  EXPECT_EQ(std::memcmp(out, text, sizeof text), 0);
  std::uint64_t value = 0x1122334455667788ull;
  auto v = mem.read_u64(reinterpret_cast<std::uintptr_t>(&value));
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(*v, value);
}

// source_at reads at offsets from a structure's base, as decoders of
// variable-length structures pull their bytes.
TEST(LiveProcessMemory, SourceAtReadsAtOffsetsFromTheBase) {
  static const std::uint8_t area[] = {0x10, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18, 0x19};
  LiveProcessMemory mem(::getpid());
  auto source = mem.source_at(reinterpret_cast<std::uintptr_t>(area));
  std::uint8_t out[3] = {};
  ASSERT_TRUE(source(4, out).ok());
  EXPECT_EQ(out[0], 0x14);
  EXPECT_EQ(out[2], 0x16);
  ASSERT_TRUE(source(0, std::span(out, 1)).ok());
  EXPECT_EQ(out[0], 0x10);
  auto wrapped = source(UINT64_MAX, out);  // base + offset would wrap
  ASSERT_FALSE(wrapped.ok());
  EXPECT_NE(wrapped.error().message().find("overflows"), std::string::npos) << wrapped.error().message();
  // Past the base's mapping: the reader's error, naming the address it stopped at.
  auto* page = static_cast<std::uint8_t*>(::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(page, MAP_FAILED);
  auto at_page = mem.source_at(reinterpret_cast<std::uintptr_t>(page));
  ::munmap(page, 4096);
  auto st = at_page(8, out);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.error().kind, ErrorKind::kUnmapped);
  EXPECT_NE(st.error().message().find(hex_address(reinterpret_cast<std::uintptr_t>(page) + 8)), std::string::npos)
      << st.error().message();
}

// A page that was mapped and then unmapped: nothing is there.
std::uintptr_t unmapped_page() {
  void* p = ::mmap(nullptr, 4096, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  EXPECT_NE(p, MAP_FAILED);
  ::munmap(p, 4096);
  return reinterpret_cast<std::uintptr_t>(p);
}

TEST(LiveProcessMemory, UnmappedAddressIsAnErrorNamingIt) {
  auto addr = unmapped_page();
  LiveProcessMemory mem(::getpid());
  std::uint8_t out[8];
  auto st = mem.read(addr, out);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.error().message().find("unmapped"), std::string::npos) << st.error().message();
  EXPECT_NE(st.error().message().find(hex_address(addr)), std::string::npos) << st.error().message();
}

TEST(LiveProcessMemory, ReadRunningOffTheEndOfAMappingNamesWhereItStops) {
  auto* p = static_cast<std::uint8_t*>(::mmap(nullptr, 8192, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(p, MAP_FAILED);
  ::munmap(p + 4096, 4096);
  LiveProcessMemory mem(::getpid());
  std::uint8_t out[16];
  auto st = mem.read(reinterpret_cast<std::uintptr_t>(p + 4096 - 8), out);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.error().message().find(hex_address(reinterpret_cast<std::uintptr_t>(p + 4096))), std::string::npos)
      << st.error().message();
  ::munmap(p, 4096);
}

TEST(LiveProcessMemory, WrappingRangeIsRefused) {
  LiveProcessMemory mem(::getpid());
  std::uint8_t out[16];
  auto st = mem.read(UINT64_MAX - 4, out);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.error().message().find("wraps"), std::string::npos);
}

TEST(LiveProcessMemory, ProcessThatExitedIsGone) {
  test::ForkedChild child([](test::ForkedChild::Pipes) {});
  ASSERT_TRUE(child.started());
  int status = child.wait();
  LiveProcessMemory mem(child.pid());
  std::uint8_t out[8];
  auto st = mem.read(reinterpret_cast<std::uintptr_t>(&status), out);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.error().message().find("gone"), std::string::npos) << st.error().message();
}

}  // namespace
}  // namespace tracecorr

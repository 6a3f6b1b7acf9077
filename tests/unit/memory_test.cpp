#include <gtest/gtest.h>

#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>

#include "forked_child.hpp"
#include "elastic_v1/wire.hpp"
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

TEST(LiveProcessMemory, SourceAtFeedsTheWireDecoders) {
  elastic_v1::ProcessStorage s;
  s.service_name = "svc";
  s.socket_file_path = "/tmp/s";
  auto bytes = elastic_v1::encode_process_storage(s);
  LiveProcessMemory mem(::getpid());
  auto d = elastic_v1::decode_process_storage(mem.source_at(reinterpret_cast<std::uintptr_t>(bytes.data())));
  ASSERT_TRUE(d.ok()) << d.error().message();
  EXPECT_EQ(d->service_name, "svc");
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

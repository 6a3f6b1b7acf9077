#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>

#include "tracecorr/maps.hpp"
#include "tracecorr/procfs.hpp"

namespace tracecorr {
namespace {

TEST(Maps, ParsesPathsWithSpacesDeletedFilesAndPseudoEntries) {
  const char* text =
      "55d0a0000000-55d0a0021000 r--p 00000000 fe:00 1234                       /usr/bin/my app\n"
      "7f0000000000-7f0000001000 r-xp 00001000 fe:00 99  /opt/agent/libagent-x64.so (deleted)\n"
      "7f0000002000-7f0000003000 rw-s 00000000 00:05 7                          /dev/zero (deleted)\n"
      "7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0                          [stack]\n"
      "7ffd00030000-7ffd00031000 rw-p 00000000 00:00 0 \n"
      "ffffffffff600000-ffffffffff601000 --xp 00000000 00:00 0                  [vsyscall]\n";
  auto maps = parse_maps(text);
  ASSERT_EQ(maps.size(), 6u);
  EXPECT_EQ(maps[0].path, "/usr/bin/my app");
  EXPECT_TRUE(maps[0].read && !maps[0].write && !maps[0].exec);
  EXPECT_EQ(maps[0].start, 0x55d0a0000000u);
  EXPECT_EQ(maps[0].inode, 1234u);
  EXPECT_TRUE(maps[0].file_backed());
  EXPECT_TRUE(maps[1].deleted());
  EXPECT_EQ(maps[1].file_path(), "/opt/agent/libagent-x64.so");
  EXPECT_EQ(maps[1].file_offset, 0x1000u);
  EXPECT_TRUE(maps[1].exec);
  EXPECT_EQ(maps[1].device, "fe:00");
  EXPECT_TRUE(maps[2].shared);
  EXPECT_FALSE(maps[3].file_backed());
  EXPECT_EQ(maps[3].path, "[stack]");
  EXPECT_EQ(maps[4].path, "");
  EXPECT_EQ(maps[5].end, 0xffffffffff601000u);
  EXPECT_EQ(find_mapping(maps, 0x7f0000000800u), &maps[1]);
  EXPECT_EQ(find_mapping(maps, 0x7f0000001000u), nullptr);  // end is exclusive
}

TEST(Maps, SkipsMalformedLinesWithoutStopping) {
  const char* text =
      "garbage\n"
      "zzzz-1000 r--p 00000000 fe:00 1 /a\n"
      "2000-1000 r--p 00000000 fe:00 1 /end-before-start\n"
      "1000-2000 r--p 00000000 fe:00 notanumber /b\n"
      "1000-2000 rw 00000000 fe:00 1 /short-perms\n"
      "\n"
      "1000-2000 r--p 00000000 fe:00 5 /good\n"
      "1000-2000 r--p 00000000 fe:00";
  auto maps = parse_maps(text);
  ASSERT_EQ(maps.size(), 1u);
  EXPECT_EQ(maps[0].path, "/good");
}

TEST(Maps, ReadsOwnMapsAndFindsTheStack) {
  auto maps = read_maps(::getpid());
  ASSERT_TRUE(maps.ok()) << maps.error().message();
  int local = 0;
  const Mapping* m = find_mapping(*maps, reinterpret_cast<std::uintptr_t>(&local));
  ASSERT_NE(m, nullptr);
  EXPECT_TRUE(m->read && m->write);
}

TEST(Maps, NonexistentProcessSaysItIsGone) {
  auto maps = read_maps(0x3ffffff0);
  ASSERT_FALSE(maps.ok());
  EXPECT_NE(maps.error().message().find("gone"), std::string::npos) << maps.error().message();
}

}  // namespace
}  // namespace tracecorr

namespace tracecorr {
namespace {

TEST(NumberedEntries, ListsThreadsAndDescriptorsSortedAndNothingForAMissingDirectory) {
  auto tids = numbered_entries("/proc/self/task");
  EXPECT_TRUE(std::find(tids.begin(), tids.end(), static_cast<int>(::gettid())) != tids.end());
  EXPECT_TRUE(std::is_sorted(tids.begin(), tids.end()));
  auto fds = numbered_entries("/proc/self/fd");
  EXPECT_TRUE(std::find(fds.begin(), fds.end(), 2) != fds.end());  // stderr; "." and ".." skipped
  EXPECT_TRUE(numbered_entries("/proc/self/not-a-directory").empty());
}

}  // namespace
}  // namespace tracecorr

// The mapping watch follows a writer (tests/unit/data/mapping_writer_target.c)
// from before its exec: it sees the mapping appear, every store into its head
// in the order the writer made them, the system calls it was asked about in
// their place among the stores, and whether a forked child inherited the
// mapping. The writer must then run to its end, untraced.
#include <gtest/gtest.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "tracecorr/watch/mapping_watch.hpp"
#include "tracecorr/conform/target.hpp"

namespace tracecorr::watch {
namespace {

using namespace std::chrono_literals;
using Kind = MappingWatchEvent::Kind;

const std::string kMappingWriterTarget = std::string(TRACECORR_TEST_DATA_DIR) + "/mapping_writer_target";

struct Watched {
  MappingWatchReport report;
  std::string output;
  std::string ended;
};

// `wrapper`: run before the writer's own argv (a command that starts it as a
// child and waits, as `unshare --fork` and launch scripts without exec do).
Watched watch(const std::string& order, bool dontfork, std::vector<std::string> wrapper = {},
              std::vector<std::string> more = {}) {
  std::unique_ptr<MappingWatch> mapping_watch;
  conform::LaunchSpec spec;
  spec.argv = std::move(wrapper);
  for (std::string arg : {kMappingWriterTarget, order, std::string(dontfork ? "1" : "0")}) spec.argv.push_back(arg);
  spec.argv.insert(spec.argv.end(), more.begin(), more.end());
  spec.before_exec = [&](pid_t pid) {
    MappingWatch::Settings settings;
    settings.is_watched_mapping = [](const std::string& name) { return name.rfind("/memfd:TC_WATCHED", 0) == 0; };
    settings.syscalls = {SYS_prctl, SYS_madvise};
    auto w = MappingWatch::follow_launch(pid, settings);
    if (w) mapping_watch = std::move(*w);
    else ADD_FAILURE() << w.error().message();
  };
  auto target = conform::Target::launch(spec);
  Watched out;
  if (!target || !mapping_watch) {
    ADD_FAILURE() << "launch failed";
    return out;
  }
  for (auto give_up = std::chrono::steady_clock::now() + 20s;
       (*target)->alive() && std::chrono::steady_clock::now() < give_up;)
    std::this_thread::sleep_for(10ms);
  out.report = mapping_watch->finish();
  // stop() ends the output capture with what the pipe still held: right after
  // the exit, the capture thread may not have read the last line yet.
  out.ended = (*target)->stop();
  out.output = (*target)->output();
  return out;
}

std::uint64_t field(const MappingWatchEvent& e, std::size_t index) {
  std::uint64_t v = 0;
  if (e.bytes.size() >= (index + 1) * 8) std::memcpy(&v, e.bytes.data() + index * 8, 8);
  return v;
}

std::vector<MappingWatchEvent> of_kind(const MappingWatchReport& r, Kind kind) {
  std::vector<MappingWatchEvent> out;
  std::copy_if(r.events.begin(), r.events.end(), std::back_inserter(out), [&](const auto& e) { return e.kind == kind; });
  return out;
}

std::size_t position(const MappingWatchReport& r, const std::function<bool(const MappingWatchEvent&)>& is) {
  auto it = std::find_if(r.events.begin(), r.events.end(), is);
  return static_cast<std::size_t>(it - r.events.begin());
}

TEST(MappingWatch, SeesEachStoreInOrderAndTheSystemCallsBetweenThem) {
  auto w = watch("last", /*dontfork=*/true);
  EXPECT_EQ(w.ended, "exited with 0") << w.output;
  EXPECT_FALSE(w.report.error) << w.report.describe();
  auto mapped = of_kind(w.report, Kind::kMapped);
  ASSERT_EQ(mapped.size(), 1u) << w.report.describe();
  EXPECT_EQ(mapped[0].mapping_name.rfind("/memfd:TC_WATCHED", 0), 0u);
  EXPECT_EQ(field(mapped[0], 3), 0u) << "armed before the writer's first store";
  auto stores = of_kind(w.report, Kind::kStore);
  ASSERT_EQ(stores.size(), 4u) << w.report.describe();
  for (std::size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(field(stores[i], i), i + 1) << "store " << i;
    EXPECT_EQ(field(stores[i], 3), 0u) << "store " << i << ": the last field is still unwritten";
  }
  EXPECT_EQ(field(stores[3], 3), 4u);
  EXPECT_NE(stores[0].tid, stores[0].pid) << "the stores come from the writer's second thread, armed when it started";
  // madvise before the first store, prctl after the last one.
  const auto madvise_at = position(w.report, [](const auto& e) { return e.kind == Kind::kSyscall && e.syscall == SYS_madvise; });
  const auto prctl_at = position(w.report, [](const auto& e) { return e.kind == Kind::kSyscall && e.syscall == SYS_prctl; });
  const auto first_store = position(w.report, [](const auto& e) { return e.kind == Kind::kStore; });
  const auto last_field = position(w.report, [](const auto& e) { return e.kind == Kind::kStore && field(e, 3) != 0; });
  EXPECT_LT(madvise_at, first_store);
  ASSERT_LT(prctl_at, w.report.events.size());
  EXPECT_GT(prctl_at, last_field);
  EXPECT_EQ(w.report.events[prctl_at].args[0], 0x53564d41u) << "PR_SET_VMA";
  // MADV_DONTFORK: the child has no such mapping.
  auto forks = of_kind(w.report, Kind::kFork);
  ASSERT_EQ(forks.size(), 1u) << w.report.describe();
  EXPECT_FALSE(forks[0].child_has_mapping) << forks[0].child_mapping_name;
  EXPECT_NE(w.output.find("done"), std::string::npos) << w.output;
}

TEST(MappingWatch, SeesAFieldWrittenBeforeTheOthersAndAnInheritedMapping) {
  auto w = watch("first", /*dontfork=*/false);
  EXPECT_EQ(w.ended, "exited with 0") << w.output;
  auto stores = of_kind(w.report, Kind::kStore);
  ASSERT_EQ(stores.size(), 4u) << w.report.describe();
  EXPECT_EQ(field(stores[0], 3), 4u);
  EXPECT_EQ(field(stores[0], 0), 0u) << "the last field came first, with the others still zero";
  auto forks = of_kind(w.report, Kind::kFork);
  ASSERT_EQ(forks.size(), 1u) << w.report.describe();
  EXPECT_TRUE(forks[0].child_has_mapping);
  EXPECT_EQ(forks[0].child_mapping_name.rfind("/memfd:TC_WATCHED", 0), 0u) << forks[0].child_mapping_name;
}

// The writer is not the launched process but its child (grandchild): a
// wrapper forks it and waits, without exec. The watch follows the fork, sees
// the mapping appear in the child and every store, and still lets the writer's
// own child go at its first stop. In a pid namespace of its own the writer is
// pid 1 there, and its pids in the report are the host's.
void expect_followed_into_child(const std::vector<std::string>& wrapper) {
  auto w = watch("last", /*dontfork=*/true, wrapper);
  EXPECT_EQ(w.ended, "exited with 0") << w.output;
  EXPECT_FALSE(w.report.error) << w.report.describe();
  auto mapped = of_kind(w.report, Kind::kMapped);
  ASSERT_EQ(mapped.size(), 1u) << w.report.describe();
  const pid_t writer = mapped[0].pid;
  EXPECT_GE(w.report.threads_armed, 1u) << w.report.describe();
  auto stores = of_kind(w.report, Kind::kStore);
  ASSERT_EQ(stores.size(), 4u) << w.report.describe();
  for (const auto& e : stores) EXPECT_EQ(e.pid, writer);
  auto forks = of_kind(w.report, Kind::kFork);
  ASSERT_GE(forks.size(), 2u) << "the wrapper's fork and the writer's: " << w.report.describe();
  EXPECT_NE(forks.front().pid, writer) << "the wrapper forked the writer";
  EXPECT_EQ(forks.front().child, writer);
  EXPECT_EQ(forks.front().address, 0u) << "no watched mapping in the wrapper";
  EXPECT_EQ(forks.back().pid, writer);
  EXPECT_EQ(forks.back().address, mapped[0].address);
  EXPECT_FALSE(forks.back().child_has_mapping) << forks.back().child_mapping_name;
  EXPECT_NE(w.output.find("done"), std::string::npos) << w.output;
}

TEST(MappingWatch, FollowsAWrapperThatForksTheWriterWithoutExec) {
  expect_followed_into_child({"/bin/sh", "-c", "\"$0\" \"$@\"; exit $?"});
}

TEST(MappingWatch, FollowsTheWriterIntoAPidNamespaceOfItsOwn) {
  if (::access("/usr/bin/unshare", X_OK) != 0) GTEST_SKIP() << "no /usr/bin/unshare";
  expect_followed_into_child({"/usr/bin/unshare", "--pid", "--fork"});
}

// posix_spawn (as system() and popen() start commands) runs the child in the
// parent's own address space until its exec: it shares the mapping, it does
// not inherit it, and the watch says so.
TEST(MappingWatch, TellsASpawnedChildInTheParentsMemoryFromAFork) {
  auto w = watch("last", /*dontfork=*/true, {}, {"spawn"});
  EXPECT_EQ(w.ended, "exited with 0") << w.output;
  auto forks = of_kind(w.report, Kind::kFork);
  ASSERT_EQ(forks.size(), 2u) << w.report.describe();
  EXPECT_FALSE(forks[0].child_shares_memory);
  EXPECT_TRUE(forks[1].child_shares_memory);
  EXPECT_FALSE(forks[1].child_has_mapping);
  EXPECT_NE(w.output.find("done"), std::string::npos) << w.output;
}

}  // namespace
}  // namespace tracecorr::watch

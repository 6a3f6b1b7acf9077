// The mapping watch follows a writer (tests/unit/data/mapping_writer_target.c)
// from before its exec: it sees the mapping appear, every store into its head
// in the order the writer made them, the system calls it was asked about in
// their place among the stores, and whether a forked child inherited the
// mapping. The writer must then run to its end, untraced.
#include <gtest/gtest.h>
#include <sys/syscall.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>

#include "tracecorr/conform/mapping_watch.hpp"
#include "tracecorr/conform/target.hpp"

namespace tracecorr::conform {
namespace {

using namespace std::chrono_literals;
using Kind = MappingWatchEvent::Kind;

const std::string kMappingWriterTarget = std::string(TRACECORR_TEST_DATA_DIR) + "/mapping_writer_target";

struct Watched {
  MappingWatchReport report;
  std::string output;
  std::string ended;
};

Watched watch(const std::string& order, bool dontfork) {
  std::unique_ptr<MappingWatch> mapping_watch;
  LaunchSpec spec;
  spec.argv = {kMappingWriterTarget, order, dontfork ? "1" : "0"};
  spec.before_exec = [&](pid_t pid) {
    MappingWatch::Settings settings;
    settings.is_watched_mapping = [](const std::string& name) { return name.rfind("/memfd:TC_WATCHED", 0) == 0; };
    settings.syscalls = {SYS_prctl, SYS_madvise};
    auto w = MappingWatch::follow_launch(pid, settings);
    if (w) mapping_watch = std::move(*w);
    else ADD_FAILURE() << w.error().message();
  };
  auto target = Target::launch(spec);
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

}  // namespace
}  // namespace tracecorr::conform

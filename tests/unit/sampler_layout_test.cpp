// Records as data: RecordLayout's length rules and bounds, read_record on live
// memory, and both samplers reading records whose header says how long they
// are (tests/unit/data/layout_record_target.c), through a TLS slot and through
// a memory area. The ptrace and BPF samplers must deliver the same Sample for
// the same thread state.
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "forked_child.hpp"
#include "sampler_support.hpp"
#include "test_record_layout.hpp"
#include "tracecorr/ids.hpp"
#include "tracecorr/memory.hpp"
#include "tracecorr/record_layout.hpp"
#include "tracecorr/sampler.hpp"
#if defined(TRACECORR_HAVE_BPF)
#include "sampler_loader.hpp"
#endif

namespace tracecorr {

// Failures show records as hex, not as gtest's dump of a vector's object.
void PrintTo(const RecordBytes& bytes, std::ostream* os) { *os << bytes.size() << " bytes " << to_hex(bytes.span()); }

namespace {

using namespace std::chrono_literals;

const std::string kLayoutRecordTarget = std::string(TRACECORR_TEST_DATA_DIR) + "/layout_record_target";

// The target's records: OTEP 4947's shape (28-byte header, valid 1 at 24,
// uint16 attribute length at 26), read at most 640 bytes.
RecordLayout size_field_layout() {
  RecordLayout l;
  l.name = "size-field test record";
  l.length = SizeField{26, 2, 28};
  l.max_size = 640;
  l.valid_offset = 24;
  l.valid_values = ByteValues::only({1});
  l.fields = {{"trace-id", 0, 16}, {"span-id", 16, 8}, {"valid", 24, 1}, {"trace-flags", 25, 1}, {"attrs-data-size", 26, 2}};
  return l;
}

RecordLayout area_layout() {
  RecordLayout l = size_field_layout();
  l.name = "size-field test record in an area";
  l.indirection = PointerInMemoryArea{8};
  return l;
}

std::vector<std::uint8_t> header(std::uint32_t size_value, std::size_t width, std::size_t at, std::size_t length) {
  std::vector<std::uint8_t> b(length, 0);
  std::memcpy(b.data() + at, &size_value, width);  // little-endian host: the low bytes
  return b;
}

// ---- RecordLayout ------------------------------------------------------------------------

TEST(RecordLayoutLength, FixedSizeIsTheSizeAndNeedsThatManyBytes) {
  const RecordLayout& fixed = tracecorr::test_support::test_record_layout();
  EXPECT_TRUE(fixed.check()) << fixed.check().error().message();
  EXPECT_EQ(fixed.fixed_part(), std::size_t{TC_TEST_RECORD_SIZE});
  std::vector<std::uint8_t> bytes(TC_TEST_RECORD_SIZE, 0);
  auto length = record_length(fixed, bytes);
  ASSERT_TRUE(length) << length.error().message();
  EXPECT_EQ(*length, std::size_t{TC_TEST_RECORD_SIZE});
  // More bytes than the record: still the record's size, never what follows.
  bytes.resize(TC_TEST_RECORD_SIZE + 20, 0xff);
  EXPECT_EQ(*record_length(fixed, bytes), std::size_t{TC_TEST_RECORD_SIZE});
  EXPECT_EQ(declared_length(fixed, bytes), std::uint64_t{TC_TEST_RECORD_SIZE});
  // Any non-zero valid byte is accepted, and only that byte decides.
  auto record = tracecorr::test_support::test_record(1, 0);
  EXPECT_FALSE(fixed.valid(record));
  for (std::uint8_t valid : {1, 2, 255}) {
    record[TC_TEST_RECORD_VALID_OFFSET] = valid;
    EXPECT_TRUE(fixed.valid(record)) << int{valid};
  }
  EXPECT_FALSE(fixed.valid(std::span(record).first(TC_TEST_RECORD_VALID_OFFSET)));  // ends before the valid byte
}

TEST(RecordLayoutLength, SizeFieldAddsItsValueToTheHeaderForEachWidth) {
  for (std::size_t width : {1u, 2u, 4u}) {
    SCOPED_TRACE("width " + std::to_string(width));
    RecordLayout l = size_field_layout();
    l.length = SizeField{4, width, 12};
    l.valid_offset = 0;
    auto length = record_length(l, header(100, width, 4, 12));
    ASSERT_TRUE(length) << length.error().message();
    EXPECT_EQ(*length, 112u);
    EXPECT_EQ(*record_length(l, header(0, width, 4, 12)), 12u);  // no attributes: the header alone
  }
  auto otep = record_length(size_field_layout(), header(612, 2, 26, 28));
  ASSERT_TRUE(otep);
  EXPECT_EQ(*otep, 640u);  // exactly at the bound is fine
}

TEST(RecordLayoutLength, OverTheBoundIsTooLongAndNamesTheFieldAndItsValue) {
  auto length = record_length(size_field_layout(), header(613, 2, 26, 28));
  ASSERT_FALSE(length);
  EXPECT_EQ(length.error().kind, ErrorKind::kTooLong);
  EXPECT_NE(length.error().what.find("613"), std::string::npos) << length.error().message();
  EXPECT_NE(length.error().what.find("641"), std::string::npos) << length.error().message();
  EXPECT_NE(length.error().where.find("attrs-data-size"), std::string::npos) << length.error().message();
  EXPECT_NE(length.error().where.find("offset 26"), std::string::npos) << length.error().message();
  // A 4-byte field's largest value: bounded, not wrapped.
  RecordLayout l = size_field_layout();
  l.length = SizeField{20, 4, 28};
  auto huge = record_length(l, header(0xffffffffu, 4, 20, 28));
  ASSERT_FALSE(huge);
  EXPECT_EQ(huge.error().kind, ErrorKind::kTooLong);
  EXPECT_EQ(declared_length(l, header(0xffffffffu, 4, 20, 28)), 28u + 0xffffffffull);
}

TEST(RecordLayoutLength, APrefixShorterThanTheFixedPartIsTruncated) {
  for (std::size_t have : {0u, 1u, 26u, 27u}) {
    auto length = record_length(size_field_layout(), std::vector<std::uint8_t>(have, 0));
    ASSERT_FALSE(length) << have;
    EXPECT_EQ(length.error().kind, ErrorKind::kTruncated);
    EXPECT_NE(length.error().what.find("28"), std::string::npos) << length.error().message();
  }
  auto fixed = record_length(tracecorr::test_support::test_record_layout(), std::vector<std::uint8_t>(TC_TEST_RECORD_SIZE - 1, 0));
  ASSERT_FALSE(fixed);
  EXPECT_EQ(fixed.error().kind, ErrorKind::kTruncated);
}

TEST(RecordLayoutCheck, RefusesLayoutsThatCannotBeReadAsDeclared) {
  auto refused = [](auto change, const char* needle) {
    RecordLayout l = size_field_layout();
    change(l);
    auto st = l.check();
    EXPECT_FALSE(st) << needle;
    if (!st) EXPECT_NE(st.error().message().find(needle), std::string::npos) << st.error().message();
  };
  refused([](RecordLayout& l) { l.max_size = kRecordMaxBytes + 1; }, "max_size");
  refused([](RecordLayout& l) { l.length = SizeField{26, 3, 28}; }, "width 3");
  refused([](RecordLayout& l) { l.length = SizeField{27, 2, 28}; }, "size field");
  refused([](RecordLayout& l) { l.valid_offset = 28; }, "valid byte");
  refused([](RecordLayout& l) { l.presence_offset = 40; }, "presence byte");
  refused([](RecordLayout& l) { l.valid_values = ByteValues::only({}); }, "no value");
  refused([](RecordLayout& l) { l.fields.push_back({"attrs", 28, 700}); }, "attrs");
  refused([](RecordLayout& l) { l.length = FixedSize{641}; }, "fixed part");
  EXPECT_TRUE(size_field_layout().check());
  EXPECT_TRUE(area_layout().check());
}

TEST(RecordBytesBound, NeverHoldsMoreThanTheBound) {
  std::vector<std::uint8_t> big(kRecordMaxBytes * 3, 0x5a);
  EXPECT_EQ(RecordBytes(big).size(), kRecordMaxBytes);
  EXPECT_EQ(RecordBytes(std::span(big).first(10)).size(), 10u);
  EXPECT_EQ(ByteValues::only({1}).describe(), "1");
  EXPECT_EQ(ByteValues::any_nonzero().describe(), "1..255");
  EXPECT_EQ(ByteValues::only({1, 2, 3, 7}).describe(), "1..3, 7");
  auto words = ByteValues::only({0, 65, 255}).words();
  EXPECT_EQ(words[0], 1u);
  EXPECT_EQ(words[1], 2u);
  EXPECT_EQ(words[3], std::uint64_t{1} << 63);
}

// read_record on this process's own memory, through the same ProcessMemory samplers use.
TEST(ReadRecord, ReadsTheDeclaredLengthAndCutsAtTheBound) {
  LiveProcessMemory self(::getpid());
  const RecordLayout layout = size_field_layout();
  std::vector<std::uint8_t> record = header(20, 2, 26, 28 + 20);
  for (std::size_t i = 28; i < record.size(); ++i) record[i] = static_cast<std::uint8_t>(i);
  auto read = read_record(self, layout, reinterpret_cast<std::uintptr_t>(record.data()));
  ASSERT_TRUE(read) << read.error().message();
  EXPECT_EQ(read->bytes, RecordBytes(record));
  EXPECT_FALSE(read->truncated());

  std::vector<std::uint8_t> oversized = header(2000, 2, 26, 28 + 2000);
  auto cut = read_record(self, layout, reinterpret_cast<std::uintptr_t>(oversized.data()));
  ASSERT_TRUE(cut) << cut.error().message();
  EXPECT_TRUE(cut->truncated());
  EXPECT_EQ(cut->declared_length, 2028u);
  EXPECT_EQ(cut->bytes, RecordBytes(std::span(oversized).first(640)));
}

TEST(ReadRecord, ARecordDeclaringBytesPastItsMappingIsUnmappedNamingTheLayout) {
  const long page = sysconf(_SC_PAGESIZE);
  auto* pages = static_cast<std::uint8_t*>(
      mmap(nullptr, 2 * static_cast<std::size_t>(page), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(pages, MAP_FAILED);
  munmap(pages + page, static_cast<std::size_t>(page));
  std::uint8_t* at = pages + page - 28;
  auto h = header(100, 2, 26, 28);
  std::memcpy(at, h.data(), h.size());
  LiveProcessMemory self(::getpid());
  auto read = read_record(self, size_field_layout(), reinterpret_cast<std::uintptr_t>(at));
  munmap(pages, static_cast<std::size_t>(page));
  ASSERT_FALSE(read);
  EXPECT_EQ(read.error().kind, ErrorKind::kUnmapped);
  EXPECT_NE(read.error().message().find("size-field test record"), std::string::npos) << read.error().message();
  EXPECT_NE(read.error().message().find("128 bytes"), std::string::npos) << read.error().message();
}

// ---- samplers against layout_record_target -------------------------------------------------------

struct ExpectedThread {
  std::string kind;
  std::uint64_t record = 0;
  std::optional<RecordBytes> bytes;  // nullopt: the reader can deliver none
  std::uint64_t declared = 0;
};

RecordBytes from_hex_text(const std::string& hex) {
  std::vector<std::uint8_t> out(hex.size() / 2);
  EXPECT_TRUE(from_hex(hex, out)) << hex;
  return RecordBytes(out);
}

// The target, launched with its stdout on a pipe; parses what it publishes.
class LayoutTarget {
 public:
  LayoutTarget()
      : child_([](test::ForkedChild::Pipes pipes) {
          dup2(pipes.report, STDOUT_FILENO);
          execl(kLayoutRecordTarget.c_str(), kLayoutRecordTarget.c_str(), static_cast<char*>(nullptr));
          _exit(127);
        }) {
    std::string text;
    for (auto give_up = std::chrono::steady_clock::now() + 10s;
         text.find("ready\n") == std::string::npos && std::chrono::steady_clock::now() < give_up;) {
      pollfd p{child_.report_fd(), POLLIN, 0};
      if (poll(&p, 1, 100) <= 0) continue;
      char buf[4096];
      ssize_t n = read(child_.report_fd(), buf, sizeof buf);
      if (n <= 0) break;
      text.append(buf, static_cast<std::size_t>(n));
    }
    std::istringstream lines(text);
    for (std::string line; std::getline(lines, line);) {
      std::istringstream in(line);
      std::string what;
      in >> what;
      if (what == "tls_offset") {
        in >> tls_offset;
      } else if (what == "area") {
        std::string address, record, length, hex;
        in >> address >> record >> length >> hex;
        area_address = std::stoull(address, nullptr, 16);
        area_record = from_hex_text(hex);
      } else if (what == "thread") {
        pid_t tid = 0;
        ExpectedThread t;
        std::string record, length, declared, hex;
        in >> tid >> t.kind >> record >> length >> declared >> hex;
        t.record = std::stoull(record, nullptr, 16);
        t.declared = std::stoull(declared);
        if (hex != "-") t.bytes = from_hex_text(hex);
        threads[tid] = t;
      } else if (what == "ready") {
        ready = true;
      }
    }
  }
  pid_t pid() const { return child_.pid(); }

  bool ready = false;
  std::int64_t tls_offset = 0;
  std::uint64_t area_address = 0;
  RecordBytes area_record;
  std::map<pid_t, ExpectedThread> threads;

 private:
  test::ForkedChild child_;  // killed and reaped with the target
};

// Polls until every publishing thread was sampled (bounded), keeping each thread's last sample.
std::map<pid_t, Sample> sample_each_thread(Sampler& sampler, const LayoutTarget& target) {
  std::map<pid_t, Sample> seen;
  for (auto give_up = std::chrono::steady_clock::now() + 15s;
       seen.size() < target.threads.size() && std::chrono::steady_clock::now() < give_up;) {
    auto n = sampler.poll([&](const Sample& s) { if (target.threads.count(s.tid)) seen[s.tid] = s; }, 100ms);
    EXPECT_TRUE(n) << n.error().message();
    if (!n) break;
  }
  return seen;
}

class LayoutSampling : public testing::TestWithParam<std::string> {};

TEST_P(LayoutSampling, ReadsSizeFieldRecordsThroughTheTlsSlot) {
  std::string why_not;
  auto sampler = test::make_test_sampler(GetParam(), why_not);
  if (!sampler) GTEST_SKIP() << why_not;
  LayoutTarget target;
  ASSERT_TRUE(target.ready) << "the target did not start: " << kLayoutRecordTarget;
  ASSERT_EQ(target.threads.size(), 6u);
  ASSERT_TRUE(sampler->track(target.pid(), size_field_layout(), PointerSite::tls_offset(target.tls_offset)));

  auto seen = sample_each_thread(*sampler, target);
  ASSERT_EQ(seen.size(), target.threads.size()) << "not every thread was sampled";
  for (const auto& [tid, expected] : target.threads) {
    const Sample& s = seen.at(tid);
    SCOPED_TRACE(expected.kind + " (tid " + std::to_string(tid) + ")");
    if (expected.kind == "none") {
      EXPECT_EQ(s.error, SampleError::RecordPointerNull);
      EXPECT_FALSE(s.record);
      continue;
    }
    EXPECT_EQ(s.record_pointer, expected.record);
    if (expected.kind == "unmapped") {
      EXPECT_EQ(s.error, SampleError::RecordReadFailed);
      EXPECT_FALSE(s.record);
      continue;
    }
    ASSERT_TRUE(s.record) << to_string(s.error);
    ASSERT_TRUE(expected.bytes);
    EXPECT_EQ(*s.record, *expected.bytes);
    EXPECT_EQ(s.record_declared_length, expected.declared);
    EXPECT_EQ(s.error, expected.kind == "oversized" ? SampleError::RecordTruncated : SampleError::Ok);
  }
  EXPECT_EQ(seen.at(target.threads.begin()->first).pid, target.pid());
  auto c = sampler->counters();
  EXPECT_GE(c.record_truncated, 1u);
  EXPECT_GE(c.valid_zero, 1u);  // the "invalid" thread's valid byte 2 is not accepted
  EXPECT_GE(c.record_read_failed, 1u);
  EXPECT_EQ(c.trace_absent, 0u);  // the layout names no presence byte
  EXPECT_EQ(c.lost, 0u);
}

TEST_P(LayoutSampling, ReadsTheRecordThroughAMemoryArea) {
  std::string why_not;
  auto sampler = test::make_test_sampler(GetParam(), why_not);
  if (!sampler) GTEST_SKIP() << why_not;
  LayoutTarget target;
  ASSERT_TRUE(target.ready) << "the target did not start: " << kLayoutRecordTarget;
  ASSERT_TRUE(sampler->track(target.pid(), area_layout(), PointerSite::area(target.area_address)));
  auto seen = sample_each_thread(*sampler, target);
  ASSERT_EQ(seen.size(), target.threads.size());
  for (const auto& [tid, s] : seen) {
    SCOPED_TRACE("tid " + std::to_string(tid));
    EXPECT_EQ(s.error, SampleError::Ok) << to_string(s.error);
    ASSERT_TRUE(s.record);
    EXPECT_EQ(*s.record, target.area_record);  // one record per process, whatever the thread
  }
}

TEST_P(LayoutSampling, RefusesALayoutThatFailsItsCheck) {
  std::string why_not;
  auto sampler = test::make_test_sampler(GetParam(), why_not);
  if (!sampler) GTEST_SKIP() << why_not;
  RecordLayout bad = size_field_layout();
  bad.length = SizeField{26, 3, 28};
  auto st = sampler->track(::getpid(), bad, PointerSite::tls_offset(0));
  ASSERT_FALSE(st);
  EXPECT_NE(st.error().message().find("width 3"), std::string::npos) << st.error().message();
}

// A process that publishes two protocols: tracked with two layouts at once
// (slot 0 through its threads' TLS slot, slot 1 through its memory area),
// every interrupt of a thread gives one sample per layout, each carrying its
// slot, the thread's state and stack the same in both.
TEST_P(LayoutSampling, ReadsEveryLayoutOfAProcessTrackedInTwoSlots) {
  std::string why_not;
  auto sampler = test::make_test_sampler(GetParam(), why_not);
  if (!sampler) GTEST_SKIP() << why_not;
  LayoutTarget target;
  ASSERT_TRUE(target.ready) << "the target did not start: " << kLayoutRecordTarget;
  static_assert(kLayoutsPerProcess == 2);
  ASSERT_TRUE(sampler->track(target.pid(), 0, size_field_layout(), PointerSite::tls_offset(target.tls_offset)));
  ASSERT_TRUE(sampler->track(target.pid(), 1, area_layout(), PointerSite::area(target.area_address)));
  EXPECT_FALSE(sampler->track(target.pid(), kLayoutsPerProcess, area_layout(), PointerSite::area(target.area_address)))
      << "a slot past kLayoutsPerProcess";

  std::map<std::pair<pid_t, LayoutSlot>, Sample> seen;
  std::map<std::pair<pid_t, std::uint64_t>, std::vector<LayoutSlot>> by_interrupt;  // (tid, time) -> slots
  for (auto give_up = std::chrono::steady_clock::now() + 15s;
       seen.size() < 2 * target.threads.size() && std::chrono::steady_clock::now() < give_up;) {
    auto n = sampler->poll(
        [&](const Sample& s) {
          if (!target.threads.count(s.tid)) return;
          seen[{s.tid, s.slot}] = s;
          by_interrupt[{s.tid, s.time_ns}].push_back(s.slot);
        },
        100ms);
    ASSERT_TRUE(n) << n.error().message();
  }
  ASSERT_EQ(seen.size(), 2 * target.threads.size()) << "not every thread was sampled in both slots";
  for (const auto& [tid, expected] : target.threads) {
    SCOPED_TRACE(expected.kind + " (tid " + std::to_string(tid) + ")");
    const Sample& by_tls = seen.at({tid, 0});
    const Sample& by_area = seen.at({tid, 1});
    EXPECT_EQ(by_tls.slot, 0u);
    EXPECT_EQ(by_area.slot, 1u);
    if (expected.kind == "none")
      EXPECT_EQ(by_tls.error, SampleError::RecordPointerNull);
    else
      EXPECT_EQ(by_tls.record_pointer, expected.record);
    if (expected.bytes && expected.kind != "oversized") {
      ASSERT_TRUE(by_tls.record) << to_string(by_tls.error);
      EXPECT_EQ(*by_tls.record, *expected.bytes);
    }
    EXPECT_EQ(by_area.error, SampleError::Ok) << to_string(by_area.error);
    ASSERT_TRUE(by_area.record);
    EXPECT_EQ(*by_area.record, target.area_record) << "slot 1's layout, not slot 0's";
  }
  // One interrupt, one sample per layout: both slots at the same moment.
  std::size_t paired = 0;
  for (const auto& [at, slots] : by_interrupt) paired += slots.size() == 2 && slots[0] == 0 && slots[1] == 1;
  EXPECT_GE(paired, target.threads.size());
  sampler->stop_sampling();  // the BPF counters settle
  const auto c = sampler->counters();
  EXPECT_EQ(c.lost, 0u);
  EXPECT_EQ(c.emitted, 2 * c.samples) << "one record per interrupt and layout";

  // Untracking slot 0 keeps the process, its other layout and its context header.
  ASSERT_TRUE(sampler->untrack(target.pid(), 0));
  EXPECT_TRUE(sampler->track_process_context(target.pid(), std::nullopt)) << "still tracked in slot 1";
  ASSERT_TRUE(sampler->untrack(target.pid(), 1));
  EXPECT_FALSE(sampler->track_process_context(target.pid(), std::nullopt)) << "forgotten with its last slot";
}

INSTANTIATE_TEST_SUITE_P(Samplers, LayoutSampling, testing::Values("ptrace", "bpf"),
                         [](const auto& info) { return info.param; });

#if defined(TRACECORR_HAVE_BPF)
// What the loader hands the program, and how it reads the ring back.
TEST(BpfTrackedEntry, CarriesTheLayoutAsData) {
  auto fixed = bpf::tracked_entry(tracecorr::test_support::test_record_layout(), PointerSite::tls_offset(-160), TC_PROCESS_F_NO_STACK);
  ASSERT_TRUE(fixed) << fixed.error().message();
  EXPECT_EQ(fixed->indirection, TC_POINTER_IN_TLS_SLOT);
  EXPECT_EQ(static_cast<std::int64_t>(fixed->pointer_site), -160);
  EXPECT_EQ(fixed->fixed_size, TC_TEST_RECORD_SIZE);
  EXPECT_EQ(fixed->size_field_width, 0);
  EXPECT_EQ(fixed->max_size, TC_TEST_RECORD_SIZE);
  EXPECT_EQ(fixed->valid_offset, TC_TEST_RECORD_VALID_OFFSET);
  EXPECT_EQ(fixed->presence_offset, TC_TEST_RECORD_PRESENT_OFFSET);
  EXPECT_EQ(fixed->valid_values[0], ~std::uint64_t{1});  // any non-zero
  EXPECT_EQ(fixed->valid_values[3], ~std::uint64_t{0});
  EXPECT_EQ(fixed->flags, TC_PROCESS_F_NO_STACK | TC_PROCESS_F_TRACKED);  // the slot holds a layout

  auto area = bpf::tracked_entry(area_layout(), PointerSite::area(0x7f0000001000), 0);
  ASSERT_TRUE(area);
  EXPECT_EQ(area->indirection, TC_POINTER_IN_MEMORY_AREA);
  EXPECT_EQ(area->pointer_site, 0x7f0000001008u);  // the area's address + the pointer's offset in it
  EXPECT_EQ(area->size_field_width, 2);
  EXPECT_EQ(area->size_field_offset, 26);
  EXPECT_EQ(area->fixed_size, 28);
  EXPECT_EQ(area->presence_offset, TC_NO_PRESENCE_BYTE);
  EXPECT_EQ(area->valid_values[0], 2u);  // only 1

  // A variable in dynamic TLS: the module and its C library's DTV layout (glibc x86-64's here).
  const DtvModule module{3, 7, DtvLayout{8, 16, -1, 0, ~std::uint64_t{0}}};
  auto dynamic = bpf::tracked_entry(tracecorr::test_support::test_record_layout(), PointerSite::module_block(module, 16), 0);
  ASSERT_TRUE(dynamic) << dynamic.error().message();
  EXPECT_EQ(dynamic->indirection, TC_POINTER_IN_DTV_BLOCK);
  EXPECT_EQ(dynamic->pointer_site, 16u);  // from the module's block
  EXPECT_EQ(dynamic->dtv_module, 3u);
  EXPECT_EQ(dynamic->dtv_generation, 7u);
  EXPECT_EQ(dynamic->dtv_at, 8);
  EXPECT_EQ(dynamic->dtv_entry_size, 16);
  EXPECT_EQ(dynamic->dtv_count_entry, -1);
  EXPECT_EQ(dynamic->dtv_generation_entry, 0);
  EXPECT_EQ(dynamic->dtv_unallocated, ~std::uint64_t{0});
  // musl keeps no generation in its DTV: the module's is not checked.
  const DtvModule musl{2, 5, DtvLayout{-8, 8, 0, std::nullopt, std::nullopt}};
  auto no_generation = bpf::tracked_entry(tracecorr::test_support::test_record_layout(), PointerSite::module_block(musl, 0), 0);
  ASSERT_TRUE(no_generation) << no_generation.error().message();
  EXPECT_EQ(no_generation->dtv_generation, 0u);
  EXPECT_EQ(no_generation->dtv_unallocated, 0u);
  EXPECT_EQ(no_generation->dtv_at, -8);
  // A module id no C library gives is refused before the program sees it.
  const DtvModule bogus{kMaxTlsModules + 1, std::nullopt, DtvLayout{8, 8, 0, std::nullopt, std::nullopt}};
  auto refused = bpf::tracked_entry(tracecorr::test_support::test_record_layout(), PointerSite::module_block(bogus, 0), 0);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().kind, ErrorKind::kMalformed);
}

// A walk's shape as data (RecordWalk::table_walk_shape): the struct's words and
// the map's bounds, refused when the program could not follow them.
class ShapedWalk final : public RecordWalk {
 public:
  explicit ShapedWalk(std::optional<TableWalkShape> shape) : shape_(shape) {}
  std::string name() const override { return "the test's walk"; }
  Expected<std::uint64_t> record_address(const ProcessMemory&, std::uint64_t) const override { return std::uint64_t{0}; }
  std::optional<TableWalkShape> table_walk_shape() const override { return shape_; }

 private:
  std::optional<TableWalkShape> shape_;
};

RecordLayout walked_layout(std::optional<TableWalkShape> shape) {
  RecordLayout layout = tracecorr::test_support::test_record_layout();
  layout.indirection = WalkFromTlsSlot{std::make_shared<const ShapedWalk>(shape)};
  return layout;
}

TEST(BpfTrackedEntry, CarriesAWalksShapeAsData) {
  TableWalkShape shape;
  shape.record_offset_at = 21;
  shape.frame_table_offset = 40;
  shape.chain_cap = 5;
  auto walked = bpf::tracked_entry(walked_layout(shape), PointerSite::tls_offset(-632), 0);
  ASSERT_TRUE(walked) << walked.error().message();
  EXPECT_EQ(walked->indirection, TC_POINTER_IN_TLS_SLOT);  // the struct is where a pointer would be
  EXPECT_EQ(walked->flags, TC_PROCESS_F_TRACKED | TC_PROCESS_F_TABLE_WALK);
  EXPECT_EQ(walked->walk_record_offset_at, 21);
  EXPECT_EQ(walked->walk_frame_table_offset, 40);
  EXPECT_EQ(walked->walk_chain_cap, 5);
  EXPECT_EQ(walked->walk_max_buckets, 65536u);
  EXPECT_EQ(walked->walk_undefined_at, 24);

  // No shape: no walk in the program, and the refusal names the reader that has one.
  auto unshaped = bpf::tracked_entry(walked_layout(std::nullopt), PointerSite::tls_offset(-632), 0);
  ASSERT_FALSE(unshaped);
  EXPECT_EQ(unshaped.error().kind, ErrorKind::kUnsupported);
  EXPECT_NE(unshaped.error().message().find("--reader ptrace"), std::string::npos) << unshaped.error().message();
  // Shapes the program cannot follow.
  for (auto spoil : std::vector<void (*)(TableWalkShape&)>{
           [](TableWalkShape& s) { s.undefined_at = 25; },   // its word ends past the 32-byte struct
           [](TableWalkShape& s) { s.chain_cap = TC_TABLE_WALK_MAX_CHAIN + 1; },
           [](TableWalkShape& s) { s.chain_cap = 0; },
           [](TableWalkShape& s) { s.max_buckets = 1000; },  // no power of two
       }) {
    TableWalkShape bad;
    spoil(bad);
    auto refused = bpf::tracked_entry(walked_layout(bad), PointerSite::tls_offset(-632), 0);
    ASSERT_FALSE(refused);
    EXPECT_EQ(refused.error().kind, ErrorKind::kUnsupported);
  }
}

TEST(BpfRingRecord, LengthsAreCheckedAgainstTheRecordsSize) {
  std::vector<std::uint8_t> ring(sizeof(tc_sample) + 40 + 16, 0);
  tc_sample h{};
  h.record_length = 37;
  h.stack_bytes = 16;
  std::memcpy(ring.data(), &h, sizeof h);
  ring[sizeof(tc_sample)] = 0xab;
  const std::uint64_t frame = 0x401000;
  std::memcpy(ring.data() + sizeof(tc_sample) + 40 + 8, &frame, 8);
  auto v = bpf::parse_sample(ring);
  ASSERT_TRUE(v);
  EXPECT_EQ(v->record.size(), 37u);
  EXPECT_EQ(v->record[0], 0xab);
  ASSERT_EQ(v->frame_count(), 2u);
  EXPECT_EQ(v->frame(1), frame);
  // A records-only sample: no stack area at all.
  h.stack_bytes = 0;
  std::memcpy(ring.data(), &h, sizeof h);
  EXPECT_TRUE(bpf::parse_sample(std::span(ring).first(sizeof(tc_sample) + 40)));
  // Lengths the bytes do not hold are refused, never read past.
  h.stack_bytes = 24;
  std::memcpy(ring.data(), &h, sizeof h);
  EXPECT_FALSE(bpf::parse_sample(ring));
  h.stack_bytes = 12;  // not whole frames
  std::memcpy(ring.data(), &h, sizeof h);
  EXPECT_FALSE(bpf::parse_sample(ring));
  h.stack_bytes = 0;
  h.record_length = 41;
  std::memcpy(ring.data(), &h, sizeof h);
  EXPECT_FALSE(bpf::parse_sample(std::span(ring).first(sizeof(tc_sample) + 40)));
  EXPECT_FALSE(bpf::parse_sample(std::span(ring).first(sizeof(tc_sample) - 1)));
}
#endif

}  // namespace
}  // namespace tracecorr

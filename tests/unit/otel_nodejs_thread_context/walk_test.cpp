// The walk on V8-shaped memory built in the test: a conforming graph (one
// bucket hop and several), every "no context" state, and hostile shapes, each
// failing at its named step without reading past its bounds.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <random>
#include <vector>

#include "otel_nodejs_thread_context/checks.hpp"
#include "otel_nodejs_thread_context/record.hpp"
#include "otel_nodejs_thread_context/registry.hpp"
#include "otel_nodejs_thread_context/walk.hpp"

namespace tracecorr::otel_nodejs_thread_context {
namespace {

// Target memory as words at addresses; anything not written is unmapped.
class FakeMemory final : public ProcessMemory {
 public:
  Status read(std::uint64_t addr, std::span<std::uint8_t> out) const override {
    ++reads;
    for (std::size_t i = 0; i < out.size(); ++i) {
      auto it = bytes.find(addr + i);
      if (it == bytes.end()) return make_error(ErrorKind::kUnmapped, "unmapped", hex_address(addr + i));
      out[i] = it->second;
    }
    return Ok{};
  }
  void word(std::uint64_t addr, std::uint64_t v) { put(addr, &v, 8); }
  void put(std::uint64_t addr, const void* p, std::size_t n) {
    for (std::size_t i = 0; i < n; ++i) bytes[addr + i] = static_cast<const std::uint8_t*>(p)[i];
  }
  std::map<std::uint64_t, std::uint8_t> bytes;
  mutable std::size_t reads = 0;
};

constexpr std::uint64_t smi(std::int64_t v) { return static_cast<std::uint64_t>(v) << 32; }
constexpr std::uint64_t tagged(std::uint64_t addr) { return addr | 1; }

constexpr std::uint64_t kCped = 0x10000, kHandle = 0x10100, kUndefined = 0x20000, kAls = 0x30000;
constexpr std::uint64_t kFrame = 0x40000, kTable = 0x50000, kWrapper = 0x60000, kRecord = 0x70000;

// A frame holding `entries` (key, value) in a table of `buckets` buckets,
// each entry in the bucket its key's hash names (key -> hash from `hash_of`).
struct Graph {
  FakeMemory m;
  DiscoveryStruct d;
  std::int64_t buckets = 2;

  Graph() {
    d.cped_slot = kCped;
    d.als_handle = kHandle;
    d.als_identity_hash = 5;
    d.record_slot_offset = 32;
    d.undefined_addr = tagged(kUndefined);
    m.word(kCped, tagged(kFrame));
    m.word(kHandle, tagged(kAls));
    m.word(kFrame + spec::kV8JsMapTableOffset, tagged(kTable));
    m.word(kWrapper + 32, kRecord);
  }
  std::uint64_t entry_at(std::int64_t i) const { return kTable + 40 + 8 * buckets + 24 * i; }
  // Builds the table: entries in order, chained per bucket as V8 does (a new
  // entry becomes the bucket's head, chaining to the old head).
  void table(const std::vector<std::pair<std::uint64_t, std::uint64_t>>& entries, const std::vector<std::int32_t>& hashes) {
    m.word(kTable + 16, smi(static_cast<std::int64_t>(entries.size())));
    m.word(kTable + 24, smi(0));
    m.word(kTable + 32, smi(buckets));
    std::vector<std::int64_t> head(buckets, -1);
    for (std::size_t i = 0; i < entries.size(); ++i) {
      auto b = static_cast<std::uint32_t>(hashes[i]) & (buckets - 1);
      m.word(entry_at(i), entries[i].first);
      m.word(entry_at(i) + 8, entries[i].second);
      m.word(entry_at(i) + 16, smi(head[b]));
      head[b] = static_cast<std::int64_t>(i);
    }
    for (std::int64_t b = 0; b < buckets; ++b) m.word(kTable + 40 + 8 * b, smi(head[b]));
  }
};

TEST(Walk, ReachesTheRecordThroughOneBucket) {
  Graph g;
  g.table({{tagged(kAls), tagged(kWrapper)}}, {5});
  auto t = walk(g.m, g.d);
  ASSERT_EQ(t.end, WalkEnd::Record) << t.error;
  EXPECT_EQ(*t.record_pointer, kRecord);
  EXPECT_EQ(*t.buckets, 2);
  EXPECT_EQ(*t.bucket_index, 1u);
  EXPECT_EQ(t.hops.size(), 1u);
  EXPECT_EQ(g.m.reads, 7u);  // frame, table, counts, key, bucket, one entry, record slot
}

TEST(Walk, FollowsTheChainPastOtherKeys) {
  Graph g;
  g.buckets = 4;
  // Three decoys hashed to the same bucket as ours, inserted after it: ours is the chain's tail.
  g.table({{tagged(kAls), tagged(kWrapper)}, {tagged(0x31000), tagged(0x61000)}, {tagged(0x32000), tagged(0x62000)},
           {tagged(0x33000), tagged(0x63000)}},
          {5, 9, 13, 1});
  auto t = walk(g.m, g.d);
  ASSERT_EQ(t.end, WalkEnd::Record) << t.error;
  EXPECT_EQ(t.hops.size(), 4u);
  EXPECT_EQ(t.hops.back().index, 0);
}

TEST(Walk, EveryNoContextState) {
  {
    Graph g;
    g.d.cped_slot = 0;
    EXPECT_EQ(walk(g.m, g.d).end, WalkEnd::GateClosed);
    EXPECT_EQ(g.m.reads, 0u);
  }
  {
    Graph g;
    g.m.word(kCped, tagged(kUndefined));
    EXPECT_EQ(walk(g.m, g.d).end, WalkEnd::NoFrame);
  }
  {
    Graph g;
    g.table({{tagged(0x31000), tagged(0x61000)}}, {5});  // another ALS only
    EXPECT_EQ(walk(g.m, g.d).end, WalkEnd::NotInFrame);
  }
  {
    Graph g;
    g.table({{tagged(0x31000), tagged(0x61000)}}, {4});  // our bucket is empty
    auto t = walk(g.m, g.d);
    EXPECT_EQ(t.end, WalkEnd::NotInFrame);
    EXPECT_TRUE(t.hops.empty());
  }
  {
    Graph g;
    g.table({{tagged(kAls), tagged(kUndefined)}}, {5});
    EXPECT_EQ(walk(g.m, g.d).end, WalkEnd::Detached);
  }
  {
    Graph g;
    g.table({{tagged(kAls), tagged(kWrapper)}}, {5});
    g.m.word(kWrapper + 32, 0);
    EXPECT_EQ(walk(g.m, g.d).end, WalkEnd::NullRecord);
  }
  {
    Graph g;
    g.table({{tagged(kAls), tagged(kWrapper)}}, {5});
    g.m.word(kTable + 16, tagged(0x51000));  // a rehash's forwarding pointer
    EXPECT_EQ(walk(g.m, g.d).end, WalkEnd::Forwarded);
  }
}

WalkTrace failed(Graph& g, WalkStep step) {
  auto t = walk(g.m, g.d);
  EXPECT_EQ(t.end, WalkEnd::Failed);
  EXPECT_EQ(t.failed_step, step) << t.error;
  EXPECT_FALSE(t.record_pointer);
  return t;
}

TEST(Walk, HostileShapesFailAtTheirStep) {
  Graph base;
  base.table({{tagged(kAls), tagged(kWrapper)}}, {5});
  {
    Graph g = base;
    g.d.record_slot_offset = 0;
    failed(g, WalkStep::Gate);
    g.d.record_slot_offset = 33;
    failed(g, WalkStep::Gate);
  }
  {
    Graph g = base;
    g.d.cped_slot = 0xdead0000;  // unmapped
    failed(g, WalkStep::Frame);
    g = base;
    g.m.word(kCped, kFrame);  // a frame without the heap tag
    failed(g, WalkStep::Frame);
    g = base;
    g.m.word(kCped, smi(7));
    failed(g, WalkStep::Frame);
  }
  {
    Graph g = base;
    g.m.word(kFrame + 24, smi(3));  // the table is a Smi
    failed(g, WalkStep::Table);
  }
  {
    Graph g = base;
    g.m.word(kTable + 32, smi(3));  // not a power of two
    EXPECT_NE(failed(g, WalkStep::Counts).error.find("power of two"), std::string::npos);
    g.m.word(kTable + 32, smi(1 << 30));  // huge
    failed(g, WalkStep::Counts);
    g.m.word(kTable + 32, smi(0));
    failed(g, WalkStep::Counts);
    g.m.word(kTable + 32, smi(-2));
    failed(g, WalkStep::Counts);
  }
  {
    Graph g = base;
    g.m.word(kTable + 16, smi(5));  // 5 elements in 2 buckets: over the capacity of 4
    failed(g, WalkStep::Counts);
    g = base;
    g.m.word(kTable + 24, 0x1234);  // deleted count not a Smi
    failed(g, WalkStep::Counts);
  }
  {
    Graph g = base;
    g.m.word(kHandle, kAls);  // the key without its tag
    failed(g, WalkStep::Key);
    g = base;
    g.d.als_handle = 0;
    failed(g, WalkStep::Key);
  }
  {
    Graph g = base;
    g.m.word(kTable + 40 + 8, smi(1));  // head index 1 of 1 used entry
    failed(g, WalkStep::Bucket);
    g.m.word(kTable + 40 + 8, tagged(0x1000));
    failed(g, WalkStep::Bucket);
  }
  {
    Graph g = base;
    g.table({{tagged(kAls), 0x123456}}, {5});  // the value is not a heap pointer
    failed(g, WalkStep::Wrapper);
  }
  {
    Graph g = base;
    g.table({{tagged(kAls), tagged(0x99000)}}, {5});  // the wrapper is unmapped
    failed(g, WalkStep::Record);
  }
}

TEST(Walk, ACycleOrALongChainStopsAtTheCap) {
  Graph g;
  g.buckets = 8;
  std::vector<std::pair<std::uint64_t, std::uint64_t>> decoys;
  std::vector<std::int32_t> hashes;
  for (int i = 0; i < 16; ++i) {
    decoys.push_back({tagged(0x80000 + 0x100 * i), tagged(0x61000)});
    hashes.push_back(5);
  }
  g.table(decoys, hashes);
  // A cycle: the chain runs 15, 14, 13, 12, then entry 12 links back to 14.
  g.m.word(g.entry_at(12) + 16, smi(14));
  const std::size_t before = g.m.reads;
  auto t = failed(g, WalkStep::Chain);
  EXPECT_NE(t.error.find("cycle"), std::string::npos);
  EXPECT_LE(g.m.reads - before, 5 + spec::kV8ChainCap);

  Graph long_chain;
  long_chain.buckets = 16;
  decoys.clear();
  hashes.clear();
  for (int i = 0; i < 32; ++i) {
    decoys.push_back({tagged(0x80000 + 0x100 * i), tagged(0x61000)});
    hashes.push_back(5);
  }
  decoys.front() = {tagged(kAls), tagged(kWrapper)};  // ours at the far end
  long_chain.table(decoys, hashes);
  auto lt = failed(long_chain, WalkStep::Chain);
  EXPECT_EQ(lt.hops.size(), spec::kV8ChainCap);
  EXPECT_NE(lt.error.find("past"), std::string::npos);
}

TEST(Walk, AChainIndexOutsideTheTableFails) {
  Graph g;
  g.table({{tagged(0x31000), tagged(0x61000)}, {tagged(kAls), tagged(kWrapper)}}, {1, 3});
  g.m.word(g.entry_at(1) + 16, smi(9));  // the head (entry 1, a decoy ... ) chains to 9
  g.m.word(g.entry_at(1), tagged(0x32000));
  failed(g, WalkStep::Chain);
}

TEST(Walk, AWrongHashMissesAndTheScanFindsTheKey) {
  Graph g;
  g.buckets = 4;
  g.table({{tagged(kAls), tagged(kWrapper)}}, {6});  // stored under hash 6 (bucket 2)
  auto t = walk(g.m, g.d);                            // published hash 5 (bucket 1)
  ASSERT_EQ(t.end, WalkEnd::NotInFrame);
  auto misplaced = find_key_by_scan(g.m, t);
  ASSERT_TRUE(misplaced);
  EXPECT_EQ(misplaced->index, 0);
  ThreadLook look{42, t, misplaced, std::nullopt, std::nullopt, nullptr};
  auto findings = check_thread(look);
  ASSERT_EQ(findings.size(), 1u);
  EXPECT_EQ(findings[0].requirement, "NJS-07");
}

// Random memory of the walk's kinds of words (Smis, small indexes, tagged pointers into the region,
// garbage): the walk never reads more than its bound, and what it calls a record came through every check.
TEST(Walk, RandomMemoryStaysWithinTheBound) {
  std::mt19937_64 rng(4719);
  constexpr std::uint64_t kBase = 0x100000, kWords = 256;
  std::size_t failures = 0;
  for (int round = 0; round < 1000; ++round) {
    FakeMemory m;
    for (std::uint64_t i = 0; i < kWords; ++i) {
      std::uint64_t w = 0;
      switch (rng() % 6) {
        case 0: w = smi(static_cast<std::int64_t>(rng() % 8) - 1); break;
        case 1: w = smi(1 << (rng() % 5)); break;
        case 2: w = tagged(kBase + 8 * (rng() % kWords)); break;
        case 3: w = kBase + 8 * (rng() % kWords); break;
        case 4: w = rng(); break;
        default: w = 0;
      }
      m.word(kBase + 8 * i, w);
    }
    DiscoveryStruct d;
    d.cped_slot = kBase + 8 * (rng() % kWords);
    d.als_handle = kBase + 8 * (rng() % kWords);
    d.als_identity_hash = static_cast<std::int32_t>(rng());
    d.record_slot_offset = static_cast<std::uint8_t>(8 * (1 + rng() % 4));
    d.undefined_addr = tagged(kBase + 8 * (rng() % kWords));
    auto t = walk(m, d);
    EXPECT_LE(m.reads, 6 + spec::kV8ChainCap) << to_string(t.end) << " " << t.error;
    EXPECT_LE(t.hops.size(), spec::kV8ChainCap);
    if (t.end == WalkEnd::Record) {
      ASSERT_TRUE(t.wrapper && is_heap_pointer(*t.wrapper) && t.buckets && t.key);
      EXPECT_EQ(t.hops.back().key, *t.key);
    }
    if (t.end == WalkEnd::Failed) {
      ++failures;
      EXPECT_TRUE(t.failed_step.has_value());
      EXPECT_FALSE(t.error.empty());
      EXPECT_FALSE(t.record_pointer.has_value());
    }
    (void)find_key_by_scan(m, t);  // bounded by the checked counts
  }
  EXPECT_GT(failures, 0u);
}

// The reader defects of the kill matrix: each turns one of the walk's answers
// into the wrong one, on the shape its rule is about, and nothing else.
TEST(WalkDefects, EachBreaksItsOwnRuleOnItsShape) {
  {  // ignores-forwarding (NJSR-06): the old table searched, its record reached
    Graph g;
    g.table({{tagged(kAls), tagged(kWrapper)}}, {5});
    g.m.word(kTable + 16, tagged(0x51000));
    EXPECT_EQ(walk(g.m, g.d).end, WalkEnd::Forwarded);
    EXPECT_EQ(walk(g.m, g.d, {.ignores_forwarding = true}).end, WalkEnd::Record);
  }
  {  // bounds-by-elements (NJSR-08): a key past nel, after deleted entries, missed
    Graph g;
    g.buckets = 4;
    g.table({{tagged(0x34000), tagged(0x34000)}, {tagged(kAls), tagged(kWrapper)}}, {5, 5});
    g.m.word(kTable + 16, smi(1));  // one element, one deleted (the hole at index 0)
    g.m.word(kTable + 24, smi(1));
    EXPECT_EQ(walk(g.m, g.d).end, WalkEnd::Record);
    EXPECT_EQ(walk(g.m, g.d, {.bounds_by_elements = true}).end, WalkEnd::Failed);
  }
  {  // checks-map-words (NJSR-14): a forwarding address in a map word refused
    Graph g;
    g.table({{tagged(kAls), tagged(kWrapper)}}, {5});
    for (auto object : {kFrame, kTable, kWrapper}) g.m.word(object, tagged(0x80000));
    EXPECT_EQ(walk(g.m, g.d, {.checks_map_words = true}).end, WalkEnd::Record);
    g.m.word(kTable, 0x81000);  // untagged: a scavenge's forwarding address
    EXPECT_EQ(walk(g.m, g.d).end, WalkEnd::Record);
    EXPECT_EQ(walk(g.m, g.d, {.checks_map_words = true}).end, WalkEnd::Failed);
  }
}

TEST(WalkDefects, CachesStructReadsThroughAClosedGate) {
  Graph g;
  g.table({{tagged(kAls), tagged(kWrapper)}}, {5});
  constexpr std::uint64_t kSlot = 0x90000;
  auto put_struct = [&](const DiscoveryStruct& d) {
    g.m.word(kSlot, d.cped_slot);
    g.m.word(kSlot + 8, d.als_handle);
    g.m.put(kSlot + 16, &d.als_identity_hash, 4);
    g.m.put(kSlot + 20, &d.record_slot_offset, 1);
    g.m.put(kSlot + 21, d.reserved, 3);
    g.m.word(kSlot + 24, d.undefined_addr);
  };
  put_struct(g.d);
  const auto conforming = context_map_walk(), caching = context_map_walk({.caches_struct = true});
  EXPECT_EQ(*conforming->record_address(g.m, kSlot), kRecord);
  EXPECT_EQ(*caching->record_address(g.m, kSlot), kRecord);
  auto closed = g.d;
  closed.cped_slot = 0;
  put_struct(closed);
  EXPECT_EQ(*conforming->record_address(g.m, kSlot), 0u);
  EXPECT_EQ(*caching->record_address(g.m, kSlot), kRecord);  // the gate it read first stands in
  EXPECT_TRUE(conforming->table_walk_shape());
  EXPECT_FALSE(caching->table_walk_shape());  // BPF refuses a defective walk
}

TEST(Walk, DecodesTheDiscoveryStruct) {
  std::uint8_t bytes[32] = {};
  const std::uint64_t cped = 0x1122334455667788, handle = 0x99, undefined = 0x3109f7dc0011;
  const std::int32_t hash = 0x1a7975;
  std::memcpy(bytes, &cped, 8);
  std::memcpy(bytes + 8, &handle, 8);
  std::memcpy(bytes + 16, &hash, 4);
  bytes[20] = 32;
  std::memcpy(bytes + 24, &undefined, 8);
  auto d = decode_discovery_struct(bytes);
  ASSERT_TRUE(d);
  EXPECT_EQ(d->cped_slot, cped);
  EXPECT_EQ(d->als_handle, handle);
  EXPECT_EQ(d->als_identity_hash, hash);
  EXPECT_EQ(d->record_slot_offset, 32);
  EXPECT_TRUE(d->reserved_zero());
  EXPECT_EQ(d->undefined_addr, undefined);
  EXPECT_FALSE(decode_discovery_struct(std::span<const std::uint8_t>(bytes, 31)));
}

TEST(Record, DecodesAndNamesLikeOtep4947) {
  std::vector<std::uint8_t> r(28, 0);
  r[0] = 0xab;
  r[16] = 0xcd;
  r[24] = 1;
  r[25] = 1;
  const std::vector<std::uint8_t> attrs = {0, 2, 'h', 'i', 1, 1, 'x', 0, 3, 'b', 'y', 'e', 7, 5};  // the last entry does not fit
  const std::uint16_t size = attrs.size();
  std::memcpy(r.data() + 26, &size, 2);
  r.insert(r.end(), attrs.begin(), attrs.end());
  auto rec = decode_record(r);
  ASSERT_TRUE(rec);
  EXPECT_TRUE(rec->readable());
  ASSERT_EQ(rec->entries.size(), 3u);
  EXPECT_FALSE(rec->entries_complete);
  auto named = name_attributes(*rec, {"a", "b"});
  ASSERT_EQ(named.attributes.size(), 2u);
  EXPECT_EQ(value_text(named.attributes[0].value), "bye");  // the last occurrence wins
  EXPECT_EQ(named.attributes[0].occurrences, 2u);
  r[24] = 0;
  auto invalid = decode_record(r);
  ASSERT_TRUE(invalid);
  EXPECT_TRUE(invalid->entries.empty());
  EXPECT_FALSE(decode_record(std::span<const std::uint8_t>(r.data(), 27)));
}

TEST(Checks, RecordRulesNameTheirIds) {
  Graph g;
  g.table({{tagged(kAls), tagged(kWrapper)}}, {5});
  g.m.word(kWrapper + 32, kRecord | 1);
  auto t = walk(g.m, g.d);
  ASSERT_EQ(t.end, WalkEnd::Record);
  ThreadContextRecord rec;
  rec.attrs_data_size = 700;
  rec.attrs_data_read = 700;
  const KeyMap map{"a"};
  rec.valid = 1;
  rec.entries.push_back({0, 4, {'x'}});
  auto ids_of = [&](const WalkTrace& trace) {
    std::vector<std::string> ids;
    for (const auto& f : check_thread(ThreadLook{7, trace, std::nullopt, rec, std::nullopt, &map})) ids.push_back(f.requirement);
    return ids;
  };
  // An odd record pointer: the slot is not the writer's record slot, and what it leads to is not judged.
  EXPECT_EQ(ids_of(t), (std::vector<std::string>{"NJS-08"}));
  g.m.word(kWrapper + 32, kRecord);
  auto aligned = walk(g.m, g.d);
  ASSERT_EQ(aligned.end, WalkEnd::Record);
  EXPECT_EQ(ids_of(aligned), (std::vector<std::string>{"NJS-11", "NJS-12"}));
}

TEST(Checks, AnOpenGateWithAnUnusableStructIsNjs06) {
  Graph g;
  g.table({{tagged(kAls), tagged(kWrapper)}}, {5});
  g.d.reserved[1] = 7;
  g.d.undefined_addr = 0;
  g.d.als_handle = 0;
  ThreadLook look{7, walk(g.m, g.d), std::nullopt, std::nullopt, std::nullopt, nullptr};
  auto findings = check_thread(look);
  ASSERT_EQ(findings.size(), 3u);
  for (const auto& f : findings) EXPECT_EQ(f.requirement, "NJS-06") << f.reason;
}

}  // namespace
}  // namespace tracecorr::otel_nodejs_thread_context

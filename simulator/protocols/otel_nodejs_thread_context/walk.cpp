#include "otel_nodejs_thread_context/walk.hpp"

#include <cstring>
#include <mutex>
#include <unordered_map>

#include "otel_nodejs_thread_context/registry.hpp"

namespace tracecorr::otel_nodejs_thread_context {

static_assert(spec::kDiscoverySize == 32 && spec::kTlsVariableSize == spec::kDiscoverySize);
static_assert(spec::kV8TaggedSize == sizeof(std::uint64_t), "the walk reads 64-bit tagged words");
static_assert((spec::kV8MaxBuckets & (spec::kV8MaxBuckets - 1)) == 0);
static_assert(spec::kV8EmptyBucket == -1);

namespace {

// The OrderedHashMap, a FixedArray: its header, then three Smi counts, then
// the buckets, then the entries of kV8OrderedHashMapEntryWords words each.
constexpr std::uint64_t kElementsOffset = spec::kV8OrderedHashMapHeaderSize;
constexpr std::uint64_t kDeletedOffset = kElementsOffset + spec::kV8TaggedSize;
constexpr std::uint64_t kBucketsCountOffset = kDeletedOffset + spec::kV8TaggedSize;
constexpr std::uint64_t kFirstBucketOffset = kBucketsCountOffset + spec::kV8TaggedSize;
constexpr std::uint64_t kEntrySize = spec::kV8OrderedHashMapEntryWords * spec::kV8TaggedSize;

template <typename T>
T load(std::span<const std::uint8_t> bytes, std::size_t offset) {
  T v;
  std::memcpy(&v, bytes.data() + offset, sizeof v);
  return v;
}

// Ends the walk at `step` with `what`; returns the trace for `return fail(...)`.
WalkTrace& fail(WalkTrace& t, WalkStep step, std::string what) {
  t.end = WalkEnd::Failed;
  t.failed_step = step;
  t.error = std::string(to_string(step)) + ": " + std::move(what);
  return t;
}

WalkTrace& finish(WalkTrace& t, WalkEnd end) {
  t.end = end;
  return t;
}

std::string word_text(std::uint64_t w) { return hex_address(w); }

// Reads one word at `address` for `step`; on failure the trace is failed.
bool read_word(const ProcessMemory& m, std::uint64_t address, WalkTrace& t, WalkStep step, const char* what,
               std::uint64_t& out) {
  auto w = m.read_u64(address);
  if (!w) {
    fail(t, step, std::string(what) + " at " + hex_address(address) + " unreadable: " + w.error().message());
    return false;
  }
  out = *w;
  return true;
}

// The counts at table + 16: three Smis, a power-of-two bucket count within
// the bound, and no more entries than the capacity (NJSR-06, 07).
bool read_counts(const ProcessMemory& m, std::uint64_t table, WalkTrace& t, const WalkDefects& defects) {
  std::uint8_t raw[3 * spec::kV8TaggedSize];
  if (auto st = m.read(table + kElementsOffset, raw); !st) {
    fail(t, WalkStep::Counts, "table counts at " + hex_address(table + kElementsOffset) + " unreadable: " +
                                  st.error().message());
    return false;
  }
  const std::span<const std::uint8_t> bytes(raw);
  const std::uint64_t nel = load<std::uint64_t>(bytes, 0), ndel = load<std::uint64_t>(bytes, 8),
                      nbuckets = load<std::uint64_t>(bytes, 16);
  const bool forwarded = is_heap_pointer(nel);
  if (forwarded && !defects.ignores_forwarding) {
    finish(t, WalkEnd::Forwarded);
    t.error = "counts: the element count " + word_text(nel) + " is a heap pointer (a rehash forwards the table)";
    return false;
  }
  const char* bad = !forwarded && !is_smi(nel) ? "element count" : !is_smi(ndel) ? "deleted count" : !is_smi(nbuckets) ? "bucket count" : nullptr;
  if (bad) {
    fail(t, WalkStep::Counts, std::string("the ") + bad + " is not a Smi (" + word_text(nel) + ", " + word_text(ndel) + ", " +
                                  word_text(nbuckets) + ")");
    return false;
  }
  t.elements = forwarded ? 0 : smi_value(nel), t.deleted = smi_value(ndel), t.buckets = smi_value(nbuckets);
  const std::int64_t n = *t.buckets;
  if (forwarded) t.elements = n * static_cast<std::int64_t>(spec::kV8OrderedHashMapLoadFactor) - *t.deleted;
  if (n < 1 || n > static_cast<std::int64_t>(spec::kV8MaxBuckets) || (n & (n - 1)) != 0) {
    fail(t, WalkStep::Counts, "bucket count " + std::to_string(n) + " is not a power of two in 1.." +
                                  std::to_string(spec::kV8MaxBuckets));
    return false;
  }
  if (*t.elements < 0 || *t.deleted < 0 ||
      *t.elements + *t.deleted > n * static_cast<std::int64_t>(spec::kV8OrderedHashMapLoadFactor)) {
    fail(t, WalkStep::Counts, std::to_string(*t.elements) + " elements and " + std::to_string(*t.deleted) +
                                  " deleted do not fit " + std::to_string(n) + " buckets");
    return false;
  }
  return true;
}

// An entry index as a bucket head or a chain link holds it: a Smi, -1 (the
// end) or below elements + deleted. Returns false (trace failed) otherwise.
bool entry_index(std::uint64_t word, WalkStep step, WalkTrace& t, const WalkDefects& defects, std::int64_t& index) {
  if (!is_smi(word)) {
    fail(t, step, "entry index " + word_text(word) + " is not a Smi");
    return false;
  }
  index = smi_value(word);
  if (index == spec::kV8EmptyBucket) return true;
  const std::int64_t used = defects.bounds_by_elements ? *t.elements : *t.elements + *t.deleted;
  if (index < 0 || index >= used) {
    fail(t, step, "entry index " + std::to_string(index) + " is outside the table's " + std::to_string(used) +
                      " used entries");
    return false;
  }
  return true;
}

std::uint64_t entry_address(std::uint64_t table, std::int64_t buckets, std::int64_t index) {
  return table + kFirstBucketOffset + static_cast<std::uint64_t>(buckets) * spec::kV8TaggedSize +
         static_cast<std::uint64_t>(index) * kEntrySize;
}

// Follows the chain from the bucket's head for at most kV8ChainCap hops.
// Returns the matching hop's value through `t.wrapper`, or ends the trace.
void follow_chain(const ProcessMemory& m, std::uint64_t table, std::int64_t index, WalkTrace& t,
                  const WalkDefects& defects) {
  for (std::size_t hop = 0; hop < spec::kV8ChainCap; ++hop) {
    if (index == spec::kV8EmptyBucket) {
      finish(t, WalkEnd::NotInFrame);
      return;
    }
    for (const auto& seen : t.hops)
      if (seen.index == index) {
        fail(t, WalkStep::Chain, "entry " + std::to_string(index) + " comes back on its own chain (a cycle)");
        return;
      }
    WalkHop h;
    h.index = index;
    h.address = entry_address(table, *t.buckets, index);
    std::uint8_t raw[kEntrySize];
    if (auto st = m.read(h.address, raw); !st) {
      fail(t, WalkStep::Chain, "entry " + std::to_string(index) + " at " + hex_address(h.address) + " unreadable: " +
                                   st.error().message());
      return;
    }
    h.key = load<std::uint64_t>(raw, 0), h.value = load<std::uint64_t>(raw, 8), h.chain = load<std::uint64_t>(raw, 16);
    t.hops.push_back(h);
    if (h.key == *t.key) {
      t.wrapper = h.value;
      return;
    }
    if (!entry_index(h.chain, WalkStep::Chain, t, defects, index)) return;
  }
  if (index == spec::kV8EmptyBucket) {
    finish(t, WalkEnd::NotInFrame);
    return;
  }
  fail(t, WalkStep::Chain, "the chain goes on past " + std::to_string(spec::kV8ChainCap) + " hops");
}

// checks-map-words (a defect): the object's map word must be a heap pointer.
bool map_word_checked(const ProcessMemory& m, std::uint64_t object, WalkTrace& t, WalkStep step,
                      const WalkDefects& defects) {
  std::uint64_t map = 0;
  if (!defects.checks_map_words) return true;
  if (!read_word(m, untag(object), t, step, "the map word", map)) return false;
  if (!is_heap_pointer(map)) return fail(t, step, "the map word " + word_text(map) + " is not a heap pointer"), false;
  return true;
}

// frame -> table -> counts; false when the walk ended.
bool reach_table(const ProcessMemory& m, WalkTrace& t, const WalkDefects& defects) {
  const auto& d = t.discovery;
  std::uint64_t frame = 0;
  if (!read_word(m, d.cped_slot, t, WalkStep::Frame, "the CPED slot", frame)) return false;
  t.frame = frame;
  if (frame == d.undefined_addr) return finish(t, WalkEnd::NoFrame), false;
  if (!is_heap_pointer(frame)) return fail(t, WalkStep::Frame, "the frame " + word_text(frame) + " is not a heap pointer"), false;
  if (!map_word_checked(m, frame, t, WalkStep::Frame, defects)) return false;
  std::uint64_t table = 0;
  if (!read_word(m, untag(frame) + spec::kV8JsMapTableOffset, t, WalkStep::Table, "the frame's table", table)) return false;
  t.table = table;
  if (!is_heap_pointer(table)) return fail(t, WalkStep::Table, "the table " + word_text(table) + " is not a heap pointer"), false;
  if (!map_word_checked(m, table, t, WalkStep::Table, defects)) return false;
  return read_counts(m, untag(table), t, defects);
}

// The ALS key and the bucket's head; false when the walk ended.
bool reach_bucket(const ProcessMemory& m, WalkTrace& t, const WalkDefects& defects, std::int64_t& head) {
  const auto& d = t.discovery;
  std::uint64_t key = 0;
  if (!read_word(m, d.als_handle, t, WalkStep::Key, "the ALS handle's slot", key)) return false;
  t.key = key;
  if (!is_heap_pointer(key)) return fail(t, WalkStep::Key, "the ALS instance " + word_text(key) + " is not a heap pointer"), false;
  const std::uint64_t mask = static_cast<std::uint64_t>(*t.buckets) - 1;
  t.bucket_index = static_cast<std::uint64_t>(static_cast<std::uint32_t>(d.als_identity_hash)) & mask;
  t.bucket_address = untag(*t.table) + kFirstBucketOffset + *t.bucket_index * spec::kV8TaggedSize;
  std::uint64_t word = 0;
  if (!read_word(m, *t.bucket_address, t, WalkStep::Bucket, "the bucket", word)) return false;
  t.bucket_head = word;
  return entry_index(word, WalkStep::Bucket, t, defects, head);
}

}  // namespace

namespace {

class ContextMapWalk final : public RecordWalk {
 public:
  explicit ContextMapWalk(const WalkDefects& defects) : defects_(defects) {}
  std::string name() const override { return "V8 context-map walk from " + std::string(spec::kTlsSymbol); }

  Expected<std::uint64_t> record_address(const ProcessMemory& memory, std::uint64_t slot) const override {
    auto discovery = read_struct(memory, slot);
    if (!discovery) return discovery.error();
    const WalkTrace trace = walk(memory, *discovery, defects_);
    if (trace.found()) return *trace.record_pointer;
    if (trace.end != WalkEnd::Failed) return std::uint64_t{0};
    return make_error(ErrorKind::kMalformed, trace.error, std::string(spec::kTlsSymbol) + " at " + hex_address(slot));
  }

  std::optional<TableWalkShape> table_walk_shape() const override {
    if (defects_.any()) return std::nullopt;
    TableWalkShape shape;
    shape.struct_size = spec::kDiscoverySize;
    shape.frame_slot_at = spec::kDiscoveryCpedSlotOffset;
    shape.key_handle_at = spec::kDiscoveryAlsHandleOffset;
    shape.hash_at = spec::kDiscoveryAlsIdentityHashOffset;
    shape.record_offset_at = spec::kDiscoveryRecordSlotOffsetOffset;
    shape.undefined_at = spec::kDiscoveryUndefinedAddrOffset;
    shape.record_offset_min = spec::kV8RecordSlotOffsetMin;
    shape.record_offset_max = spec::kV8RecordSlotOffsetMax;
    shape.frame_table_offset = spec::kV8JsMapTableOffset;
    shape.table_header_size = spec::kV8OrderedHashMapHeaderSize;
    shape.load_factor = spec::kV8OrderedHashMapLoadFactor;
    shape.max_buckets = spec::kV8MaxBuckets;
    shape.chain_cap = spec::kV8ChainCap;
    return shape;
  }

 private:
  // The thread's struct: read at every sample (NJSR-04), or with the
  // caches-struct defect the first copy read at this slot, kept.
  Expected<DiscoveryStruct> read_struct(const ProcessMemory& memory, std::uint64_t slot) const {
    if (defects_.caches_struct) {
      std::lock_guard lock(cache_mutex_);
      if (auto it = cached_.find(slot); it != cached_.end()) return it->second;
    }
    std::uint8_t bytes[spec::kDiscoverySize];
    if (auto st = memory.read(slot, bytes); !st) return st.error().within(std::string(spec::kTlsSymbol) + " at " + hex_address(slot));
    auto discovery = decode_discovery_struct(bytes);
    if (discovery && defects_.caches_struct && discovery->gate_open()) {
      std::lock_guard lock(cache_mutex_);
      if (cached_.size() >= kCachedStructsMax) cached_.clear();
      cached_.emplace(slot, *discovery);
    }
    return discovery;
  }

  static constexpr std::size_t kCachedStructsMax = 4096;
  WalkDefects defects_;
  mutable std::mutex cache_mutex_;
  mutable std::unordered_map<std::uint64_t, DiscoveryStruct> cached_;
};
// The shape the BPF program takes is the walk above: V8's word kinds and entries.
static_assert(spec::kV8HeapObjectTagMask == 7 && spec::kV8HeapObjectTag == 1 && spec::kV8SmiShift == 32);
static_assert(spec::kV8OrderedHashMapEntryWords == 3);

}  // namespace

std::shared_ptr<const RecordWalk> context_map_walk(const WalkDefects& defects) {
  static const auto conforming = std::make_shared<const ContextMapWalk>(WalkDefects{});
  return defects.any() ? std::make_shared<const ContextMapWalk>(defects) : conforming;
}

Expected<DiscoveryStruct> decode_discovery_struct(std::span<const std::uint8_t> bytes) {
  if (bytes.size() < spec::kDiscoverySize)
    return Error{"the discovery struct is " + std::to_string(bytes.size()) + " bytes, not " +
                     std::to_string(spec::kDiscoverySize),
                 std::string(spec::kTlsSymbol), "", ErrorKind::kTruncated};
  DiscoveryStruct d;
  d.cped_slot = load<std::uint64_t>(bytes, spec::kDiscoveryCpedSlotOffset);
  d.als_handle = load<std::uint64_t>(bytes, spec::kDiscoveryAlsHandleOffset);
  d.als_identity_hash = load<std::int32_t>(bytes, spec::kDiscoveryAlsIdentityHashOffset);
  d.record_slot_offset = bytes[spec::kDiscoveryRecordSlotOffsetOffset];
  std::memcpy(d.reserved, bytes.data() + spec::kDiscoveryReservedOffset, spec::kDiscoveryReservedSize);
  d.undefined_addr = load<std::uint64_t>(bytes, spec::kDiscoveryUndefinedAddrOffset);
  return d;
}

bool is_heap_pointer(std::uint64_t word) { return (word & spec::kV8HeapObjectTagMask) == spec::kV8HeapObjectTag; }
bool is_smi(std::uint64_t word) { return (word & ((std::uint64_t{1} << spec::kV8SmiShift) - 1)) == 0; }
std::int64_t smi_value(std::uint64_t word) { return static_cast<std::int64_t>(word) >> spec::kV8SmiShift; }
std::uint64_t untag(std::uint64_t heap_pointer) { return heap_pointer - spec::kV8HeapObjectTag; }

const char* to_string(WalkEnd end) {
  switch (end) {
    case WalkEnd::Record: return "record";
    case WalkEnd::GateClosed: return "gate-closed";
    case WalkEnd::NoFrame: return "no-frame";
    case WalkEnd::NotInFrame: return "not-in-frame";
    case WalkEnd::Detached: return "detached";
    case WalkEnd::NullRecord: return "null-record";
    case WalkEnd::Forwarded: return "forwarded";
    case WalkEnd::Failed: return "failed";
  }
  return "?";
}

const char* to_string(WalkStep step) {
  switch (step) {
    case WalkStep::Gate: return "gate";
    case WalkStep::Frame: return "frame";
    case WalkStep::Table: return "table";
    case WalkStep::Counts: return "counts";
    case WalkStep::Key: return "key";
    case WalkStep::Bucket: return "bucket";
    case WalkStep::Chain: return "chain";
    case WalkStep::Wrapper: return "wrapper";
    case WalkStep::Record: return "record";
  }
  return "?";
}

WalkTrace walk(const ProcessMemory& m, const DiscoveryStruct& discovery, const WalkDefects& defects) {
  WalkTrace t;
  t.discovery = discovery;
  if (!discovery.gate_open()) return finish(t, WalkEnd::GateClosed);
  const auto slot = discovery.record_slot_offset;
  if (slot < spec::kV8RecordSlotOffsetMin || slot > spec::kV8RecordSlotOffsetMax || slot % spec::kV8TaggedSize != 0)
    return fail(t, WalkStep::Gate, "record_slot_offset " + std::to_string(slot) + " is not a word offset in " +
                                       std::to_string(spec::kV8RecordSlotOffsetMin) + ".." +
                                       std::to_string(spec::kV8RecordSlotOffsetMax));
  if (!reach_table(m, t, defects)) return t;
  std::int64_t head = 0;
  if (!reach_bucket(m, t, defects, head)) return t;
  follow_chain(m, untag(*t.table), head, t, defects);
  if (!t.wrapper) return t;
  if (*t.wrapper == discovery.undefined_addr) return finish(t, WalkEnd::Detached);
  if (!is_heap_pointer(*t.wrapper))
    return fail(t, WalkStep::Wrapper, "the ALS value " + word_text(*t.wrapper) + " is not a heap pointer");
  if (!map_word_checked(m, *t.wrapper, t, WalkStep::Wrapper, defects)) return t;
  t.record_slot_address = untag(*t.wrapper) + slot;
  std::uint64_t record = 0;
  if (!read_word(m, *t.record_slot_address, t, WalkStep::Record, "the wrapper's record slot", record)) return t;
  t.record_pointer = record;
  return finish(t, record == 0 ? WalkEnd::NullRecord : WalkEnd::Record);
}

std::optional<MisplacedEntry> find_key_by_scan(const ProcessMemory& m, const WalkTrace& t) {
  if (!t.table || !t.buckets || !t.elements || !t.deleted || !t.key || !t.bucket_index) return std::nullopt;
  const std::int64_t used = *t.elements + *t.deleted;  // bounded by read_counts: <= 2 x kV8MaxBuckets
  for (std::int64_t i = 0; i < used; ++i) {
    auto key = m.read_u64(entry_address(untag(*t.table), *t.buckets, i));
    if (!key) return std::nullopt;
    if (*key == *t.key) return MisplacedEntry{i, *t.bucket_index};
  }
  return std::nullopt;
}

}  // namespace tracecorr::otel_nodejs_thread_context

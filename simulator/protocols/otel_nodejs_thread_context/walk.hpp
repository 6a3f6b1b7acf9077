// The walk from a thread's discovery struct to its record
// (spec/otel-nodejs-thread-context.md §3): a pure, bounded codec over target
// memory. Every step reads a constant number of bytes and checks what it read
// (tag bits, Smis, a power-of-two bucket count, entry indexes within the
// table, a constant chain cap); a failed check ends the walk at a named step
// and yields no record (NJSR-13). The same steps and bounds are what a BPF
// program follows: 9 reads plus one per hop, no loop but the capped chain.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "tracecorr/error.hpp"
#include "tracecorr/memory.hpp"
#include "tracecorr/record_layout.hpp"

namespace tracecorr::otel_nodejs_thread_context {

// The 32-byte thread-local struct `otel_thread_ctx_nodejs_v1`, as stored.
struct DiscoveryStruct {
  std::uint64_t cped_slot = 0;  // the gate: 0 is closed
  std::uint64_t als_handle = 0;
  std::int32_t als_identity_hash = 0;
  std::uint8_t record_slot_offset = 0;
  std::uint8_t reserved[3] = {0, 0, 0};
  std::uint64_t undefined_addr = 0;

  bool gate_open() const { return cped_slot != 0; }
  bool reserved_zero() const { return reserved[0] == 0 && reserved[1] == 0 && reserved[2] == 0; }
};
// Decodes the struct from its bytes; kTruncated below 32 bytes.
Expected<DiscoveryStruct> decode_discovery_struct(std::span<const std::uint8_t> bytes);

// V8's word kinds (no pointer compression): a heap pointer has `word & 7 == 1`;
// a Smi is value << 32 with its low 32 bits zero.
bool is_heap_pointer(std::uint64_t word);
bool is_smi(std::uint64_t word);
std::int64_t smi_value(std::uint64_t word);  // the caller has checked is_smi
std::uint64_t untag(std::uint64_t heap_pointer);

// Where a walk ended. The first six are the walk's "no context" answers, each
// a state the writer may legitimately be in; the rest are failures, named by
// the step whose check failed.
enum class WalkEnd {
  Record,           // a record pointer was reached (its bytes are the caller's to read)
  GateClosed,       // cped_slot is 0 (NJSR-04)
  NoFrame,          // *cped_slot is undefined (NJSR-05)
  NotInFrame,       // the bucket or the chain ended without the ALS key (NJSR-08, 10)
  Detached,         // the ALS key maps to undefined (NJSR-10)
  NullRecord,       // the wrapper's record slot is 0 (NJSR-11)
  Forwarded,        // the element count is a heap pointer: a rehash's forwarding pointer (NJSR-06)
  Failed,           // a read failed or a check did not hold: see `failed_step` and `error`
};
const char* to_string(WalkEnd end);  // "record", "gate-closed", ...
// The steps, in order, as a failure names them.
enum class WalkStep { Gate, Frame, Table, Counts, Key, Bucket, Chain, Wrapper, Record };
const char* to_string(WalkStep step);  // "gate", "frame", ...

// One entry visited on the chain.
struct WalkHop {
  std::int64_t index = 0;
  std::uint64_t address = 0;  // of the entry's key word
  std::uint64_t key = 0, value = 0, chain = 0;
};

// What the walk saw, step by step: each field is set once its step has read it.
struct WalkTrace {
  DiscoveryStruct discovery;
  std::optional<std::uint64_t> frame;  // *cped_slot
  std::optional<std::uint64_t> table;  // the tagged word at frame + 24
  std::optional<std::int64_t> elements, deleted, buckets;
  std::optional<std::uint64_t> key;  // *als_handle
  std::optional<std::uint64_t> bucket_index;
  std::optional<std::uint64_t> bucket_address;
  std::optional<std::uint64_t> bucket_head;  // the bucket's word
  std::vector<WalkHop> hops;
  std::optional<std::uint64_t> wrapper;  // the entry's value
  std::optional<std::uint64_t> record_slot_address;
  std::optional<std::uint64_t> record_pointer;
  WalkEnd end = WalkEnd::Failed;
  std::optional<WalkStep> failed_step;  // set when end is Failed
  std::string error;                    // why it failed, naming the address
  bool found() const { return end == WalkEnd::Record; }
};

// Reader defects (`tracecorr agent --reader-defect`, profiler mode's kill
// matrix): each makes the walk break one rule. Conforming by default; only
// the host agent is ever given one.
struct WalkDefects {
  bool caches_struct = false;       // caches-struct, NJSR-04: a thread's struct read once, then reused
  bool ignores_forwarding = false;  // ignores-forwarding, NJSR-06: a forwarded table read as if current
  bool bounds_by_elements = false;  // bounds-by-elements, NJSR-08: entry indexes bound by nel, not nel + ndel
  bool checks_map_words = false;    // checks-map-words, NJSR-14: objects whose map word is no heap pointer refused
  bool any() const { return caches_struct || ignores_forwarding || bounds_by_elements || checks_map_words; }
};

// Walks from `discovery` (already read from the thread's copy) through
// `memory`. Never reads more than 9 + kV8ChainCap words past the struct;
// never throws; every address it reads comes from a checked word.
WalkTrace walk(const ProcessMemory& memory, const DiscoveryStruct& discovery, const WalkDefects& defects = {});

// The walk as the engine's samplers take it (record_layout.hpp's RecordWalk):
// the struct read at the thread's slot, then walk(). Every "no context" end
// (a closed gate, nothing attached, a rehash in flight) is 0; a failed check
// is an error naming its step and address. thread_context_record_layout()
// carries it. A walk with defects has no table shape: the BPF sampler
// refuses it (the kill matrix runs it with the ptrace reader).
std::shared_ptr<const RecordWalk> context_map_walk(const WalkDefects& defects = {});

// NJS-07's evidence: when the hashed bucket did not hold the ALS key, where the
// key is in the table, by a scan of at most 2 x buckets entries (itself capped
// at kV8MaxBuckets x 2). nullopt: not found, or the table cannot be scanned.
// Only for inspect: a sampler never scans.
struct MisplacedEntry {
  std::int64_t index = 0;
  std::uint64_t hashed_bucket = 0;  // the bucket the published hash names
};
std::optional<MisplacedEntry> find_key_by_scan(const ProcessMemory& memory, const WalkTrace& trace);

}  // namespace tracecorr::otel_nodejs_thread_context

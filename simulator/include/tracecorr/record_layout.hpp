// A record a target publishes for out-of-process readers, described as data:
// how long it is, which byte says it may be read, what its bytes are called,
// and how a reader gets from a thread (or a process) to it.
//
// The engine (samplers, the record reader, the conform watchers, the BPF
// loader) reads every record through a RecordLayout and never spells a
// protocol's offsets; each protocol's codec supplies its layout as data
// (in its wire codec). A new protocol adds a layout, not code.
//
// Everything a layout reads from a target is hostile: a size field never
// makes a reader copy more than the layout's max_size, itself at most
// kRecordMaxBytes.
#pragma once

#include <algorithm>
#include <array>
#include <bitset>
#include <compare>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "tracecorr/error.hpp"
#include "tracecorr/record_bound.h"

namespace tracecorr {

class ProcessMemory;  // memory.hpp

// The largest record any layout may declare or any reader copies.
inline constexpr std::size_t kRecordMaxBytes = TC_RECORD_MAX_BYTES;

// ---- length ---------------------------------------------------------------------
// Every record is this long.
struct FixedSize {
  std::size_t bytes = 0;
};
// The record says how long it is: a header of `header_length` bytes holds an
// unsigned `width`-byte field (1, 2 or 4, native byte order) at `offset`
// giving the length of what follows the header. Total = header_length + value.
struct SizeField {
  std::size_t offset = 0;
  std::size_t width = 2;
  std::size_t header_length = 0;
};
using RecordLength = std::variant<FixedSize, SizeField>;

// ---- indirection -------------------------------------------------------------------
// How a reader reaches the record. Both are one pointer away; what the pointer
// hangs off differs, and the per-process part of it comes from discovery (a
// PointerSite), not from the layout.
//
// thread pointer + the process's TLS offset -> pointer -> record.
struct PointerInTlsSlot {
  bool operator==(const PointerInTlsSlot&) const = default;
};
// the process's memory area + pointer_offset -> pointer -> record.
struct PointerInMemoryArea {
  std::size_t pointer_offset = 0;  // of the pointer inside the area's header
  bool operator==(const PointerInMemoryArea&) const = default;
};
// A walk as data, for a sampler that cannot call the protocol's code (the
// BPF program): a hash table in a runtime's heap (the Node.js thread
// context's, for one). The struct in the thread's TLS keeps where the current
// frame object is, the key object and its hash, the runtime's "undefined",
// and where a value object keeps the record pointer; the frame holds the
// table: three small-integer counts (elements, deleted, buckets), the bucket
// heads, then entries of three words {key, value, chain}. Words are tagged,
// 64 bits: a heap pointer has tag 1 in its low 3 bits, a small integer its
// value in the high half. Every word is checked as the protocol's own walk
// checks it; the numbers are the protocol's (its registry).
struct TableWalkShape {
  std::uint8_t struct_size = 32;   // the struct's bytes; every word below lies within them
  std::uint8_t frame_slot_at = 0;  // u64: where the current frame is kept (0: a closed gate, no context)
  std::uint8_t key_handle_at = 8;  // u64: where the key object is kept
  std::uint8_t hash_at = 16;       // u32: the key's identity hash (its bucket: hash & (buckets - 1))
  std::uint8_t record_offset_at = 20;  // u8: the record pointer's offset in the value (wrapper) object
  std::uint8_t undefined_at = 24;  // u64: the runtime's undefined (no frame, a detached key)
  std::uint8_t record_offset_min = 8, record_offset_max = 248;  // word offsets believed
  std::uint16_t frame_table_offset = 24;  // the table's word in the frame object
  std::uint16_t table_header_size = 16;   // bytes before the three small-integer counts
  std::uint8_t load_factor = 2;           // elements + deleted <= buckets x this
  std::uint32_t max_buckets = 65536;      // a power of two
  std::uint16_t chain_cap = 16;           // hops at most
  bool operator==(const TableWalkShape&) const = default;
};

// thread pointer + the process's TLS offset -> a struct -> a walk through
// runtime objects -> record: a runtime whose records hang off its own heap
// (the Node.js thread context: several checked reads). The walk is the
// protocol's code, bounded by it (RecordWalk); samplers that read by process
// memory call it where the others read one pointer. The BPF program follows
// the walk's shape as data when it has one (table_walk_shape()), and refuses
// the layout, naming the walk, when it has none.
class RecordWalk {
 public:
  virtual ~RecordWalk() = default;
  virtual std::string name() const = 0;  // in messages: "the context-map walk from ..."
  // The record's address, starting at the thread's struct at `slot`. 0: the
  // thread shows no record now (a state the writer may be in: a closed gate,
  // nothing attached). An error: a read failed or a check did not hold, named.
  // Hostile memory: never more reads than the walk's own bound.
  virtual Expected<std::uint64_t> record_address(const ProcessMemory& memory, std::uint64_t slot) const = 0;
  // The same walk as data (for the BPF program), when it is a table walk of that shape.
  virtual std::optional<TableWalkShape> table_walk_shape() const { return std::nullopt; }
};
struct WalkFromTlsSlot {
  std::shared_ptr<const RecordWalk> walk;
  bool operator==(const WalkFromTlsSlot& other) const { return walk == other.walk; }
};
using RecordIndirection = std::variant<PointerInTlsSlot, PointerInMemoryArea, WalkFromTlsSlot>;

// ---- the valid byte's accepted values ----------------------------------------------
class ByteValues {
 public:
  static ByteValues any_nonzero();
  static ByteValues only(std::initializer_list<std::uint8_t> values);
  static ByteValues of(std::span<const std::uint8_t> values);
  bool contains(std::uint8_t value) const { return bits_.test(value); }
  bool empty() const { return bits_.none(); }
  // Bit v of word v / 64 is set when v is in the set: the BPF map's form.
  std::array<std::uint64_t, 4> words() const;
  std::string describe() const;  // "1..255", "1", "1, 3"
  bool operator==(const ByteValues&) const = default;

 private:
  std::bitset<256> bits_;
};

// A named run of record bytes, for describing bytes and for naming the field
// a changed byte belongs to (the update-order watch).
struct RecordField {
  std::string name;
  std::size_t offset = 0;
  std::size_t size = 0;
  bool operator==(const RecordField&) const = default;
};

struct RecordLayout {
  std::string name;  // in messages: "<name> at 0x..."
  RecordLength length = FixedSize{};
  std::size_t max_size = kRecordMaxBytes;  // records declaring more are cut here (and said to be)
  std::size_t valid_offset = 0;
  ByteValues valid_values = ByteValues::any_nonzero();  // a record is readable only while its valid byte is one of these
  // A byte that is 0 while the thread has no context to share (a
  // "trace present" flag). Only counted by samplers; judging it is the protocol's.
  std::optional<std::size_t> presence_offset;
  std::vector<RecordField> fields;
  RecordIndirection indirection = PointerInTlsSlot{};

  // Bytes a reader reads before it knows the length: the whole record (fixed
  // size) or the header holding the size field.
  std::size_t fixed_part() const;
  // Whether `record`'s valid byte holds an accepted value (false when the
  // bytes end before the valid byte).
  bool valid(std::span<const std::uint8_t> record) const;
  // The field holding byte `offset`, or nullptr.
  const RecordField* field_at(std::size_t offset) const;
  // Whether the layout can be read as declared: bounds within kRecordMaxBytes,
  // the size field, valid and presence bytes inside the fixed part, a size
  // field of width 1, 2 or 4, fields inside max_size. The error names the part.
  Status check() const;

  bool operator==(const RecordLayout&) const = default;
};

// The record's total length, from its first bytes (at least fixed_part()).
// kTruncated: fewer bytes than the fixed part. kTooLong: the size field
// declares more than max_size (the error names the field and its value).
Expected<std::size_t> record_length(const RecordLayout& layout, std::span<const std::uint8_t> first_bytes);
// The length the record claims, before any bound (a header plus a 4-byte
// value always fits in 64 bits). 0 when fewer than fixed_part() bytes are given.
std::uint64_t declared_length(const RecordLayout& layout, std::span<const std::uint8_t> first_bytes);

// One record's bytes as read: never more than kRecordMaxBytes (a longer span
// is cut at the bound, so the bound holds whoever builds one).
class RecordBytes {
 public:
  RecordBytes() = default;
  explicit RecordBytes(std::span<const std::uint8_t> bytes)
      : bytes_(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(std::min(bytes.size(), kRecordMaxBytes))) {}

  std::size_t size() const { return bytes_.size(); }
  bool empty() const { return bytes_.empty(); }
  const std::uint8_t* data() const { return bytes_.data(); }
  std::uint8_t operator[](std::size_t i) const { return bytes_[i]; }
  auto begin() const { return bytes_.begin(); }
  auto end() const { return bytes_.end(); }
  std::span<const std::uint8_t> span() const { return bytes_; }
  operator std::span<const std::uint8_t>() const { return bytes_; }  // for decoders

  friend bool operator==(const RecordBytes&, const RecordBytes&) = default;
  friend auto operator<=>(const RecordBytes&, const RecordBytes&) = default;

 private:
  std::vector<std::uint8_t> bytes_;
};

// ---- thread-local storage outside the static block -------------------------------
// How a C library lays out a thread's dynamic thread vector (DTV): where the
// thread control block keeps the DTV's address, and how the vector holds each
// module's TLS block. Data, so that every reader (and the BPF program, when it
// walks DTVs) follows the same numbers; tls.hpp's dtv_layout() supplies them
// for glibc and musl on x86-64 and arm64.
struct DtvLayout {
  std::int64_t dtv_at = 0;          // the DTV's address is stored at thread pointer + dtv_at
  std::uint32_t entry_size = 8;     // bytes per DTV entry; entry i's first word is module i's block address
  std::int32_t count_entry = 0;     // the entry whose first word is the number of module entries
  std::optional<std::int32_t> generation_entry;  // the entry holding the DTV's generation, where the library keeps one
  // A block address meaning "not allocated for this thread yet" besides 0
  // (glibc's TLS_DTV_UNALLOCATED, all ones).
  std::optional<std::uint64_t> unallocated;
  bool operator==(const DtvLayout&) const = default;
};

// A module's TLS, reached through each thread's DTV: block of `module_id`, +
// the site's offset. `generation`: the DTV generation the module needs
// (glibc's TLSDESC argument carries it); an older DTV predates the module.
struct DtvModule {
  std::uint64_t module_id = 0;
  std::optional<std::uint64_t> generation;
  DtvLayout dtv;
  bool operator==(const DtvModule&) const = default;
};

// Bounds on what a DTV walk believes: no C library numbers its modules past
// these (glibc's DTV grows by 14 entries per step), so a larger count or id is
// not a DTV.
inline constexpr std::uint64_t kMaxTlsModules = 1u << 16;

// Where, in one process, a layout's record pointer is: the part of the
// indirection that discovery finds per process.
struct PointerSite {
  // PointerInTlsSlot: the slot's offset from the thread pointer (static TLS:
  // a StaticOffset TLS descriptor's argument, two's complement), or, with
  // `module`, from the start of the module's TLS block; PointerInMemoryArea:
  // the area's address.
  std::uint64_t value = 0;
  std::optional<DtvModule> module;  // the slot is in this module's block, found through the thread's DTV
  static PointerSite tls_offset(std::int64_t offset) { return {static_cast<std::uint64_t>(offset), std::nullopt}; }
  static PointerSite module_block(DtvModule module, std::uint64_t offset) { return {offset, std::move(module)}; }
  static PointerSite area(std::uint64_t address) { return {address, std::nullopt}; }
  bool operator==(const PointerSite&) const = default;
};
// The address of the record pointer of the thread whose thread pointer is
// `thread_pointer` (ignored for PointerInMemoryArea). A site in a module's
// block walks the thread's DTV, every word read bounded: kNotAllocated when
// the thread has no block for the module yet (its DTV too short or too old,
// or the entry unallocated), kMalformed when the DTV is not one (a count or
// generation past any C library's), the memory's own kinds otherwise.
Expected<std::uint64_t> pointer_address(const ProcessMemory& memory, const RecordLayout& layout, const PointerSite& site,
                                        std::uint64_t thread_pointer);
// The start of `module`'s TLS block for the thread whose thread pointer is
// `thread_pointer` (the DTV walk of pointer_address).
Expected<std::uint64_t> module_block_address(const ProcessMemory& memory, const DtvModule& module,
                                             std::uint64_t thread_pointer);
// Whether the layout's indirection starts at the thread pointer.
bool uses_thread_pointer(const RecordLayout& layout);
// The record's address from the pointer's (pointer_address's): the pointer
// read there, or the layout's walk from there. 0: no record (yet, or now).
Expected<std::uint64_t> record_address(const ProcessMemory& memory, const RecordLayout& layout,
                                       std::uint64_t pointer_address);

struct RecordRead {
  RecordBytes bytes;                 // the record, or its first max_size bytes when it declares more
  std::uint64_t declared_length = 0;  // what the record declares (its fixed size, or header + size field)
  bool truncated() const { return declared_length > bytes.size(); }
};
// Reads the record at `address`: the fixed part, then the rest of the length
// it declares, cut at the layout's max_size (RecordRead::truncated()). Memory
// errors keep the reader's kind (kUnmapped, kGone) and name the layout.
Expected<RecordRead> read_record(const ProcessMemory& memory, const RecordLayout& layout, std::uint64_t address);

}  // namespace tracecorr

// The order of a record's updates, checked deterministically: hardware watchpoints on the thread that
// writes a record stop it right after every store to the record, so the order
// of its stores is observed, not sampled.
//
// The check: every observed state whose valid byte is accepted (its layout's
// valid values; Elastic v1: non-zero) must be reached from the previous such
// state only through an observed state whose valid byte is not. A data
// watchpoint stops the thread right after the store (x86-64 traps once it
// retired; arm64 before it, and the watch steps over it), so each watched
// store yields exactly one observed state and consecutive observed states
// differ by exactly one store (plus any stores to bytes the debug registers
// cannot cover; see WatchPlan).
//
// Host: x86-64 (DR0..DR3 through PTRACE_POKEUSER) or arm64 (NT_ARM_HW_WATCH;
// a core with fewer than four watchpoints is an error). It also watches guests of
// qemu-user: qemu performs a guest's stores as host stores at the same
// addresses, so host watchpoints on the qemu thread catch them; the reported
// instruction address is then in qemu's generated code, not a guest pc.
#pragma once

#include <sys/types.h>

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "tracecorr/error.hpp"
#include "tracecorr/record_layout.hpp"

namespace tracecorr::watch {

// x86-64 has four debug registers, each watching at most 8 aligned bytes: 32
// bytes of a record at best (of 37 for Elastic v1), fewer when the record
// straddles more 8-byte chunks. The valid byte's chunk is always watched.
inline constexpr std::size_t kWatchRegisters = 4;
inline constexpr std::size_t kWatchChunkSize = 8;

struct WatchChunk {
  std::uint64_t address = 0;       // 8-byte aligned
  std::size_t first_record_offset = 0;  // record bytes [first, end) lie in this chunk
  std::size_t end_record_offset = 0;
};

struct WatchPlan {
  std::vector<WatchChunk> chunks;   // at most kWatchRegisters, ascending
  std::vector<bool> watched;        // per record byte, over the record's length when the watch began
  std::vector<RecordField> fields;  // the layout's, to name unwatched bytes
  std::size_t watched_bytes() const;
  // "record bytes 32..36 (span-id bytes 3..7)", or empty when all are watched.
  std::string unwatched_description() const;
};

// Picks the chunks for a record of `length` bytes laid out by `layout` at
// `record_address`: those covering the most record bytes among the sets that
// include the valid byte's chunk (lower chunks first on ties).
WatchPlan plan_record_watch(const RecordLayout& layout, std::uint64_t record_address, std::size_t length);

// One observed state of the record.
struct RecordState {
  std::chrono::steady_clock::time_point at;
  RecordBytes bytes;  // as long as the record declared at that moment (bounded by its layout)
  // The thread's instruction pointer when it stopped. Data watchpoints trap
  // after the store, so this is the instruction FOLLOWING the store. Zero for
  // the state read when the watch began. Under qemu-user: a host address in
  // qemu's generated code.
  std::uint64_t pc_after_store = 0;
  unsigned chunks_hit = 0;      // bit i: WatchPlan::chunks[i] was written (DR6 bits 0..3)
  std::uint8_t valid_byte = 0;  // the valid byte's value
  bool valid = false;           // ... and whether the layout accepts it
};

struct UpdateOrderViolation {
  enum class Kind {
    // `after` has valid != 0 and differs from `before` (valid != 0) in other
    // bytes: a field changed while the record claimed to be valid.
    kChangedWhileValid,
    // `after` has valid == 0, but bytes that are not watched differ from
    // `before` (valid != 0). Unwatched stores do not trap and the valid byte's
    // chunk is always watched, so they happened while valid was still set; the
    // pc is that of the later store that cleared valid. (One exception cannot be
    // told apart: a single wide store that cleared valid and wrote those bytes.)
    kUnwatchedChangedWhileValid,
  };
  Kind kind = Kind::kChangedWhileValid;
  RecordState before;
  RecordState after;
  std::vector<std::size_t> changed_offsets;  // record offsets (other than valid) that differ, or exist in one state only
};

struct UpdateOrderReport {
  pid_t pid = 0;
  pid_t tid = 0;
  RecordLayout layout;  // what was watched, to name its bytes
  std::uint64_t record_address = 0;
  WatchPlan plan;
  RecordState initial;              // read when the watch began
  RecordState last;                 // the last observed state
  std::size_t stores_seen = 0;      // watchpoint hits (one per trapping store instruction)
  std::size_t updates_seen = 0;     // observed states with valid != 0 that differ from the state before them
  std::size_t violations_seen = 0;  // all of them; `violations` keeps the first kMaxKeptViolations
  std::vector<UpdateOrderViolation> violations;
  std::size_t signals_forwarded = 0;  // the target's own signals, re-delivered unchanged
  bool thread_exited = false;         // the watch ended because the thread went away
  std::string ended_because;          // "duration elapsed", "max updates reached", "thread exited"
  std::string limits;                 // what this watch could not see, in words
  // Every observed state in store order, the initial one first; the first
  // kMaxKeptStates (the HTML report draws them).
  std::vector<RecordState> states;

  static constexpr std::size_t kMaxKeptViolations = 64;
  static constexpr std::size_t kMaxKeptStates = 256;
  bool conforms() const { return violations_seen == 0; }
};

// Watches thread `tid` of process `pid` storing to its record (laid out by
// `layout`) at `record_address` for `duration`, or until `max_updates` updates
// were seen (0: no limit), or until the thread exits (not an error: the
// report says so). The watched bytes are those of the record's length when
// the watch began; each state is read at the length it declares then.
//
// The thread is seized with PTRACE_SEIZE (no SIGSTOP is sent), stopped only at
// its own stores to the record, and its own signals are re-delivered
// unchanged; group-stops are honoured with PTRACE_LISTEN. On every way out,
// errors included, the debug registers are cleared and the thread detached.
// Nothing is written into the target's memory.
//
// Blocks the calling thread for the watch (ptrace binds the attachment to it).
// Nothing else in this process may reap the target's threads meanwhile
// (waitpid(-1, ..., __WALL) would steal the watch's stops).
//
// Errors: the thread cannot be seized (gone, not permitted, already traced),
// the record cannot be read, the host is neither x86-64 nor arm64.
Expected<UpdateOrderReport> watch_update_order(pid_t pid, pid_t tid, const RecordLayout& layout,
                                               std::uint64_t record_address, std::chrono::milliseconds duration,
                                               std::size_t max_updates = 0);

// Multi-line text: the plan, counts and each kept violation with the record
// before and after (hex, split by the layout's fields) and the pc after the store.
std::string describe(const UpdateOrderReport& report);
std::string describe(const UpdateOrderViolation& violation, const RecordLayout& layout);
// "minor=0001 valid=01 ... span-id=..." by the layout's fields; bytes
// no field names follow as "rest=..." (a variable part the layout leaves unnamed).
std::string describe_record_bytes(const RecordLayout& layout, std::span<const std::uint8_t> bytes);

}  // namespace tracecorr::watch

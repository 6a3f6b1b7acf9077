// A thread's publication of its record, observed store by store: hardware
// watchpoints on the thread's pointer slot and on the record the pointer
// leads to stop the thread right after each of its stores to either, and the
// pointer and the record are read there. A protocol whose writers may swap the
// pointer to a new record, or rewrite a pointed-to record in place under a
// valid byte (OTEP 4947's two styles), judges the order of those stores from
// the states this reports; nothing here decides a verdict.
//
// One debug register watches the slot; the other three follow the pointer:
// re-armed at every store that moves it, on the record's valid byte's 8-byte
// chunk and the chunks nearest it (the header around it). Stores to the
// record's other bytes do not stop the thread; they show in the next state.
// While the thread runs, the watched bytes are also read every poll interval:
// a change no store of the thread explains (the thread is interrupted and had
// no watchpoint hit) is reported as another writer's.
//
// Host: x86-64 (debug registers; fs_base is the thread pointer) or arm64
// (NT_ARM_HW_WATCH, which traps before the store: the watch steps over it;
// TPIDR_EL0), native threads: under qemu-user the guest's thread pointer is
// not the host's. The watch needs four watchpoints (x86-64 has four; arm64
// cores have 2 to 16, and fewer than four is an error).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tracecorr/error.hpp"
#include "tracecorr/record_layout.hpp"

namespace tracecorr::watch {

struct PublishedRecordState {
  enum class Cause {
    kWatchBegan,   // read when the watch began
    kSlotStore,    // the thread stored into its pointer slot
    kRecordStore,  // the thread stored into a watched chunk of the record the pointer leads to
    kOtherWriter,  // watched record bytes changed with no store of the thread (another thread, the kernel)
  };
  Cause cause = Cause::kWatchBegan;
  std::chrono::steady_clock::time_point at;
  // The instruction after the trapping store (data watchpoints trap once the
  // store retired); 0 for kWatchBegan and kOtherWriter.
  std::uint64_t pc_after_store = 0;
  std::uint64_t pointer = 0;           // the slot's value
  std::optional<RecordBytes> record;   // what the pointer leads to; nullopt: NULL, or unreadable (read_error)
  std::optional<Error> read_error;
  // A store that moved the pointer: the record it led to before, read at this
  // store (so as it was when it stopped being reachable).
  std::optional<RecordBytes> left_record;
  // Record bytes [first, end) the registers watched while this pointer was current.
  std::vector<std::pair<std::size_t, std::size_t>> watched;
};
const char* to_string(PublishedRecordState::Cause cause);  // "watch-began", "slot-store", "record-store", "other-writer"

struct PublishedRecordWatchReport {
  pid_t pid = 0;
  pid_t tid = 0;
  std::uint64_t slot_address = 0;
  RecordLayout layout;
  std::vector<PublishedRecordState> states;  // in order, the first one when the watch began
  std::size_t stores_seen = 0;               // watchpoint hits of the thread
  std::size_t other_writer_changes = 0;      // kOtherWriter states
  std::size_t signals_forwarded = 0;         // the target's own signals, re-delivered unchanged
  bool thread_exited = false;
  // "duration elapsed", "max states reached", "thread exited", "the caller ended it"
  std::string ended_because;
  std::string limits;         // what this watch could not see, in words

  static constexpr std::size_t kMaxStates = 4096;
};

// Where the thread's pointer slot is, from its thread pointer (read while the
// thread is held by the watch).
using SlotOfThread = std::function<Expected<std::uint64_t>(std::uint64_t thread_pointer)>;
// Asked at each poll interval, from the watching thread, with the report so
// far: false ends the watch early (a caller with more threads than it can
// watch at once takes the registers of one that stores nothing to another).
using KeepWatching = std::function<bool(const PublishedRecordWatchReport& so_far)>;

// Watches thread `tid` of `pid` for `duration` (or until it exits, until
// kMaxStates states, or until `keep_watching` says no), reading records by
// `layout`; `poll_interval` is how often the watched bytes are compared while
// the thread runs. Seized with
// PTRACE_SEIZE, its own signals re-delivered unchanged; on every way out the
// registers are cleared and the thread detached. Blocks the calling thread.
// Errors: the thread cannot be seized or its slot located, the slot is not
// 8-byte aligned, the host is neither x86-64 nor arm64.
Expected<PublishedRecordWatchReport> watch_published_record(
    pid_t pid, pid_t tid, const RecordLayout& layout, const SlotOfThread& slot_of, std::chrono::milliseconds duration,
    std::chrono::milliseconds poll_interval = std::chrono::milliseconds(5), const KeepWatching& keep_watching = {});

}  // namespace tracecorr::watch

// See published_record_watch.hpp for what is observed and
// hardware_watch.hpp for the ptrace discipline.
#include "tracecorr/watch/published_record_watch.hpp"

#include <algorithm>
#include <cstdlib>

#include "hardware_watch.hpp"
#include "tracecorr/memory.hpp"

namespace tracecorr::watch {

const char* to_string(PublishedRecordState::Cause cause) {
  switch (cause) {
    case PublishedRecordState::Cause::kWatchBegan: return "watch-began";
    case PublishedRecordState::Cause::kSlotStore: return "slot-store";
    case PublishedRecordState::Cause::kRecordStore: return "record-store";
    case PublishedRecordState::Cause::kOtherWriter: return "other-writer";
  }
  return "?";
}

namespace {

using namespace hardware_watch;

// Registers: the slot's, then the record's.
constexpr std::size_t kRecordRegisters = kRegisters - 1;

struct RecordChunks {
  std::vector<std::uint64_t> addresses;
  std::vector<std::pair<std::size_t, std::size_t>> watched;  // record offsets per chunk
};

// The valid byte's chunk, then the chunks nearest it (lower first on ties):
// the header around the valid byte, where a reader's decision lies.
RecordChunks plan_chunks(const RecordLayout& layout, std::uint64_t address, std::size_t length) {
  RecordChunks plan;
  if (address == 0 || address >= kUserSpaceEnd - layout.max_size || length == 0) return plan;
  const std::uint64_t base = address & ~(kChunk - 1);
  const std::size_t count = static_cast<std::size_t>((address + length - base + kChunk - 1) / kChunk);
  const std::size_t valid_chunk = static_cast<std::size_t>((address + layout.valid_offset - base) / kChunk);
  std::vector<std::size_t> order(count);
  for (std::size_t k = 0; k < count; ++k) order[k] = k;
  auto distance = [&](std::size_t k) { return k > valid_chunk ? k - valid_chunk : valid_chunk - k; };
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return distance(a) < distance(b); });
  order.resize(std::min(order.size(), kRecordRegisters));
  std::sort(order.begin(), order.end());
  for (std::size_t k : order) {
    const std::uint64_t chunk = base + k * kChunk;
    plan.addresses.push_back(chunk);
    const std::size_t first = chunk <= address ? 0 : static_cast<std::size_t>(chunk - address);
    const std::size_t end = static_cast<std::size_t>(std::min(chunk + kChunk, address + length) - address);
    plan.watched.emplace_back(first, end);
  }
  return plan;
}

// The watched bytes of two reads of the same record differ.
bool watched_bytes_differ(const std::vector<std::pair<std::size_t, std::size_t>>& watched, const RecordBytes& a,
                          const RecordBytes& b) {
  for (const auto& [first, end] : watched)
    for (std::size_t i = first; i < end; ++i) {
      const bool in_a = i < a.size(), in_b = i < b.size();
      if (in_a != in_b || (in_a && a[i] != b[i])) return true;
    }
  return false;
}

[[maybe_unused]] std::string limits_text(pid_t tid) {
  return "One register watches the pointer slot and three the record it leads to (its valid byte's 8-byte chunk and "
         "the chunks nearest it): stores to other record bytes do not stop the thread and are seen in the next state.\n"
         "Stores to a record the pointer does not lead to are not watched (a writer builds its next record there).\n"
         "pc_after_store is the instruction after the store (x86-64 traps once the store retired; on arm64, which "
         "traps before it, the watch steps the thread over the store first).\n"
         "Another writer is seen only in the watched bytes, at the poll interval, and only when thread " +
         std::to_string(tid) + " had no watchpoint hit when interrupted.\n";
}

#if defined(TRACECORR_HARDWARE_WATCH)

class Watch {
 public:
  Watch(pid_t pid, pid_t tid, const RecordLayout& layout, PublishedRecordWatchReport& report)
      : memory_(pid), session_(pid, tid), layout_(layout), report_(report) {}

  Status begin(const SlotOfThread& slot_of) {
    if (auto st = seize_first_stop(session_, "watching the record pointer", session_.where(), report_.signals_forwarded);
        !st)
      return st;
    auto tp = session_.thread_pointer();
    if (!tp) return tp.error();
    auto slot = slot_of(*tp);
    if (!slot) return slot.error().within("locating the thread's pointer slot");
    if (*slot == 0 || *slot % kChunk != 0 || *slot >= kUserSpaceEnd)
      return make_error("the pointer slot " + hex_address(*slot) + " is not an 8-byte aligned user-space address",
                        session_.where());
    report_.slot_address = *slot;
    auto state = read_state(PublishedRecordState::Cause::kWatchBegan, 0);
    if (!state) return state.error();
    if (auto st = arm(*state); !st) return st;
    keep(std::move(*state));
    return Ok{};
  }

  Status run(std::chrono::milliseconds duration, std::chrono::milliseconds poll_interval, const KeepWatching& keep_watching) {
    const auto deadline = Clock::now() + duration;
    for (;;) {
      if (report_.states.size() >= PublishedRecordWatchReport::kMaxStates) {
        report_.ended_because = "max states reached";
        break;
      }
      if (keep_watching && !keep_watching(report_)) {
        report_.ended_because = "the caller ended it";
        break;
      }
      if (session_.held())
        if (auto st = session_.resume(); !st) return st;
      auto stop = session_.next_stop(std::min(deadline, Clock::now() + poll_interval));
      if (!stop) {
        if (Clock::now() >= deadline) {
          report_.ended_because = "duration elapsed";
          break;
        }
        if (auto st = look_for_other_writer(); !st) return st;
        if (report_.thread_exited) break;
        continue;
      }
      if (auto st = on_stop(*stop); !st) return st;
      if (report_.thread_exited) break;
    }
    session_.release();
    return Ok{};
  }

 private:
  Expected<PublishedRecordState> read_state(PublishedRecordState::Cause cause, std::uint64_t pc) {
    PublishedRecordState s;
    s.cause = cause;
    s.at = Clock::now();
    s.pc_after_store = pc;
    auto pointer = memory_.read_u64(report_.slot_address);
    if (!pointer) return pointer.error().within("reading the pointer slot");
    s.pointer = *pointer;
    if (s.pointer != 0) {
      if (auto read = read_record(memory_, layout_, s.pointer)) s.record = std::move(read->bytes);
      else s.read_error = read.error();
    }
    return s;
  }

  // Points the record registers at the record `state` leads to.
  Status arm(PublishedRecordState& state) {
    auto chunks = plan_chunks(layout_, state.pointer, state.record ? state.record->size() : 0);
    std::vector<std::uint64_t> addresses{report_.slot_address};
    addresses.insert(addresses.end(), chunks.addresses.begin(), chunks.addresses.end());
    state.watched = chunks.watched;
    return session_.arm(addresses);
  }

  void keep(PublishedRecordState state) { report_.states.push_back(std::move(state)); }
  const PublishedRecordState& last() const { return report_.states.back(); }

  Status on_stop(const Stop& stop) {
    if (stop.kind == Stop::Kind::kExited) {
      report_.thread_exited = true;
      report_.ended_because = "thread exited";
      return Ok{};
    }
    if (stop.kind != Stop::Kind::kSignal) return Ok{};  // group-stop: listen; interrupt: continue
    // Ours or the target's; for ours the store has completed (arm64 traps
    // before it: take_signal() steps over it) and the resume signal is set.
    auto signal = session_.take_signal(stop);
    if (!signal) return signal.error();
    using Taken = WatchSession::SignalStop::Kind;
    if (signal->kind == Taken::kTheTargets) {
      ++report_.signals_forwarded;
      return Ok{};
    }
    if (signal->kind == Taken::kCameFirst) return on_stop(signal->came_first);
    // Its hit was read at look_for_other_writer()'s interrupt and handled there.
    if (signal->kind == Taken::kTakenEarlier) return Ok{};
    return on_hits(signal->hits);
  }

  Status on_hits(unsigned hits) {
    ++report_.stores_seen;
    auto pc = session_.instruction_pointer();
    if (!pc) return pc.error();
    const auto cause = (hits & 1u) ? PublishedRecordState::Cause::kSlotStore : PublishedRecordState::Cause::kRecordStore;
    auto state = read_state(cause, *pc);
    if (!state) return state.error();
    const auto& before = last();
    if (state->pointer != before.pointer) {
      if (before.pointer != 0)
        if (auto left = read_record(memory_, layout_, before.pointer)) state->left_record = std::move(left->bytes);
      if (auto st = arm(*state); !st) return st;
    } else {
      state->watched = before.watched;
    }
    keep(std::move(*state));
    return Ok{};
  }

  // The thread runs: have the watched bytes changed? If so, stop it and ask
  // its debug status whether its own store did it.
  Status look_for_other_writer() {
    const auto& before = last();
    if (before.pointer == 0 || !before.record) return Ok{};
    auto now = read_record(memory_, layout_, before.pointer);
    if (!now || !watched_bytes_differ(before.watched, *before.record, now->bytes)) return Ok{};
    auto stop = session_.interrupt(std::chrono::seconds(5));
    if (!stop) return stop.error();
    if (stop->kind != Stop::Kind::kEventStop) return on_stop(*stop);  // its own trap, a signal, or its exit came first
    auto hits = session_.take_hits();
    if (!hits) return hits.error();
    if (*hits != 0) return on_hits(*hits);  // its own store, its SIGTRAP still pending (swallowed when it comes)
    auto state = read_state(PublishedRecordState::Cause::kOtherWriter, 0);
    if (!state) return state.error();
    if (state->pointer != before.pointer || !state->record ||
        !watched_bytes_differ(before.watched, *before.record, *state->record))
      return Ok{};  // changed back meanwhile: nothing to show
    state->watched = before.watched;
    ++report_.other_writer_changes;
    keep(std::move(*state));
    return Ok{};
  }

  LiveProcessMemory memory_;
  WatchSession session_;
  const RecordLayout& layout_;
  PublishedRecordWatchReport& report_;
};

#endif

}  // namespace

Expected<PublishedRecordWatchReport> watch_published_record(pid_t pid, pid_t tid, const RecordLayout& layout,
                                                            const SlotOfThread& slot_of, std::chrono::milliseconds duration,
                                                            std::chrono::milliseconds poll_interval,
                                                            const KeepWatching& keep_watching) {
  const std::string where = thread_where(pid, tid);
  if (pid <= 0 || tid <= 0) return make_error("pid and tid must be positive", where);
  if (auto st = layout.check(); !st) return st.error().within(where);
#if !defined(TRACECORR_HARDWARE_WATCH)
  (void)slot_of;
  (void)duration;
  (void)poll_interval;
  (void)keep_watching;
  return make_error("hardware watchpoints are implemented for x86-64 and arm64 hosts only", where);
#else
  if (running_under_qemu(pid))
    return make_error("the thread runs under qemu-user: its thread pointer is the guest's, not the host's", where);
  PublishedRecordWatchReport report;
  report.pid = pid;
  report.tid = tid;
  report.layout = layout;
  report.limits = limits_text(tid);
  Watch watch(pid, tid, layout, report);
  if (auto st = watch.begin(slot_of); !st) return st.error().within(where);
  if (auto st = watch.run(duration, poll_interval, keep_watching); !st) return st.error().within(where);
  return report;
#endif
}

}  // namespace tracecorr::watch

// A record's update order by hardware watchpoints; see update_order.hpp for the invariant and
// hardware_watch.hpp for the ptrace discipline.
#include "tracecorr/watch/update_order.hpp"

#include <algorithm>
#include <cstddef>
#include <sstream>

#include "hardware_watch.hpp"
#include "tracecorr/memory.hpp"

namespace tracecorr::watch {
namespace {

using namespace hardware_watch;

std::string hex_bytes(const std::uint8_t* p, std::size_t n) {
  static const char digits[] = "0123456789abcdef";
  std::string s;
  for (std::size_t i = 0; i < n; ++i) {
    s += digits[p[i] >> 4];
    s += digits[p[i] & 15];
  }
  return s;
}

// "record bytes 32..36 (span-id bytes 3..7)"; a run spanning fields
// names each part, by the layout's fields; bytes no field covers are "unnamed".
std::string describe_offset_runs(const std::vector<std::size_t>& offsets, const std::vector<RecordField>& fields) {
  auto field_at = [&](std::size_t offset) -> const RecordField* {
    for (const auto& f : fields)
      if (offset >= f.offset && offset - f.offset < f.size) return &f;
    return nullptr;
  };
  std::string out;
  std::size_t i = 0;
  while (i < offsets.size()) {
    std::size_t j = i;
    while (j + 1 < offsets.size() && offsets[j + 1] == offsets[j] + 1) ++j;
    std::string parts;
    for (std::size_t k = i; k <= j;) {
      const RecordField* f = field_at(offsets[k]);
      std::size_t last = k;
      if (f) {
        while (last + 1 <= j && offsets[last + 1] < f->offset + f->size) ++last;
      } else {
        while (last + 1 <= j && !field_at(offsets[last + 1])) ++last;
      }
      if (!parts.empty()) parts += ", ";
      if (!f) {
        parts += "unnamed";
      } else {
        std::size_t a = offsets[k] - f->offset, b = offsets[last] - f->offset;
        parts += f->name + (f->size == 1 ? "" : a == b ? " byte " + std::to_string(a)
                                                       : " bytes " + std::to_string(a) + ".." + std::to_string(b));
      }
      k = last + 1;
    }
    if (!out.empty()) out += "; ";
    out += (i == j ? "record byte " + std::to_string(offsets[i])
                   : "record bytes " + std::to_string(offsets[i]) + ".." + std::to_string(offsets[j])) +
           " (" + parts + ")";
    i = j + 1;
  }
  return out;
}

// Applies the invariant to one newly observed state.
class OrderChecker {
 public:
  explicit OrderChecker(UpdateOrderReport& report) : report_(report) {}

  void observe(RecordState next) {
    const RecordState& before = report_.last;
    const std::size_t valid_offset = report_.layout.valid_offset;
    ++report_.stores_seen;
    if (next.valid && next.bytes != before.bytes) ++report_.updates_seen;
    if (before.valid) {
      // A record whose length changed (its size field) differs in the bytes only one state has.
      std::vector<std::size_t> changed;
      const std::size_t longest = std::max(before.bytes.size(), next.bytes.size());
      for (std::size_t i = 0; i < longest; ++i) {
        if (i == valid_offset) continue;
        const bool both = i < before.bytes.size() && i < next.bytes.size();
        if (!both || before.bytes[i] != next.bytes[i]) changed.push_back(i);
      }
      if (!changed.empty()) {
        if (next.valid) {
          add({UpdateOrderViolation::Kind::kChangedWhileValid, before, next, changed});
        } else {
          // Watched bytes that changed together with valid := 0 were written
          // by that one trapping store (any other store to them would have
          // trapped first): atomic for a reader, so conforming. Unwatched ones
          // were written earlier, while valid was still set.
          std::vector<std::size_t> unwatched;
          for (auto i : changed)
            if (i >= report_.plan.watched.size() || !report_.plan.watched[i]) unwatched.push_back(i);
          if (!unwatched.empty())
            add({UpdateOrderViolation::Kind::kUnwatchedChangedWhileValid, before, next, unwatched});
        }
      }
    }
    if (report_.states.size() < UpdateOrderReport::kMaxKeptStates) report_.states.push_back(next);
    report_.last = std::move(next);
  }

 private:
  void add(UpdateOrderViolation v) {
    ++report_.violations_seen;
    if (report_.violations.size() < UpdateOrderReport::kMaxKeptViolations) report_.violations.push_back(std::move(v));
  }
  UpdateOrderReport& report_;
};

[[maybe_unused]] Expected<RecordState> read_state(const LiveProcessMemory& memory, const RecordLayout& layout, std::uint64_t address,
                                 std::uint64_t pc, unsigned hits) {
  RecordState s;
  auto read = read_record(memory, layout, address);
  if (!read) return read.error().within("reading the watched record");
  s.bytes = std::move(read->bytes);
  s.valid_byte = s.bytes[layout.valid_offset];  // inside the fixed part, which read_record always reads
  s.valid = layout.valid(s.bytes);
  s.at = Clock::now();
  s.pc_after_store = pc;
  s.chunks_hit = hits;
  return s;
}

[[maybe_unused]] std::string limits_text(const UpdateOrderReport& r, bool under_qemu) {
  std::string t;
  std::string unwatched = r.plan.unwatched_description();
  if (!unwatched.empty())
    t += unwatched + " lie outside the " + std::to_string(r.plan.chunks.size()) + " watched " +
         std::to_string(kWatchChunkSize) +
         "-byte chunks: stores to them do not stop the thread and are seen only at its next watched store "
         "(a change made while the valid byte was set is still flagged, with that later store's pc).\n";
  t += "pc_after_store is the instruction after the store (x86-64 traps once the store retired; on arm64, which traps "
       "before it, the watch steps the thread over the store first).\n";
  if (under_qemu)
    t += "The thread runs qemu-user: pc_after_store is a host address in qemu's generated code, not a guest pc.\n";
  t += "Only user-mode stores by thread " + std::to_string(r.tid) +
       " are seen; other threads' stores and the kernel's (e.g. read() into the record) are not.\n";
  t += "A store that rewrites a byte with its current value is counted in stores_seen but changes no state.\n";
  t += "SIGTRAP does not queue: one the target is sent while a watchpoint's SIGTRAP is pending is merged into it by "
       "the kernel and never delivered (other signals are handed back unchanged).\n";
  return t;
}

}  // namespace

std::size_t WatchPlan::watched_bytes() const { return static_cast<std::size_t>(std::count(watched.begin(), watched.end(), true)); }

std::string WatchPlan::unwatched_description() const {
  std::vector<std::size_t> offsets;
  for (std::size_t i = 0; i < watched.size(); ++i)
    if (!watched[i]) offsets.push_back(i);
  return describe_offset_runs(offsets, fields);
}

WatchPlan plan_record_watch(const RecordLayout& layout, std::uint64_t record_address, std::size_t length) {
  WatchPlan plan;
  plan.fields = layout.fields;
  plan.watched.assign(length, false);
  if (length == 0) return plan;
  const std::uint64_t base = record_address & ~std::uint64_t{kWatchChunkSize - 1};
  const std::uint64_t end = record_address + length;
  const std::size_t chunk_count = static_cast<std::size_t>((end - base + kWatchChunkSize - 1) / kWatchChunkSize);
  const std::size_t valid_chunk = static_cast<std::size_t>((record_address + layout.valid_offset - base) / kWatchChunkSize);

  auto chunk = [&](std::size_t k) {
    std::uint64_t a = base + k * kWatchChunkSize;
    WatchChunk c;
    c.address = a;
    c.first_record_offset = a <= record_address ? 0 : static_cast<std::size_t>(a - record_address);
    c.end_record_offset = static_cast<std::size_t>(std::min(a + kWatchChunkSize, end) - record_address);
    return c;
  };
  auto covered = [&](std::size_t k) { auto c = chunk(k); return c.end_record_offset - c.first_record_offset; };

  // The valid byte's chunk, then the others covering the most record bytes
  // (only the first and last chunk can cover fewer than 8), lower ones first
  // on ties. A 640-byte record has 81 chunks: no subset search.
  std::vector<std::size_t> others;
  for (std::size_t k = 0; k < chunk_count; ++k)
    if (k != valid_chunk) others.push_back(k);
  std::stable_sort(others.begin(), others.end(), [&](std::size_t a, std::size_t b) { return covered(a) > covered(b); });
  std::vector<std::size_t> chosen{valid_chunk};
  for (std::size_t k : others) {
    if (chosen.size() >= kWatchRegisters) break;
    chosen.push_back(k);
  }
  std::sort(chosen.begin(), chosen.end());
  for (std::size_t k : chosen) {
    auto c = chunk(k);
    for (std::size_t i = c.first_record_offset; i < c.end_record_offset; ++i) plan.watched[i] = true;
    plan.chunks.push_back(c);
  }
  return plan;
}

Expected<UpdateOrderReport> watch_update_order(pid_t pid, pid_t tid, const RecordLayout& layout,
                                               std::uint64_t record_address, std::chrono::milliseconds duration,
                                               std::size_t max_updates) {
  const std::string where = thread_where(pid, tid) + " record " + hex_address(record_address);
  if (pid <= 0 || tid <= 0) return make_error("pid and tid must be positive", where);
  if (auto st = layout.check(); !st) return st.error().within(where);
  if (record_address == 0 || record_address > kUserSpaceEnd - layout.max_size)
    return make_error("the record address is not a user-space address", where);
#if !defined(TRACECORR_HARDWARE_WATCH)
  (void)duration;
  (void)max_updates;
  return make_error("hardware watchpoints are implemented for x86-64 and arm64 hosts only", where);
#else
  LiveProcessMemory memory(pid);
  // The plan covers the record as long as it is now (a size field may change
  // it later). An unreadable record is reported by the first read under the
  // watch, so that error leaves through the same release as every other.
  auto before_watch = read_record(memory, layout, record_address);
  const std::size_t planned_length = before_watch ? before_watch->bytes.size() : layout.fixed_part();
  UpdateOrderReport report;
  report.pid = pid;
  report.tid = tid;
  report.layout = layout;
  report.record_address = record_address;
  report.plan = plan_record_watch(layout, record_address, planned_length);
  report.limits = limits_text(report, running_under_qemu(pid));

  WatchSession session(pid, tid);
  if (auto st = seize_first_stop(session, "watching the record", where, report.signals_forwarded); !st) return st.error();

  std::vector<std::uint64_t> chunk_addresses;
  for (const auto& c : report.plan.chunks) chunk_addresses.push_back(c.address);
  if (auto st = session.arm(chunk_addresses); !st) return st.error().within(where);
  auto initial = read_state(memory, layout, record_address, 0, 0);
  if (!initial) return initial.error().within(thread_where(pid, tid));
  report.initial = report.last = *initial;
  report.states.push_back(*initial);

  OrderChecker checker(report);
  const auto deadline = Clock::now() + duration;
  for (;;) {
    if (max_updates != 0 && report.updates_seen >= max_updates) {
      report.ended_because = "max updates reached";
      break;
    }
    if (auto st = session.resume(); !st) return st.error();
    auto stop = session.next_stop(deadline);
    if (!stop) {
      report.ended_because = "duration elapsed";
      break;
    }
    if (stop->kind == Stop::Kind::kExited) {
      report.thread_exited = true;
      report.ended_because = "thread exited";
      break;
    }
    // Ours or the target's; for ours the store has completed (arm64 traps
    // before it: take_signal() steps over it) and the resume signal is set.
    // A stop that came before our store is handled in its place.
    std::optional<Stop> pending = *stop;
    while (pending && pending->kind == Stop::Kind::kSignal) {
      auto signal = session.take_signal(*pending);
      if (!signal) return signal.error();
      pending.reset();
      using Taken = WatchSession::SignalStop::Kind;
      if (signal->kind == Taken::kTheTargets) {
        ++report.signals_forwarded;
      } else if (signal->kind == Taken::kCameFirst) {
        pending = signal->came_first;
      } else if (signal->kind == Taken::kStoreDone) {
        auto pc = session.instruction_pointer();
        if (!pc) return pc.error();
        auto state = read_state(memory, layout, record_address, *pc, signal->hits);
        if (!state)
          return state.error().within(thread_where(pid, tid) + " after store " + std::to_string(report.stores_seen + 1));
        checker.observe(std::move(*state));
      }
    }
    if (pending && pending->kind == Stop::Kind::kExited) {
      report.thread_exited = true;
      report.ended_because = "thread exited";
      break;
    }
  }
  session.release();
  return report;
#endif
}

std::string describe_record_bytes(const RecordLayout& layout, std::span<const std::uint8_t> bytes) {
  std::string s;
  std::size_t named_end = 0;
  for (const auto& f : layout.fields) {
    if (f.offset >= bytes.size()) continue;  // a state shorter than the field's place
    if (!s.empty()) s += ' ';
    const std::size_t n = std::min(f.size, bytes.size() - f.offset);
    s += f.name + "=" + hex_bytes(bytes.data() + f.offset, n);
    named_end = std::max(named_end, f.offset + n);
  }
  if (bytes.size() > named_end) s += (s.empty() ? "" : " ") + std::string("rest=") + hex_bytes(bytes.data() + named_end, bytes.size() - named_end);
  return s;
}

std::string describe(const UpdateOrderViolation& v, const RecordLayout& layout) {
  std::ostringstream o;
  o << (v.kind == UpdateOrderViolation::Kind::kChangedWhileValid
            ? "fields changed while the valid byte was set, without clearing it first"
            : "unwatched fields changed while the valid byte was set (seen at the later store that cleared it)")
    << ": " << describe_offset_runs(v.changed_offsets, layout.fields) << "\n"
    << "  before: " << describe_record_bytes(layout, v.before.bytes)
    << (v.before.pc_after_store ? "  (pc after store " + hex_address(v.before.pc_after_store) + ")" : "  (state when the watch began)")
    << "\n"
    << "  after:  " << describe_record_bytes(layout, v.after.bytes) << "  (pc after store " << hex_address(v.after.pc_after_store) << ")";
  return o.str();
}

std::string describe(const UpdateOrderReport& r) {
  std::ostringstream o;
  o << "update order, " << thread_where(r.pid, r.tid) << ", record " << hex_address(r.record_address) << ": "
    << (r.conforms() ? "no violation" : std::to_string(r.violations_seen) + " violation(s)") << "\n"
    << "  watched: ";
  for (std::size_t i = 0; i < r.plan.chunks.size(); ++i)
    o << (i ? ", " : "") << hex_address(r.plan.chunks[i].address) << " (record bytes " << r.plan.chunks[i].first_record_offset
      << ".." << r.plan.chunks[i].end_record_offset - 1 << ")";
  o << "\n  stores seen " << r.stores_seen << ", updates seen " << r.updates_seen << ", signals forwarded "
    << r.signals_forwarded << "; ended: " << r.ended_because << "\n";
  for (const auto& v : r.violations) o << describe(v, r.layout) << "\n";
  if (r.violations.size() < r.violations_seen)
    o << "  (" << r.violations_seen - r.violations.size() << " more not kept)\n";
  o << "  limits:\n";
  std::istringstream lines(r.limits);
  for (std::string line; std::getline(lines, line);) o << "    " << line << "\n";
  return o.str();
}

}  // namespace tracecorr::watch

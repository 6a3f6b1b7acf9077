// publication (TCTX-21..26, 28): each thread's stores to its pointer and
// record, under hardware watchpoints (the published-record watch).
#include "probes.hpp"

#include <algorithm>

#include "judges.hpp"
#include "judging.hpp"
#include "otel_thread_context/registry.hpp"
#include "tracecorr/memory.hpp"

namespace tracecorr::otel_thread_context {

bool valid_record(const std::optional<RecordBytes>& r) {
  return r && r->size() > spec::kRecordValidOffset && (*r)[spec::kRecordValidOffset] == spec::kRecordValidValue;
}

namespace {

using State = watch::PublishedRecordState;

bool is_size_offset(std::size_t i) {
  return i >= spec::kRecordAttrsDataSizeOffset && i < spec::kRecordAttrsDataSizeOffset + spec::kRecordAttrsDataSizeSize;
}

// Offsets other than valid that differ (or exist in one record only).
std::vector<std::size_t> changed_offsets(const RecordBytes& a, const RecordBytes& b) {
  std::vector<std::size_t> out;
  for (std::size_t i = 0; i < std::max(a.size(), b.size()); ++i) {
    if (i == spec::kRecordValidOffset) continue;
    if (i >= a.size() || i >= b.size() || a[i] != b[i]) out.push_back(i);
  }
  return out;
}

bool watched_offset(const State& s, std::size_t i) {
  return std::any_of(s.watched.begin(), s.watched.end(), [i](const auto& r) { return i >= r.first && i < r.second; });
}

std::string offsets_text(const std::vector<std::size_t>& offsets) {
  if (offsets.empty()) return "none";
  std::string s = std::to_string(offsets.front());
  if (offsets.size() > 1) s += ".." + std::to_string(offsets.back());
  return "record byte(s) " + s + " (" + std::to_string(offsets.size()) + ")";
}

// What one thread's watch showed, by rule.
struct ThreadVerdicts {
  pid_t tid = 0;
  std::size_t swaps = 0;          // stores moving the pointer to another record
  std::size_t flips = 0;          // valid changed on the record still pointed to
  std::size_t publications = 0;   // stores making the pointer lead to a valid record
  std::size_t updates = 0;        // valid 0 -> 1 on a pointed-to record
  std::size_t growths = 0;        // attrs_data_size grew with the new bytes already there
  bool watched_a_record = false;  // the pointer led to a record at some point
  // Bytes of a visible record that changed outside the ceremony: appended
  // bytes (TCTX-25) or other bytes (TCTX-21 or 23, by the thread's style).
  std::optional<std::string> append_breach, change_breach;
  std::optional<std::string> other_writer;  // TCTX-28
};

ThreadVerdicts walk(const watch::PublishedRecordWatchReport& r) {
  ThreadVerdicts v;
  v.tid = r.tid;
  if (r.states.empty()) return v;
  std::optional<std::uint64_t> last_record;  // the last non-NULL pointer
  std::optional<std::pair<std::size_t, std::size_t>> grown;  // the region the latest growth added
  auto at = [&](const State& s) {
    return thread_text(r.tid) + ", record " + hex_address(s.pointer) + ", " + to_string(s.cause) +
           (s.pc_after_store ? " (pc after store " + hex_address(s.pc_after_store) + ")" : "");
  };
  auto breach = [&](const State& s, const std::vector<std::size_t>& offsets, const std::string& how) {
    const bool appended = grown && std::all_of(offsets.begin(), offsets.end(), [&](std::size_t i) {
                            return i >= grown->first && i < grown->second;
                          });
    auto& slot = appended ? v.append_breach : v.change_breach;
    if (!slot)
      slot = at(s) + ": " + offsets_text(offsets) + (appended ? " appended by the last size store" : "") + " " + how;
  };
  const State* prev = &r.states.front();
  if (prev->pointer) last_record = prev->pointer, v.watched_a_record = true;
  for (std::size_t k = 1; k < r.states.size(); ++k) {
    const State& s = r.states[k];
    if (s.cause == State::Cause::kOtherWriter) {
      if (!v.other_writer && prev->record && s.record)
        v.other_writer = at(s) + ": " + offsets_text(changed_offsets(*prev->record, *s.record)) +
                         " changed while the thread made no store to them";
      prev = &s;
      continue;
    }
    if (s.pointer != prev->pointer) {
      // The record left: a visible one must be as it was when last seen.
      if (prev->pointer && valid_record(prev->record) && s.left_record) {
        auto changed = changed_offsets(*prev->record, *s.left_record);
        std::vector<std::size_t> inside;
        for (auto i : changed)
          if (i < prev->record->size()) inside.push_back(i);
        if (!inside.empty()) breach(s, inside, "changed in the visible record before the pointer moved away");
      }
      if (s.pointer) {
        v.watched_a_record = true;
        if (last_record && *last_record != s.pointer) ++v.swaps;
        last_record = s.pointer;
        if (valid_record(s.record)) ++v.publications;
      }
      grown.reset();
      prev = &s;
      continue;
    }
    if (s.pointer && prev->record && s.record) {
      const bool was_valid = valid_record(prev->record), is_valid = valid_record(s.record);
      if (was_valid != is_valid) ++v.flips;
      if (!was_valid && is_valid) ++v.updates;
      if (was_valid) {
        auto changed = changed_offsets(*prev->record, *s.record);
        const std::size_t old_length = prev->record->size();
        std::vector<std::size_t> others;
        bool size_changed = false;
        for (auto i : changed) {
          if (is_size_offset(i)) size_changed = true;
          else if (i < old_length && i < s.record->size()) others.push_back(i);
        }
        if (is_valid) {
          if (!others.empty()) breach(s, others, "changed while the record was visible and valid");
          else if (size_changed && s.record->size() > old_length) {
            ++v.growths;
            grown = std::make_pair(old_length, s.record->size());
          }
        } else {
          // Bytes changed together with valid := 0 by the one trapping store
          // are atomic for a reader; unwatched ones changed earlier, while valid.
          std::vector<std::size_t> unwatched;
          for (auto i : others)
            if (!watched_offset(s, i)) unwatched.push_back(i);
          if (!unwatched.empty()) breach(s, unwatched, "changed while valid (unwatched: seen when valid was cleared)");
        }
      }
    }
    prev = &s;
  }
  return v;
}

// Two watches of one thread, one after the other.
void merge(ThreadVerdicts& into, const ThreadVerdicts& more) {
  into.tid = more.tid;
  into.swaps += more.swaps, into.flips += more.flips, into.publications += more.publications;
  into.updates += more.updates, into.growths += more.growths;
  into.watched_a_record = into.watched_a_record || more.watched_a_record;
  if (!into.append_breach) into.append_breach = more.append_breach;
  if (!into.change_breach) into.change_breach = more.change_breach;
  if (!into.other_writer) into.other_writer = more.other_writer;
}

// "per thread (swaps/flips): 123 21/0, 124 19/0, 125 0/0; 2 thread(s) never watched"
std::string per_thread_text(const std::vector<ThreadVerdicts>& threads, std::size_t unwatched) {
  constexpr std::size_t kShown = 16;
  std::string s = "per thread (swaps/flips):";
  for (std::size_t i = 0; i < threads.size() && i < kShown; ++i)
    s += (i ? ", " : " ") + std::to_string(threads[i].tid) + " " + std::to_string(threads[i].swaps) + "/" +
         std::to_string(threads[i].flips);
  if (threads.size() > kShown) s += ", ... (" + std::to_string(threads.size() - kShown) + " more)";
  if (unwatched) s += "; " + std::to_string(unwatched) + " thread(s) never watched (more threads than watches)";
  return s;
}

}  // namespace

std::vector<Finding> judge_publication(const ThreadContextFacts& watched) {
  static const std::vector<std::string> ids{"TCTX-21", "TCTX-22", "TCTX-23", "TCTX-24",
                                            "TCTX-25", "TCTX-26", "TCTX-28"};
  std::vector<Finding> out;
  auto all = [&](const std::string& why) {
    for (const auto& id : ids) out.push_back(not_applicable(id, why));
    return out;
  };
  if (watched.not_found) return all("no thread-context writer: " + watched.not_found->message());
  if (!watched.watch_unavailable.empty()) return all("no watch: " + watched.watch_unavailable);
  // Per thread: a thread that gave way to others has several watches.
  std::map<pid_t, ThreadVerdicts> by_thread;
  std::string errors;
  for (const auto& w : watched.watches) {
    if (w.report) merge(by_thread[w.tid], walk(*w.report));
    else if (w.error && errors.empty()) errors = thread_text(w.tid) + ": " + w.error->message();
  }
  std::vector<ThreadVerdicts> threads;
  for (auto& [tid, v] : by_thread) threads.push_back(std::move(v));
  if (threads.empty()) return all(watched.watches.empty() ? "no thread was watched" : "no watch ran (" + errors + ")");

  std::size_t swaps = 0, flips = 0, publications = 0, updates = 0, growths = 0, records = 0;
  std::optional<std::string> swap_breach, place_breach, append_breach, mixed, other;
  for (const auto& t : threads) {
    swaps += t.swaps, flips += t.flips, publications += t.publications, updates += t.updates, growths += t.growths;
    records += t.watched_a_record ? 1 : 0;
    if (t.change_breach) (t.swaps > 0 ? swap_breach : place_breach) = *t.change_breach;
    if (t.append_breach && !append_breach) append_breach = *t.append_breach;
    if (t.swaps > 0 && t.flips > 0 && !mixed)
      mixed = thread_text(t.tid) + ": " + std::to_string(t.swaps) + " pointer swap(s) and " + std::to_string(t.flips) +
              " change(s) of valid on a record still pointed to";
    if (t.other_writer && !other) other = *t.other_writer;
  }
  const std::string seen = std::to_string(threads.size()) + " thread(s) watched: " + std::to_string(swaps) +
                           " pointer swap(s), " + std::to_string(flips) + " valid flip(s), " + std::to_string(growths) +
                           " append(s); " + per_thread_text(threads, watched.threads_unwatched);
  // A watch that saw the writer change (almost) nothing has too few updates
  // to judge by any rule of publication (a writer starved of CPU, or idle
  // while watched): inconclusive, not "no swap seen", which would let a gate
  // pass unjudged (kMinWatchedChanges).
  const std::size_t changes = swaps + flips;
  const bool saw_too_little = changes < kMinWatchedChanges;
  const auto unobserved = [&](const std::string& id) {
    return kit_error(id, "inconclusive: the watch saw " + std::to_string(changes) + " pointer swap(s) and valid flip(s), " +
                             "fewer than the " + std::to_string(kMinWatchedChanges) + " a verdict needs (" + seen +
                             "): a writer starved of CPU or idle while watched; run again, or with a longer --duration");
  };
  // TCTX-21
  if (swap_breach) out.push_back(violated("TCTX-21", *swap_breach));
  else if (saw_too_little) out.push_back(unobserved("TCTX-21"));
  else if (swaps == 0 && publications == 0) out.push_back(not_applicable("TCTX-21", "no pointer swap seen (" + seen + ")"));
  else out.push_back(met("TCTX-21", publications, std::to_string(publications) + " pointer store(s) to a complete, valid "
                                                                                  "record, none changed while visible (" + seen + ")"));
  out.push_back(not_applicable("TCTX-22", "a freedom the writer has (MAY), never judged against it"));
  // TCTX-23
  if (place_breach) out.push_back(violated("TCTX-23", *place_breach));
  else if (saw_too_little) out.push_back(unobserved("TCTX-23"));
  else if (updates == 0) out.push_back(not_applicable("TCTX-23", "no in-place update seen (" + seen + ")"));
  else out.push_back(met("TCTX-23", updates, std::to_string(updates) + " in-place update(s), each under valid 0 (" + seen + ")"));
  // TCTX-24
  if (mixed) out.push_back(violated("TCTX-24", *mixed));
  else if (saw_too_little) out.push_back(unobserved("TCTX-24"));
  else out.push_back(met("TCTX-24", swaps + flips, "each thread used one style (" + seen + ")"));
  // TCTX-25
  if (append_breach) out.push_back(violated("TCTX-25", *append_breach));
  else if (saw_too_little) out.push_back(unobserved("TCTX-25"));
  else if (growths == 0) out.push_back(not_applicable("TCTX-25", "no record grew while watched (" + seen + ")"));
  else out.push_back(met("TCTX-25", growths, std::to_string(growths) + " append(s): the entries were in place when the larger "
                                                                         "attrs_data_size was stored"));
  out.push_back(not_applicable("TCTX-26", "a freedom the writer has (MAY), never judged against it: " +
                                              std::to_string(growths) + " append(s) seen"));
  // TCTX-28
  if (other) out.push_back(violated("TCTX-28", *other));
  else if (records == 0) out.push_back(not_applicable("TCTX-28", "no watched thread had a record (" + seen + ")"));
  else out.push_back(met("TCTX-28", records, std::to_string(records) + " thread(s)' records watched: every change was a "
                                                                         "store of the thread itself"));
  return out;
}

namespace {

// Each thread's stores to its pointer and record, under hardware watchpoints
// (TCTX-27, detaching, needs the spans' end times: DetachProbe).
class PublicationProbe final : public SessionProbe {
 public:
  PublicationProbe() : SessionProbe("publication", requirement_range(21, 28, 27), kWatchedSession) {}
  std::vector<Finding> judge(const conform::SessionEvidence&, const ThreadContextFacts& f) const override {
    return judge_publication(f);
  }
};

}  // namespace

std::unique_ptr<conform::Probe> make_publication_probe() { return std::make_unique<PublicationProbe>(); }

}  // namespace tracecorr::otel_thread_context

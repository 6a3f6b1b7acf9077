// spans (NJS-13, 14, 15): the records the looks read against the spans the
// writer exported to the session's receiver.
//
// A look reads each thread stopped; the thread stopped after the look began
// and before its read ran, so its record held at some time between the two
// (CLOCK_MONOTONIC, put on the spans' clock by the session's
// conform::ReadClock, to within kClockMargin). A valid record names a span by
// its ids, and the exported span says when it ran and with which flags.
// Each judgement takes the end of that interval that favours the writer, so
// a thread slow to stop (starved of a CPU) is never held against it. What a
// writer may do between taking a span's time and its store (or just after)
// is bounded in its own time, kWorkMargin: the wall time around the read less
// all the thread may have waited in run queues (schedstat at its looks), so a
// starved writer is not failed on a bare wall-clock margin either. Verdicts
// rest on ids and times the writer itself exported.
//
// NJS-13 is judged on what a look shows, not on what it misses: a runtime
// whose tasks interleave on one thread leaves a span open across an await
// while no context is entered, so a look finding no record under an open
// span proves nothing. What does: a valid record naming a span id its trace
// never exported (ids torn or mangled: "written whole"), a span that began
// after the read, or, when the spans carry `thread.id`, another span than the
// one span open on that thread at the read.
#include <algorithm>
#include <map>

#include "probes.hpp"
#include "tracecorr/conform/exported_spans.hpp"
#include "tracecorr/ids.hpp"
#include "tracecorr/own_time.hpp"

namespace tracecorr::otel_nodejs_thread_context {
namespace {

// How far a read's time on the spans' clock may be from the writer's own
// reading of it (conform::incomparable refuses a session placed less well).
constexpr std::int64_t kClockMargin = 25'000'000;  // ns
// What a writer may do, in its own time, between taking a span's time and
// storing its record, or clearing it.
constexpr std::int64_t kWorkMargin = 50'000'000;  // ns

bool names_a_span(const ThreadLookFacts& t) {
  return t.record && t.record->readable() && !(is_zero(t.record->trace_id) && is_zero(t.record->span_id));
}

// No valid record: the context ended or was never attached (a closed gate, a
// detached key, an invalidated record).
bool shows_no_context(const ThreadLookFacts& t) {
  if (!t.end) return false;
  if (t.record) return !t.record->readable();
  return *t.end != WalkEnd::Failed && *t.end != WalkEnd::Record;
}

std::string look_text(const ThreadLookFacts& t) { return "thread " + std::to_string(t.tid); }

std::string span_text(const TraceId& trace, const SpanId& span) { return "trace " + to_hex(trace) + ", span " + to_hex(span); }

std::optional<std::int64_t> thread_id_of(const otlp::ReceivedSpan& s) {
  auto it = s.attributes.find("thread.id");
  if (it == s.attributes.end()) return std::nullopt;
  if (const auto* i = std::get_if<std::int64_t>(&it->second.value)) return *i;
  return std::nullopt;
}

std::string ms_of(std::int64_t ns) { return std::to_string(ns / 1000000) + " ms"; }

struct Reads {
  conform::ExportedSpans exported;
  conform::ReadClock clock;
  std::vector<const ThreadLookFacts*> in_order;  // by thread, then time
  std::map<pid_t, std::vector<RunQueueMark>> marks;  // per thread, one per look that read its waits
  std::map<std::int64_t, std::vector<const otlp::ReceivedSpan*>> by_thread;  // spans carrying thread.id
  std::map<TraceId, std::size_t> traces;  // exported spans per trace

  Reads(const NodeFacts& f, const std::vector<otlp::ReceivedSpan>& spans) : exported(spans), clock(*f.read_clock) {
    for (const auto& t : f.threads) in_order.push_back(&t);
    std::stable_sort(in_order.begin(), in_order.end(), [](const auto* a, const auto* b) {
      return a->tid != b->tid ? a->tid < b->tid : a->time_ns < b->time_ns;
    });
    for (const auto* t : in_order)  // stopped at some instant from the look's start to its read
      if (t->run_queue_wait_ns) marks[t->tid].push_back(stopped_mark(*t->run_queue_wait_ns, began(*t), stopped_by(*t)));
    for (const auto& s : spans) {
      ++traces[s.trace_id];
      if (auto tid = thread_id_of(s)) by_thread[*tid].push_back(&s);
    }
  }
  // The earliest and the latest the thread's state read could date from, on the spans' clock.
  std::int64_t began(const ThreadLookFacts& t) const { return clock.unix_ns(t.time_ns); }
  std::int64_t stopped_by(const ThreadLookFacts& t) const { return clock.unix_ns(t.stopped_by_ns); }
  static bool ended_before(const otlp::ReceivedSpan* s, std::int64_t at, std::int64_t margin) {
    return s && s->end_unix_nano != 0 && static_cast<std::int64_t>(s->end_unix_nano) + margin < at;
  }
  // The least time thread `tid` can have had to itself from `from` to `to`
  // (spans' clock), from its run-queue waits at its looks; nullopt: no look
  // after `to` bounds them.
  std::optional<std::int64_t> own_time(pid_t tid, std::int64_t from, std::int64_t to) const {
    auto it = marks.find(tid);
    return it == marks.end() ? std::nullopt : least_own_time(it->second, from, to);
  }
  // The one span carrying this thread's id that was open however the read is placed, if one only.
  const otlp::ReceivedSpan* only_open_span(const ThreadLookFacts& t) const {
    auto it = by_thread.find(t.tid);
    if (it == by_thread.end()) return nullptr;
    const otlp::ReceivedSpan* open = nullptr;
    for (const auto* s : it->second) {
      const auto start = static_cast<std::int64_t>(s->start_unix_nano), end = static_cast<std::int64_t>(s->end_unix_nano);
      if (start + kClockMargin < began(t) && (end == 0 || stopped_by(t) + kClockMargin < end)) {
        if (open) return nullptr;  // nested or interleaved: which one is entered is not known
        open = s;
      }
    }
    return open;
  }
};

// How a record's time compares with its span's: in time, late by more than
// the writer's work in its own time (why), or later on the wall clock by no
// more than that much of its own time, or by a time no look bounds (untold).
struct Timing {
  std::optional<std::string> late;
  bool untold = false;
};

// NJS-13's: the span a valid record names began after the read, by more
// than the writer's work between its store and taking the span's time.
Timing began_after(const Reads& r, const ThreadLookFacts& t, const otlp::ReceivedSpan& span) {
  const auto start = static_cast<std::int64_t>(span.start_unix_nano) - kClockMargin;
  if (start <= r.stopped_by(t) + kWorkMargin) return {};
  const auto own = r.own_time(t.tid, r.stopped_by(t), start);
  if (!own || *own <= kWorkMargin) return {std::nullopt, true};  // the writer may have waited for a CPU all along
  return {look_text(t) + ": the valid record names " + span_text(span.trace_id, span.span_id) + ", which began " +
          ms_of(start + kClockMargin - r.stopped_by(t)) + " after the thread was read, as exported (" + ms_of(*own) +
          " of them at least the writer's own time, its waits for a CPU taken out)"};
}

// The one span open on the thread (by thread.id) is not the one its record names, which ran on another thread.
std::optional<std::string> another_threads_span(const Reads& r, const ThreadLookFacts& t, const otlp::ReceivedSpan& span) {
  const otlp::ReceivedSpan* open = r.only_open_span(t);
  const auto named_on = thread_id_of(span);
  if (!open || open == &span || !named_on || *named_on == t.tid) return std::nullopt;
  return look_text(t) + ": the one span open on the thread was " + span_text(open->trace_id, open->span_id) +
         ", but the valid record names " + span_text(span.trace_id, span.span_id) + ", a span of thread " +
         std::to_string(*named_on);
}

Finding entered(const Reads& r) {
  constexpr const char* id = "NJS-13";
  std::size_t matched = 0, unexported = 0, checked_by_thread = 0, untold = 0;
  for (const auto* t : r.in_order) {
    if (!names_a_span(*t)) continue;
    const auto& rec = *t->record;
    const otlp::ReceivedSpan* span = r.exported.find(rec.trace_id, rec.span_id);
    if (!span && r.traces.count(rec.trace_id))
      return violated(id, look_text(*t) + ": the valid record names " + span_text(rec.trace_id, rec.span_id) +
                              ", a span id its trace never exported (" + std::to_string(r.traces.at(rec.trace_id)) +
                              " span(s) of that trace were): the ids were not written whole");
    if (!span) {
      ++unexported;
      continue;
    }
    const Timing timing = began_after(r, *t, *span);
    if (timing.late) return violated(id, *timing.late);
    if (timing.untold) {
      ++untold;
      continue;
    }
    if (auto why = another_threads_span(r, *t, *span)) return violated(id, *why);
    if (r.only_open_span(*t)) ++checked_by_thread;
    ++matched;
  }
  std::string seen = std::to_string(matched) + " valid record(s) named an exported span that had begun (" +
                     std::to_string(checked_by_thread) + " the one span open on their thread); " +
                     std::to_string(unexported) + " named a trace never exported";
  if (untold)
    seen += "; " + std::to_string(untold) + " named a span exported as beginning after the read, by less than " +
            ms_of(kWorkMargin) + " of the writer's own time or by a time no later look bounds";
  if (matched == 0) return not_applicable(id, "no valid record read named an exported span (" + seen + ")");
  return met(id, matched, seen);
}

// NJS-14's: the record is still valid after its span ended, by more than
// the writer's work between taking the end's time and clearing it.
Timing still_valid_after_end(const Reads& r, const ThreadLookFacts& t, const otlp::ReceivedSpan& span) {
  if (!Reads::ended_before(&span, r.began(t), kClockMargin + kWorkMargin)) return {};
  const auto end = static_cast<std::int64_t>(span.end_unix_nano) + kClockMargin;
  const auto own = r.own_time(t.tid, end, r.began(t));
  if (!own || *own <= kWorkMargin) return {std::nullopt, true};
  return {look_text(t) + ": the record is still valid " + ms_of(r.began(t) - end + kClockMargin) + " after its span (" +
          span_text(span.trace_id, span.span_id) + ") ended as exported (" + ms_of(*own) +
          " of them at least the writer's own time, its waits for a CPU taken out)"};
}

Finding invalidated(const Reads& r) {
  constexpr const char* id = "NJS-14";
  std::map<pid_t, const otlp::ReceivedSpan*> last_named;
  std::size_t running = 0, cleared_after = 0, replaced_after = 0, untold = 0;
  for (const auto* t : r.in_order) {
    const auto read_at = r.began(*t);
    const otlp::ReceivedSpan* before = last_named.count(t->tid) ? last_named[t->tid] : nullptr;
    if (names_a_span(*t)) {
      const otlp::ReceivedSpan* span = r.exported.find(t->record->trace_id, t->record->span_id);
      if (!span) continue;
      const Timing timing = still_valid_after_end(r, *t, *span);
      if (timing.late)
        return violated(id, *timing.late,
                        {text_evidence("the record after its span ended", "valid 0, or detached", "valid 1, naming the ended span")});
      if (timing.untold) {
        ++untold;
        continue;
      }
      ++running;
      if (before && before != span && Reads::ended_before(before, read_at, kClockMargin)) ++replaced_after;
      last_named[t->tid] = span;
    } else if (shows_no_context(*t) && Reads::ended_before(before, read_at, kClockMargin)) {
      ++cleared_after;
    }
  }
  std::string seen = std::to_string(running) + " read(s) found a running span's record valid; " +
                     std::to_string(cleared_after) + " found no valid record and " + std::to_string(replaced_after) +
                     " another span's after the thread's span ended";
  if (untold)
    seen += "; " + std::to_string(untold) + " found a record valid past its span's end by less than " + ms_of(kWorkMargin) +
            " of the writer's own time, or by a time no look bounds";
  if (cleared_after + replaced_after == 0)
    return not_seen(id, "no read came after one of a thread's spans had ended (" + seen + ")");
  return met(id, running + cleared_after + replaced_after,
             "no record stayed valid more than " + ms_of(kWorkMargin) + " of its writer's own time past its span's end: " + seen);
}

Finding flags(const Reads& r, std::size_t span_count) {
  constexpr const char* id = "NJS-15";
  if (!r.exported.carry_flags())
    return not_applicable(id, "none of the " + std::to_string(span_count) + " exported span(s) carries OTLP span flags (an "
                              "exporter that predates the field): the flags a record must carry are unknown");
  std::size_t compared = 0, sampled = 0;
  for (const auto* t : r.in_order) {
    if (!names_a_span(*t)) continue;
    const auto& rec = *t->record;
    const otlp::ReceivedSpan* span = r.exported.find(rec.trace_id, rec.span_id);
    if (!span) continue;
    const auto want = static_cast<std::uint8_t>(span->flags & 0xff);
    if (want != rec.trace_flags)
      return violated(id,
                      look_text(*t) + ": trace_flags " + std::to_string(rec.trace_flags) + " where its span (" +
                          span_text(rec.trace_id, rec.span_id) + ") was exported with flags " + std::to_string(want),
                      {text_evidence("trace_flags", std::to_string(want), std::to_string(rec.trace_flags))});
    ++compared;
    if (want & 0x01) ++sampled;
  }
  if (compared == 0) return not_applicable(id, "no valid record read named an exported span");
  return met(id, compared, std::to_string(compared) + " valid record(s) named an exported span and carried its flags (" +
                               std::to_string(sampled) + " sampled)");
}

}  // namespace

std::vector<Finding> judge_spans(const conform::SessionEvidence& session, const NodeFacts& f) {
  auto all = [](const std::string& why) {
    return std::vector<Finding>{not_applicable("NJS-13", why), not_applicable("NJS-14", why), not_applicable("NJS-15", why)};
  };
  if (session.spans.empty())
    return all("the writer exported no spans to tracecorr's OTLP receiver: which span a record must name, until when "
               "and with which flags, is known only from the spans a writer exports");
  if (!f.read_clock) return all("no look was taken: no read to compare with the exported spans");
  if (auto why = conform::incomparable(*f.read_clock, kClockMargin)) return all(*why);
  const Reads reads(f, session.spans);
  return {entered(reads), invalidated(reads), flags(reads, session.spans.size())};
}

namespace {

class SpansProbe final : public SessionProbe {
 public:
  SpansProbe() : SessionProbe("spans", {"NJS-13", "NJS-14", "NJS-15"}, kLookedSession) {}
  std::vector<Finding> judge_writer(const conform::SessionEvidence& s, const NodeFacts& f) const override {
    return judge_spans(s, f);
  }
};

}  // namespace

std::unique_ptr<conform::Probe> make_spans_probe() { return std::make_unique<SpansProbe>(); }

}  // namespace tracecorr::otel_nodejs_thread_context

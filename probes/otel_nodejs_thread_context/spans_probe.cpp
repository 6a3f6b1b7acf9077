// spans (NJS-13, 14, 15): the records the looks read against the spans the
// writer exported to the session's receiver.
//
// A look is a read of a stopped thread at a known time (CLOCK_MONOTONIC, put
// on the spans' clock by the session's conform::ReadClock); a valid record
// names a span by its ids, and the exported span says when it ran and with
// which flags. kSpanMargin absorbs a writer that takes a span's time just
// before its store (or just after): a record read that long past its span's
// exported end was left valid. Verdicts rest on ids and times the writer
// itself exported, never on how fast it runs.
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

namespace tracecorr::otel_nodejs_thread_context {
namespace {

constexpr std::int64_t kSpanMargin = 50'000'000;  // ns

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

struct Reads {
  conform::ExportedSpans exported;
  conform::ReadClock clock;
  std::vector<const ThreadLookFacts*> in_order;  // by thread, then time
  std::map<std::int64_t, std::vector<const otlp::ReceivedSpan*>> by_thread;  // spans carrying thread.id
  std::map<TraceId, std::size_t> traces;  // exported spans per trace

  Reads(const NodeFacts& f, const std::vector<otlp::ReceivedSpan>& spans) : exported(spans), clock(*f.read_clock) {
    for (const auto& t : f.threads) in_order.push_back(&t);
    std::stable_sort(in_order.begin(), in_order.end(), [](const auto* a, const auto* b) {
      return a->tid != b->tid ? a->tid < b->tid : a->time_ns < b->time_ns;
    });
    for (const auto& s : spans) {
      ++traces[s.trace_id];
      if (auto tid = thread_id_of(s)) by_thread[*tid].push_back(&s);
    }
  }
  std::int64_t at(const ThreadLookFacts& t) const { return clock.unix_ns(t.time_ns); }
  static bool ended_before(const otlp::ReceivedSpan* s, std::int64_t read_at, std::int64_t margin) {
    return s && s->end_unix_nano != 0 && static_cast<std::int64_t>(s->end_unix_nano) + margin < read_at;
  }
  // The one span carrying this thread's id that was open at the read (well inside its times), if one only.
  const otlp::ReceivedSpan* only_open_span(const ThreadLookFacts& t) const {
    auto it = by_thread.find(t.tid);
    if (it == by_thread.end()) return nullptr;
    const otlp::ReceivedSpan* open = nullptr;
    for (const auto* s : it->second) {
      const auto start = static_cast<std::int64_t>(s->start_unix_nano), end = static_cast<std::int64_t>(s->end_unix_nano);
      if (start + kSpanMargin < at(t) && (end == 0 || at(t) + kSpanMargin < end)) {
        if (open) return nullptr;  // nested or interleaved: which one is entered is not known
        open = s;
      }
    }
    return open;
  }
};

Finding entered(const Reads& r) {
  constexpr const char* id = "NJS-13";
  std::size_t matched = 0, unexported = 0, checked_by_thread = 0;
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
    if (static_cast<std::int64_t>(span->start_unix_nano) > r.at(*t) + kSpanMargin)
      return violated(id, look_text(*t) + ": the valid record names " + span_text(rec.trace_id, rec.span_id) + ", which began " +
                              std::to_string((static_cast<std::int64_t>(span->start_unix_nano) - r.at(*t)) / 1000000) +
                              " ms after the read, as exported");
    const otlp::ReceivedSpan* open = r.only_open_span(*t);
    if (open && open != span && !Reads::ended_before(span, r.at(*t), kSpanMargin))
      return violated(id, look_text(*t) + ": the one span open on the thread was " + span_text(open->trace_id, open->span_id) +
                              ", but the valid record names " + span_text(rec.trace_id, rec.span_id));
    if (open) ++checked_by_thread;
    ++matched;
  }
  const std::string seen = std::to_string(matched) + " valid record(s) named an exported span that had begun (" +
                           std::to_string(checked_by_thread) + " the one span open on their thread); " +
                           std::to_string(unexported) + " named a trace never exported";
  if (matched == 0) return not_applicable(id, "no valid record read named an exported span (" + seen + ")");
  return met(id, matched, seen);
}

Finding invalidated(const Reads& r) {
  constexpr const char* id = "NJS-14";
  std::map<pid_t, const otlp::ReceivedSpan*> last_named;
  std::size_t running = 0, cleared_after = 0, replaced_after = 0;
  for (const auto* t : r.in_order) {
    const auto read_at = r.at(*t);
    const otlp::ReceivedSpan* before = last_named.count(t->tid) ? last_named[t->tid] : nullptr;
    if (names_a_span(*t)) {
      const otlp::ReceivedSpan* span = r.exported.find(t->record->trace_id, t->record->span_id);
      if (!span) continue;
      if (Reads::ended_before(span, read_at, kSpanMargin))
        return violated(id,
                        look_text(*t) + ": the record is still valid " +
                            std::to_string((read_at - static_cast<std::int64_t>(span->end_unix_nano)) / 1000000) +
                            " ms after its span (" + span_text(span->trace_id, span->span_id) + ") ended as exported",
                        {text_evidence("the record after its span ended", "valid 0, or detached", "valid 1, naming the ended span")});
      ++running;
      if (before && before != span && Reads::ended_before(before, read_at, 0)) ++replaced_after;
      last_named[t->tid] = span;
    } else if (shows_no_context(*t) && Reads::ended_before(before, read_at, 0)) {
      ++cleared_after;
    }
  }
  const std::string seen = std::to_string(running) + " read(s) found a running span's record valid; " +
                           std::to_string(cleared_after) + " found no valid record and " + std::to_string(replaced_after) +
                           " another span's after the thread's span ended";
  if (cleared_after + replaced_after == 0)
    return not_applicable(id, "no read came after one of a thread's spans had ended (" + seen + ")");
  return met(id, running + cleared_after + replaced_after,
             "no record stayed valid more than " + std::to_string(kSpanMargin / 1000000) + " ms past its span's end: " + seen);
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
  if (auto why = conform::incomparable(*f.read_clock, kSpanMargin / 2)) return all(*why);
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

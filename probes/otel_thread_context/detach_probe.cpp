// detach (TCTX-27): whether a record is detached once its span ended, the
// sampled records against the spans the writer exported (when each ended).
#include "probes.hpp"

#include <algorithm>
#include <cstdlib>
#include <map>

#include "judges.hpp"
#include "judging.hpp"
#include "tracecorr/conform/exported_spans.hpp"
#include "tracecorr/ids.hpp"
#include "tracecorr/memory.hpp"
#include "tracecorr/own_time.hpp"

namespace tracecorr::otel_thread_context {

// When a thread's context stops being active is known only from the spans
// the writer exports: a span is active from its start to its end. So a
// record read while its thread was stopped that names a span which had
// already ended was neither detached nor replaced when the span ended.
//
// Robustness. The read time and the span's end are compared on one clock:
// the sample's CLOCK_MONOTONIC plus CLOCK_REALTIME - CLOCK_MONOTONIC, which
// tracecorr measures around the sampling on the writer's own kernel, against
// the exported endTimeUnixNano (the writer's CLOCK_REALTIME); the offset
// moves only when the wall clock is stepped, and a step larger than the
// margin between the two measurements makes the rule not judged. The receiver's
// clock (when spans arrived) plays no part. A read dates from when its thread
// stopped, after the sampler's interrupt: the interrupt's time is taken, the
// earliest it can be. kDetachMargin absorbs a writer that takes a span's end
// time just before its detaching store (an SDK ending the span before closing
// its scope), in the writer's own time: the wall time less all its thread
// may have waited in run queues meanwhile (schedstat at the samples around
// it, least_own_time), so a writer starved of a CPU in between is
// never failed on the wall clock. A record still attached after that much of
// its own time past its span's exported end was left attached. The decision
// rests on ids and times the writer itself exported.
//
// What counts as judged: every read naming an exported span (each could
// have named an ended one), and the reads the rule is about — a thread's
// reads after the last span its reads named had ended, detached or naming
// a newer span. A pass needs some of the latter.
Finding judge_detach(const conform::SessionEvidence& session, const ThreadContextFacts& sampled) {
  constexpr const char* id = "TCTX-27";
  if (sampled.not_found) return not_applicable(id, "no thread-context writer: " + sampled.not_found->message());
  if (session.spans.empty())
    return not_applicable(id, "the writer exported no spans to tracecorr's OTLP receiver: when a thread's context stops "
                              "being active is known only from the spans a writer exports");
  if (!sampled.wall_minus_monotonic_at_start_ns || !sampled.wall_minus_monotonic_at_end_ns)
    return not_applicable(id, "the sampler did not run: no read to compare with the spans' end times");
  const conform::ReadClock clock{*sampled.wall_minus_monotonic_at_start_ns, *sampled.wall_minus_monotonic_at_end_ns,
                                 sampled.wall_offset_uncertainty_ns};
  if (auto why = conform::incomparable(clock, kDetachMargin.count() / 2)) return not_applicable(id, *why);
  const std::int64_t offset = clock.at_start_ns;
  const ExportedSpans exported(session.spans);
  std::vector<const RecordSample*> reads;
  for (const auto& s : sampled.samples) reads.push_back(&s);
  std::stable_sort(reads.begin(), reads.end(), [](const RecordSample* a, const RecordSample* b) {
    return a->tid != b->tid ? a->tid < b->tid : a->time_ns < b->time_ns;
  });
  std::map<pid_t, std::vector<RunQueueMark>> marks;  // per thread: its waits, stopped at each read
  for (const RecordSample* s : reads)
    if (s->run_queue_wait_ns)
      marks[s->tid].push_back(stopped_mark(*s->run_queue_wait_ns, static_cast<std::int64_t>(s->stopped_after_ns()) + offset,
                                           static_cast<std::int64_t>(s->time_ns) + offset));
  std::map<pid_t, const otlp::ReceivedSpan*> last_named;  // per thread: the span its latest read named
  std::size_t running = 0, detached_after = 0, replaced_after = 0, unexported = 0, untold = 0;
  for (const RecordSample* s : reads) {
    const std::int64_t read_at = static_cast<std::int64_t>(s->stopped_after_ns()) + offset;
    auto ended_before_read = [&](const otlp::ReceivedSpan* span, std::int64_t margin) {
      return span && span->end_unix_nano != 0 && static_cast<std::int64_t>(span->end_unix_nano) + margin < read_at;
    };
    const otlp::ReceivedSpan* before = last_named.count(s->tid) ? last_named[s->tid] : nullptr;
    auto r = decoded(*s);
    const bool attached = r && r->readable() && !r->ids_zero();
    const bool detached = s->error == SampleError::RecordPointerNull || (r && (!r->readable() || r->ids_zero()));
    if (attached) {
      const otlp::ReceivedSpan* span = exported.find(r->trace_id, r->span_id);
      if (!span) {
        ++unexported;
        continue;
      }
      if (ended_before_read(span, kDetachMargin.count())) {
        const auto end = static_cast<std::int64_t>(span->end_unix_nano);
        const auto own = least_own_time(marks[s->tid], end, read_at);
        if (!own || *own <= kDetachMargin.count()) {
          ++untold;  // its thread may have waited for a CPU all along
          continue;
        }
        return violated(id,
                        thread_text(s->tid) + ", record " + hex_address(s->record_pointer) + ": still attached " +
                            std::to_string((read_at - end) / 1000000) + " ms after its span (trace " +
                            to_hex(span->trace_id) + ", span " + to_hex(span->span_id) + ") ended as exported (" +
                            std::to_string(*own / 1000000) + " ms of them at least the writer's own time, its waits for "
                            "a CPU taken out): the ended span's context was not detached",
                        {text_evidence("record when the span had ended", "detached (pointer NULL or valid 0), or another "
                                                                         "span's",
                                       "valid 1, naming the ended span")});
      }
      ++running;
      if (before && before != span && ended_before_read(before, 0)) ++replaced_after;
      last_named[s->tid] = span;
    } else if (detached && ended_before_read(before, 0)) {
      ++detached_after;
    }
  }
  std::string seen = std::to_string(running) + " read(s) named a running exported span, " +
                     std::to_string(detached_after) + " found the record detached and " +
                     std::to_string(replaced_after) + " another span's after the thread's span ended; " +
                     std::to_string(unexported) + " named a span never exported";
  if (untold)
    seen += "; " + std::to_string(untold) + " found it attached past its span's end by less than " +
            std::to_string(kDetachMargin.count() / 1000000) + " ms of the writer's own time, or by a time no read bounds";
  if (detached_after + replaced_after == 0)
    return not_seen(id, "no read came after one of a thread's spans had ended (" + seen + ")");
  return met(id, running + detached_after + replaced_after,
             "no record named a span that had ended (more than " + std::to_string(kDetachMargin.count() / 1000000) +
                 " ms of its writer's own time) before its thread was stopped: " + seen);
}

namespace {

// Whether a record is detached once its span ended: the sampled records
// against the spans the writer exported (when each ended).
class DetachProbe final : public SessionProbe {
 public:
  DetachProbe() : SessionProbe("detach", {"TCTX-27"}, kSampledSession) {}
  std::vector<Finding> judge(const conform::SessionEvidence& s, const ThreadContextFacts& f) const override {
    return {judge_detach(s, f)};
  }
  std::size_t minimum_evidence(const std::string&) const override { return kMinReadsAgainstSpans; }
};

}  // namespace

std::unique_ptr<conform::Probe> make_detach_probe() { return std::make_unique<DetachProbe>(); }

}  // namespace tracecorr::otel_thread_context

// See judges.hpp.
#include "judges.hpp"

#include <algorithm>
#include <map>
#include <set>

#include "otel_thread_context/checks.hpp"
#include "otel_thread_context/registry.hpp"
#include "tracecorr/ids.hpp"
#include "tracecorr/memory.hpp"

namespace tracecorr::otel_thread_context {
namespace {

using Outcome = Finding::Outcome;
using State = conform::PublishedRecordState;

int severity(Outcome o) {
  switch (o) {
    case Outcome::Violated: return 4;
    case Outcome::KitError: return 3;
    case Outcome::Tolerated: return 2;
    case Outcome::Met: return 1;
    case Outcome::NotApplicable: return 0;
  }
  return 0;
}

// The worst finding per requirement over many looks; a pass counts every look that passed.
class Worst {
 public:
  void add(Finding f) {
    auto it = worst_.find(f.requirement);
    if (it == worst_.end()) {
      worst_.emplace(f.requirement, std::move(f));
      return;
    }
    auto& kept = it->second;
    if (f.outcome == Outcome::Met && kept.outcome == Outcome::Met) {
      kept.evidence_count += f.evidence_count;
    } else if (severity(f.outcome) > severity(kept.outcome)) {
      kept = std::move(f);
    }
  }
  Finding take(const std::string& id, const std::string& otherwise) {
    auto it = worst_.find(id);
    if (it == worst_.end()) return not_applicable(id, otherwise);
    Finding f = std::move(it->second);
    if (f.outcome == Outcome::Met)
      f.reason = std::to_string(f.evidence_count) + " look(s) passed; e.g. " + f.reason;
    return f;
  }

 private:
  std::map<std::string, Finding> worst_;
};

std::string thread_text(pid_t tid) { return "thread " + std::to_string(tid); }

// The longest key map published in the session: append-only (TCTX-08), it
// explains every index any map did. A map only the resource carries (TCTX-07
// fails it) still names the indexes its writer meant.
const KeyMap* longest_key_map(const ThreadContextFacts& facts) {
  const KeyMap* longest = nullptr;
  for (const auto& p : facts.publications) {
    if (!p.data) continue;
    const KeyMap* map = p.data->key_map ? &*p.data->key_map : p.data->resource_key_map ? &*p.data->resource_key_map : nullptr;
    if (map && (!longest || map->size() > longest->size())) longest = map;
  }
  return longest;
}

const Publication* publication_at(const ThreadContextFacts& facts, std::uint64_t published_at_ns) {
  for (const auto& p : facts.publications)
    if (p.published_at_ns == published_at_ns) return &p;
  return nullptr;
}

std::optional<ThreadContextRecord> decoded(const RecordSample& s) {
  if (!s.bytes) return std::nullopt;
  auto r = decode_record(*s.bytes);
  if (!r) return std::nullopt;
  return std::move(*r);
}

bool records_carry_entries(const ThreadContextFacts& facts) {
  for (const auto& s : facts.samples)
    if (auto r = decoded(s); r && r->readable() && !r->entries.empty()) return true;
  return false;
}

// The spans the writer exported, by their ids (the last export of an id wins).
class ExportedSpans {
 public:
  explicit ExportedSpans(const std::vector<otlp::ReceivedSpan>& spans) {
    for (const auto& s : spans) {
      by_ids_[{s.trace_id, s.span_id}] = &s;
      carry_flags_ = carry_flags_ || s.flags != 0;
    }
  }
  const otlp::ReceivedSpan* find(const TraceId& trace, const SpanId& span) const {
    auto it = by_ids_.find({trace, span});
    return it == by_ids_.end() ? nullptr : it->second;
  }
  // OTLP's flags field is optional: exporters that predate it send none,
  // which reads as 0 on every span. Some span carrying a bit says it is sent.
  bool carry_flags() const { return carry_flags_; }

 private:
  std::map<std::pair<TraceId, SpanId>, const otlp::ReceivedSpan*> by_ids_;
  bool carry_flags_ = false;
};

// TCTX-14 over the sampled records: the flags byte against the W3C flags
// (OTLP flags bits 0-7) exported for the span the record names. A record
// naming a span never exported (an SDK drops unsampled spans; one still
// open when the writer stopped) has no known flags: counted, not judged.
class FlagsTally {
 public:
  void add(const RecordSample& s, const ThreadContextRecord& r, const ExportedSpans& exported) {
    if (r.ids_zero()) {
      if (r.trace_flags != 0 && !violation_)
        violation_ = violated("TCTX-14", thread_text(s.tid) + ", record " + hex_address(s.record_pointer) +
                                             ": trace_flags " + std::to_string(r.trace_flags) +
                                             " without trace and span ids");
      return;
    }
    ++named_;
    if (r.trace_flags != 0) ++flags_set_;
    if (spans_named_.size() < kFlagsNeverSetSpans) spans_named_.insert({r.trace_id, r.span_id});
    const otlp::ReceivedSpan* span = exported.find(r.trace_id, r.span_id);
    if (!span) {
      ++unexported_;
      return;
    }
    const auto want = static_cast<std::uint8_t>(span->flags & 0xff);
    ++compared_;
    if (want & 0x01) ++sampled_;
    if (want != r.trace_flags && !violation_ && exported.carry_flags())
      violation_ = violated("TCTX-14", thread_text(s.tid) + ", record " + hex_address(s.record_pointer) +
                                           ": trace_flags " + std::to_string(r.trace_flags) + " where its span (trace " +
                                           to_hex(r.trace_id) + ", span " + to_hex(r.span_id) +
                                           ") was exported with flags " + std::to_string(want),
                            {text_evidence("trace_flags", std::to_string(want), std::to_string(r.trace_flags))});
  }
  Finding finding(std::size_t spans, bool carry_flags) const {
    if (violation_) return *violation_;
    if (spans == 0)
      return unjudged("the writer exported no spans to tracecorr's OTLP receiver: the flags a record must carry are "
                      "those exported for its span");
    if (!carry_flags)
      return unjudged("none of the " + std::to_string(spans) + " exported span(s) carries OTLP span flags (an exporter "
                      "that predates the field): the flags a record must carry are unknown");
    const std::string unmatched = std::to_string(unexported_) + " named a span never exported";
    if (compared_ == 0)
      return unjudged("no sampled record names an exported span (" + std::to_string(spans) + " span(s) received; " +
                      unmatched + ")");
    return met("TCTX-14", compared_,
               std::to_string(compared_) + " sampled record(s) named an exported span and carried its flags (" +
                   std::to_string(sampled_) + " sampled, " + std::to_string(compared_ - sampled_) + " not); " + unmatched);
  }

 private:
  // No span to compare with: not applicable, unless the records themselves
  // make a writer that never sets the sampled bit likely (a warning).
  Finding unjudged(const std::string& why) const {
    if (named_ < kFlagsNeverSetRecords || flags_set_ != 0 || spans_named_.size() < kFlagsNeverSetSpans)
      return not_applicable("TCTX-14", why + " (" + std::to_string(named_) + " valid sampled record(s) named a span, " +
                                           std::to_string(flags_set_) + " with flags set)");
    return tolerated("TCTX-14",
                     "trace_flags was 0 in every one of the " + std::to_string(named_) + " valid sampled records naming a "
                         "span (at least " + std::to_string(spans_named_.size()) + " spans): a writer that never sets the "
                         "sampled bit, or one whose every span is unsampled. Not judged against the spans: " + why +
                         ". Export the writer's spans to tracecorr's receiver (OTEL_EXPORTER_OTLP_ENDPOINT; launch mode "
                         "sets it) to judge TCTX-14",
                     {text_evidence("trace_flags of valid records naming a span", "the span's W3C flags (01 when sampled)",
                                    "00 in all " + std::to_string(named_))});
  }

  std::optional<Finding> violation_;
  std::size_t compared_ = 0, sampled_ = 0, unexported_ = 0;
  std::size_t named_ = 0, flags_set_ = 0;  // valid records naming a span; those with any flag bit
  std::set<std::pair<TraceId, SpanId>> spans_named_;  // distinct spans they named, up to kFlagsNeverSetSpans
};

std::string join_keys(const KeyMap& keys) {
  std::string s;
  for (const auto& k : keys) s += (s.empty() ? "" : ", ") + k;
  return "[" + s + "]";
}

}  // namespace

// ---- TCTX-01..05 ---------------------------------------------------------------

std::vector<Finding> judge_variable(const ThreadContextFacts& facts) {
  std::vector<Finding> out;
  if (facts.not_found) {
    for (auto id : kVariableRequirements)
      out.push_back(not_applicable(std::string(id), "no thread-context writer: " + facts.not_found->message()));
    return out;
  }
  if (!facts.module) {
    const std::string why = facts.module_error ? facts.module_error->message() : "the module was not looked for";
    const bool absent = facts.module_error && facts.module_error->kind == ErrorKind::kNotFound;
    for (auto id : kVariableRequirements) {
      if (id == "TCTX-01")
        out.push_back(absent ? violated("TCTX-01", "the process context announces thread context (threadlocal.* keys), "
                                                   "but " + why)
                             : kit_error("TCTX-01", "the process's modules could not be examined: " + why));
      else
        out.push_back(not_applicable(std::string(id), "no module exports " + std::string(spec::kTlsSymbol) + " (TCTX-01)"));
    }
    return out;
  }
  return check_variable(*facts.module);
}

// ---- TCTX-06..09 ---------------------------------------------------------------

std::vector<Finding> judge_reference_data(const ThreadContextFacts& facts) {
  std::vector<Finding> out;
  if (facts.not_found) {
    for (auto id : {"TCTX-06", "TCTX-07", "TCTX-08", "TCTX-09"})
      out.push_back(not_applicable(id, "no thread-context writer: " + facts.not_found->message()));
    return out;
  }
  Worst worst;
  const bool entries = records_carry_entries(facts);
  for (const auto& p : facts.publications) {
    if (!p.data) {
      worst.add(kit_error("TCTX-06", "the publication " + std::to_string(p.published_at_ns) + " could not be decoded: " +
                                         (p.error ? p.error->message() : "?")));
      continue;
    }
    for (auto& f : check_reference_data(p.data, entries)) {
      f.reason = "publication " + std::to_string(p.published_at_ns) + ": " + f.reason;
      worst.add(std::move(f));
    }
  }
  out.push_back(worst.take("TCTX-06", "no publication was read"));
  out.push_back(worst.take("TCTX-07", "no publication was read"));

  // TCTX-08: each key map starts with the one before it.
  std::size_t compared = 0;
  const KeyMap* before = nullptr;
  std::uint64_t before_at = 0;
  std::optional<Finding> broken;
  std::size_t appended = 0;
  for (const auto& p : facts.publications) {
    if (!p.data || !p.data->key_map) continue;
    const KeyMap& map = *p.data->key_map;
    if (before) {
      ++compared;
      for (std::size_t i = 0; i < before->size() && !broken; ++i) {
        const std::string now = i < map.size() ? map[i] : std::string("(removed)");
        if (now != (*before)[i])
          broken = violated("TCTX-08", "key index " + std::to_string(i) + " named " + (*before)[i] + " in publication " +
                                           std::to_string(before_at) + " and " + now + " in publication " +
                                           std::to_string(p.published_at_ns) + ": the key map is not append-only",
                            {text_evidence("key map", join_keys(*before) + " then more", join_keys(map))});
      }
      if (map.size() > before->size()) appended += map.size() - before->size();
    }
    before = &map;
    before_at = p.published_at_ns;
  }
  if (broken) out.push_back(*broken);
  else if (compared == 0)
    out.push_back(not_applicable("TCTX-08", "the key map was published once while tracecorr followed the context: "
                                            "nothing to compare"));
  else
    out.push_back(met("TCTX-08", compared, std::to_string(compared) + " key map update(s), each keeping every earlier index (" +
                                               std::to_string(appended) + " key(s) appended)"));
  out.push_back(not_applicable("TCTX-09", "a freedom the writer has (MAY), never judged against it: " +
                                              std::to_string(appended) + " key(s) appended after the first publication seen"));
  return out;
}

// ---- TCTX-10 -------------------------------------------------------------------

// A pass needs a key appended while tracecorr sampled, and records using it:
// keys published before sampling began say nothing of whether a record used
// them first (tracecorr was not looking then).
Finding judge_key_published_first(const ThreadContextFacts& sampled) {
  if (sampled.not_found) return not_applicable("TCTX-10", "no thread-context writer: " + sampled.not_found->message());
  // The smallest key map any publication seen had: indexes past it were appended meanwhile.
  std::optional<std::size_t> first_map_size;
  for (const auto& p : sampled.publications)
    if (p.data && p.data->key_map) first_map_size = std::min(first_map_size.value_or(p.data->key_map->size()), p.data->key_map->size());
  std::size_t judged = 0, unresolved = 0, using_appended = 0;
  for (const auto& s : sampled.samples) {
    auto r = decoded(s);
    if (!r || !r->readable() || r->entries.empty()) continue;
    const Publication* current = s.context_published_at ? publication_at(sampled, *s.context_published_at) : nullptr;
    if (!current || !current->data || !current->data->key_map) {
      ++unresolved;
      continue;
    }
    ++judged;
    const KeyMap& map = *current->data->key_map;
    // An appended key the current publication names: the rule kept, seen.
    if (std::any_of(r->entries.begin(), r->entries.end(),
                    [&](const auto& e) { return e.key >= *first_map_size && e.key < map.size(); }))
      ++using_appended;
    for (const auto& e : r->entries) {
      if (e.key < map.size()) continue;
      // Which later publication names it (TCTX-10), if any (else it is TCTX-11's).
      for (const auto& later : sampled.publications) {
        if (later.published_at_ns <= current->published_at_ns || !later.data || !later.data->key_map ||
            e.key >= later.data->key_map->size())
          continue;
        return violated("TCTX-10",
                        thread_text(s.tid) + ", record " + hex_address(s.record_pointer) + ": key index " +
                            std::to_string(e.key) + " (" + (*later.data->key_map)[e.key] +
                            ") was visible while the current publication (" + std::to_string(current->published_at_ns) +
                            ") had " + std::to_string(map.size()) + " keys; publication " +
                            std::to_string(later.published_at_ns) + " named it later",
                        {text_evidence("key map when the record was read", "index " + std::to_string(e.key) + " named",
                                       join_keys(map))});
      }
    }
  }
  if (judged == 0)
    return not_applicable("TCTX-10", "no sampled record carrying attributes could be matched with the publication current "
                                     "when it was read (" + std::to_string(unresolved) + " unmatched)");
  if (using_appended == 0)
    return not_applicable("TCTX-10", "no key was appended while tracecorr sampled (every publication seen had " +
                                         std::to_string(*first_map_size) + " keys or no record used a later one; " +
                                         std::to_string(judged) + " records carried only keys published before sampling)");
  return met("TCTX-10", using_appended, std::to_string(using_appended) + " sampled record(s) carrying a key appended while "
                                            "tracecorr sampled: each named by the publication current when the thread "
                                            "was stopped (" + std::to_string(judged) + " records with attributes in all)");
}

// ---- TCTX-11..20 ---------------------------------------------------------------

std::vector<Finding> judge_records(const conform::SessionEvidence& session, const ThreadContextFacts& sampled) {
  static const std::vector<std::string> ids{"TCTX-11", "TCTX-12", "TCTX-13", "TCTX-14", "TCTX-15", "TCTX-16",
                                            "TCTX-17", "TCTX-18", "TCTX-19", "TCTX-20"};
  std::vector<Finding> out;
  if (sampled.not_found) {
    for (const auto& id : ids) out.push_back(not_applicable(id, "no thread-context writer: " + sampled.not_found->message()));
    return out;
  }
  const KeyMap* map = longest_key_map(sampled);
  Worst worst;
  std::size_t records = 0, repeated_keys = 0;
  const ExportedSpans exported(session.spans);
  FlagsTally flags;
  for (const auto& s : sampled.samples) {
    if (s.error == SampleError::RecordReadFailed) {
      worst.add(violated("TCTX-12", thread_text(s.tid) + ": its pointer " + hex_address(s.record_pointer) +
                                        " leads to memory that cannot be read while the thread is stopped"));
      continue;
    }
    auto r = decoded(s);
    if (!r) continue;
    ++records;
    RecordLook look{s.tid, s.record_pointer, *r, std::nullopt};
    for (auto& f : check_record(look, map)) worst.add(std::move(f));
    if (!r->readable()) continue;
    std::set<std::uint8_t> keys;
    for (const auto& e : r->entries)
      if (!keys.insert(e.key).second) ++repeated_keys;
    flags.add(s, *r, exported);
  }
  const std::string none = std::to_string(sampled.samples.size()) + " sample(s), none with a record";
  for (const auto& id : ids) {
    if (id == "TCTX-14") {
      out.push_back(flags.finding(session.spans.size(), exported.carry_flags()));
    } else if (id == "TCTX-18") {
      out.push_back(not_applicable(id, "a freedom the writer has (MAY), never judged against it: " +
                                           std::to_string(repeated_keys) + " repeated key(s) in " + std::to_string(records) +
                                           " sampled record(s)"));
    } else {
      out.push_back(worst.take(id, none));
    }
  }
  return out;
}

// ---- TCTX-27 -------------------------------------------------------------------

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
// clock (when spans arrived) plays no part. kDetachMargin absorbs the
// measurement (microseconds) and a writer that takes a span's end time just
// before its detaching store (an SDK ending the span before closing its
// scope) and is preempted in between: a record still attached that long
// after its span's exported end was left attached. The decision rests on ids
// and times the writer itself exported, never on how fast it runs.
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
  const std::int64_t offset = *sampled.wall_minus_monotonic_at_start_ns;
  const std::int64_t step = *sampled.wall_minus_monotonic_at_end_ns - offset;
  const std::int64_t tolerated = kDetachMargin.count() / 2;
  if (sampled.wall_offset_uncertainty_ns > tolerated)
    return not_applicable(id, "the wall clock could not be placed on the monotonic one within " +
                                  std::to_string(tolerated / 1000000) + " ms (tracecorr's clock reads were " +
                                  std::to_string(sampled.wall_offset_uncertainty_ns / 1000000) +
                                  " ms apart at best): read times and exported end times are not comparable");
  if (std::llabs(step) > tolerated + sampled.wall_offset_uncertainty_ns)
    return not_applicable(id, "the wall clock was stepped by " + std::to_string(step / 1000000) +
                                  " ms while the threads were sampled: read times and exported end times are not "
                                  "comparable");
  const ExportedSpans exported(session.spans);
  std::vector<const RecordSample*> reads;
  for (const auto& s : sampled.samples) reads.push_back(&s);
  std::stable_sort(reads.begin(), reads.end(), [](const RecordSample* a, const RecordSample* b) {
    return a->tid != b->tid ? a->tid < b->tid : a->time_ns < b->time_ns;
  });
  std::map<pid_t, const otlp::ReceivedSpan*> last_named;  // per thread: the span its latest read named
  std::size_t running = 0, detached_after = 0, replaced_after = 0, unexported = 0;
  for (const RecordSample* s : reads) {
    const std::int64_t read_at = static_cast<std::int64_t>(s->time_ns) + offset;
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
        const std::int64_t late_ms = (read_at - static_cast<std::int64_t>(span->end_unix_nano)) / 1000000;
        return violated(id,
                        thread_text(s->tid) + ", record " + hex_address(s->record_pointer) + ": still attached " +
                            std::to_string(late_ms) + " ms after its span (trace " + to_hex(span->trace_id) + ", span " +
                            to_hex(span->span_id) + ") ended as exported: the ended span's context was not detached",
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
  const std::string seen = std::to_string(running) + " read(s) named a running exported span, " +
                           std::to_string(detached_after) + " found the record detached and " +
                           std::to_string(replaced_after) + " another span's after the thread's span ended; " +
                           std::to_string(unexported) + " named a span never exported";
  if (detached_after + replaced_after == 0)
    return not_applicable(id, "no read came after one of a thread's spans had ended (" + seen + ")");
  return met(id, running + detached_after + replaced_after,
             "no record named a span that had ended (more than " + std::to_string(kDetachMargin.count() / 1000000) +
                 " ms) before its thread was stopped: " + seen);
}

// ---- TCTX-21..28 ---------------------------------------------------------------

bool valid_record(const std::optional<RecordBytes>& r) {
  return r && r->size() > spec::kRecordValidOffset && (*r)[spec::kRecordValidOffset] == spec::kRecordValidValue;
}

namespace {

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

ThreadVerdicts walk(const conform::PublishedRecordWatchReport& r) {
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

}  // namespace tracecorr::otel_thread_context

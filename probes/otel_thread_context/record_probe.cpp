// record (TCTX-11..20): every record the ptrace sampler read from a stopped
// thread, TCTX-14's flags against the spans the writer exported.
#include "probes.hpp"

#include <set>

#include "judges.hpp"
#include "judging.hpp"
#include "otel_thread_context/checks.hpp"
#include "otel_thread_context/registry.hpp"
#include "tracecorr/ids.hpp"
#include "tracecorr/memory.hpp"

namespace tracecorr::otel_thread_context {

namespace {

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

}  // namespace

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

namespace {

// Every record the sampler read from a stopped thread.
class RecordProbe final : public SessionProbe {
 public:
  RecordProbe() : SessionProbe("record", requirement_range(11, 20), kSampledSession) {}
  std::vector<Finding> judge(const conform::SessionEvidence& s, const ThreadContextFacts& f) const override {
    return judge_records(s, f);
  }
  std::size_t minimum_evidence(const std::string& requirement) const override {
    return requirement == "TCTX-14" ? kMinReadsAgainstSpans : 1;
  }
};

}  // namespace

std::unique_ptr<conform::Probe> make_record_probe() { return std::make_unique<RecordProbe>(); }

}  // namespace tracecorr::otel_thread_context

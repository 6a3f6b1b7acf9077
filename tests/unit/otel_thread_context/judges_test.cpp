// OTEP 4947's judges over plain evidence: each case writes by hand what a
// session saw (the publications of the process context, the module, the
// records the sampler read, each thread's stores under the published-record
// watch), runs the probe that covers the requirement, and checks the outcome
// and the words of its reason. Nothing is launched: the kill matrix
// (tests/py/test_conform_tctx_mutants.py) runs the writers.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "judge_case.hpp"
#include "otel_thread_context/record.hpp"
#include "probes/otel_thread_context/evidence.hpp"
#include "probes/otel_thread_context/judges.hpp"
#include "tracecorr/conform/suite.hpp"

namespace tracecorr::otel_thread_context {
namespace {

using watch::PublishedRecordState;
using watch::PublishedRecordWatchReport;
using conform::SessionEvidence;
using conform::SessionSet;
using Cause = PublishedRecordState::Cause;
using Outcome = Finding::Outcome;
using namespace judge_tests;

constexpr pid_t kWriter = 4242;
constexpr pid_t kThread = 4243;
constexpr std::uint64_t kRecordA = 0x7f0000001000, kRecordB = 0x7f0000002000;
const KeyMap kStartupKeys{"http.route", "http.method", "tracecorr.note", "http.status_code"};

otlp::AttributeValue string_array(const KeyMap& keys) {
  otlp::AttributeValue::Array names;
  for (const auto& k : keys) names.emplace_back(k);
  return otlp::AttributeValue(std::move(names));
}

Publication publication(std::uint64_t at, const KeyMap& keys) {
  ReferenceData d;
  d.schema_version = "tlsdesc_v1_dev";
  d.schema_version_value = otlp::AttributeValue("tlsdesc_v1_dev");
  d.key_map = keys;
  d.key_map_value = string_array(keys);
  return {at, d, std::nullopt};
}

// A record's bytes: ids from `seed`, valid, flags 1, entries with `keys`.
RecordBytes record(std::uint8_t seed, std::uint8_t valid = 1, std::vector<std::uint8_t> keys = {0, 1}) {
  ThreadContextRecord header;
  header.trace_id.fill(seed);
  header.span_id.fill(static_cast<std::uint8_t>(seed + 1));
  header.valid = valid;
  header.trace_flags = 1;
  std::vector<AttributeEntry> entries;
  for (auto k : keys) entries.push_back({0, k, {'v', 'a', 'l'}});
  auto attrs = encode_entries(entries);
  auto bytes = encode_record(header, *attrs);
  return RecordBytes(*bytes);
}

RecordSample sample(const RecordBytes& bytes, std::uint64_t context_at = 100) {
  RecordSample s;
  s.tid = kThread;
  s.record_pointer = kRecordA;
  s.bytes = bytes;
  s.declared_length = bytes.size();
  s.context_published_at = context_at;
  return s;
}

// ---- exported spans and the times of reads ---------------------------------

// CLOCK_REALTIME - CLOCK_MONOTONIC as the sampler measured it: a read at
// monotonic ms M happened at unix ns kWallOffset + M ms.
constexpr std::int64_t kWallOffset = 1'700'000'000'000'000'000;
constexpr std::uint64_t ms(std::uint64_t m) { return m * 1'000'000; }

// The span record(seed) names, exported with `flags` (OTLP: W3C flags in
// bits 0-7, 0x100 "remote known"), running from monotonic ms `start` to `end`.
otlp::ReceivedSpan exported(std::uint8_t seed, std::uint32_t flags, std::uint64_t start = 0, std::uint64_t end = 100) {
  otlp::ReceivedSpan s;
  s.trace_id.fill(seed);
  s.span_id.fill(static_cast<std::uint8_t>(seed + 1));
  s.flags = flags;
  s.start_unix_nano = kWallOffset + ms(start);
  s.end_unix_nano = kWallOffset + ms(end);
  return s;
}

// A read of `bytes` (nullopt: the pointer was NULL) at monotonic ms `at`,
// the thread stopped `stop_ms` after the interrupt, having waited `waited_ms`
// in run queues since it started.
RecordSample read_at(std::optional<RecordBytes> bytes, std::uint64_t at, std::uint64_t waited_ms = 0,
                     std::uint64_t stop_ms = 0) {
  RecordSample s;
  s.tid = kThread;
  s.time_ns = ms(at);
  s.interrupted_ns = ms(at - stop_ms);
  s.run_queue_wait_ns = ms(waited_ms);
  s.context_published_at = 100;
  if (bytes) {
    s.record_pointer = kRecordA;
    s.declared_length = bytes->size();
    s.bytes = std::move(bytes);
  } else {
    s.error = SampleError::RecordPointerNull;
  }
  return s;
}

ThreadContextFacts writer(const char* session) {
  ThreadContextFacts f;
  f.session = session;
  f.judged_pid = kWriter;
  f.publications.push_back(publication(100, kStartupKeys));
  f.wall_minus_monotonic_at_start_ns = f.wall_minus_monotonic_at_end_ns = kWallOffset;
  return f;
}

using Build = std::function<void(SessionSet&)>;

Build in_session(const char* name, std::function<void(ThreadContextFacts&)> edit,
                 std::function<void(SessionEvidence&)> session_edit = {}) {
  return [=](SessionSet& set) {
    auto f = writer(name);
    edit(f);
    SessionEvidence e;
    e.name = name;
    if (session_edit) session_edit(e);
    e.protocol = std::make_shared<ThreadContextFacts>(f);
    set.add(std::move(e));
  };
}
Build sampled(std::function<void(ThreadContextFacts&)> edit, std::function<void(SessionEvidence&)> session_edit = {}) {
  return in_session(kSampledSession, std::move(edit), std::move(session_edit));
}

// ---- the watch: a thread's states in store order ------------------------

PublishedRecordState state(Cause cause, std::uint64_t pointer, std::optional<RecordBytes> bytes) {
  PublishedRecordState s;
  s.cause = cause;
  s.pointer = pointer;
  s.record = std::move(bytes);
  s.pc_after_store = cause == Cause::kSlotStore || cause == Cause::kRecordStore ? 0x401000 : 0;
  s.watched = {{8, 16}, {16, 24}, {24, 32}};
  return s;
}

RecordBytes with_byte(RecordBytes bytes, std::size_t offset, std::uint8_t value) {
  std::vector<std::uint8_t> v(bytes.begin(), bytes.end());
  v[offset] = value;
  return RecordBytes(v);
}

Build watched(std::vector<PublishedRecordState> states) {
  return in_session(kWatchedSession, [states](ThreadContextFacts& f) {
    PublishedRecordWatchReport r;
    r.pid = kWriter;
    r.tid = kThread;
    r.states = states;
    r.other_writer_changes = static_cast<std::size_t>(
        std::count_if(states.begin(), states.end(), [](const auto& s) { return s.cause == Cause::kOtherWriter; }));
    f.watches.push_back({kThread, r, std::nullopt});
  });
}

// Pointer swaps done right: A published complete, then `count` swaps between
// B and A, each to a new complete record (the last one `last`), the record
// left unchanged. kMinWatchedChanges of them by default: enough for a verdict.
std::vector<PublishedRecordState> swaps(std::size_t count = kMinWatchedChanges,
                                        std::optional<RecordBytes> last = std::nullopt) {
  std::vector<PublishedRecordState> s{state(Cause::kWatchBegan, 0, std::nullopt),
                                      state(Cause::kSlotStore, kRecordA, record(1))};
  for (std::size_t i = 1; i <= count; ++i) {
    auto next = state(Cause::kSlotStore, i % 2 ? kRecordB : kRecordA,
                      i == count && last ? *last : record(static_cast<std::uint8_t>(i + 1)));
    next.left_record = s.back().record;
    s.push_back(next);
  }
  return s;
}

// In place done right, `cycles` times: valid 0, the ids, valid 1 (two flips a
// cycle; enough for a verdict by default).
std::vector<PublishedRecordState> in_place(std::size_t cycles = kMinWatchedChanges / 2) {
  std::vector<PublishedRecordState> s{state(Cause::kWatchBegan, kRecordA, record(1))};
  for (std::size_t c = 1; c <= cycles; ++c) {
    const auto seed = static_cast<std::uint8_t>(c);
    s.push_back(state(Cause::kRecordStore, kRecordA, record(seed, 0)));
    s.push_back(state(Cause::kRecordStore, kRecordA, record(static_cast<std::uint8_t>(seed + 1), 0)));
    s.push_back(state(Cause::kRecordStore, kRecordA, record(static_cast<std::uint8_t>(seed + 1), 1)));
  }
  return s;
}

// An append done right after enough swaps: the entries are there when the size grows.
std::vector<PublishedRecordState> append(bool size_first) {
  auto before = record(1, 1, {0});
  auto after = record(1, 1, {0, 1});
  auto s = swaps(kMinWatchedChanges, before);
  const std::uint64_t at = s.back().pointer, elsewhere = at == kRecordA ? kRecordB : kRecordA;
  if (!size_first) {
    s.push_back(state(Cause::kRecordStore, at, after));
    return s;
  }
  // The size first: the new bytes read as zeros, then the entry lands under valid.
  auto zeros = with_byte(with_byte(with_byte(with_byte(after, before.size(), 0), before.size() + 1, 0), before.size() + 2, 0),
                         before.size() + 3, 0);
  s.push_back(state(Cause::kRecordStore, at, zeros));
  auto moved = state(Cause::kSlotStore, elsewhere, record(2));
  moved.left_record = after;
  s.push_back(moved);
  return s;
}

// ---- TCTX-01..05 ----------------------------------------------------------

class VariableJudge : public testing::TestWithParam<JudgeCase> {};
TEST_P(VariableJudge, Judges) { check(GetParam()); }
INSTANTIATE_TEST_SUITE_P(
    Cases, VariableJudge,
    testing::Values(
        JudgeCase{"NoSymbolInDynsym", "TCTX-01", sampled([](auto& f) {
                    f.module_error = make_error(ErrorKind::kNotFound, "no module the process maps defines otel_thread_ctx_v1");
                  }),
                  Outcome::Violated, "announces thread context"},
        JudgeCase{"NoWriterNoVerdict", "TCTX-01", sampled([](auto& f) {
                    f.publications.clear();
                    f.not_found = make_error("no process context carrying threadlocal keys");
                  }),
                  Outcome::NotApplicable, "no thread-context writer"},
        JudgeCase{"TypeUnknownWithoutModule", "TCTX-02", sampled([](auto& f) {
                    f.module_error = make_error(ErrorKind::kNotFound, "none");
                  }),
                  Outcome::NotApplicable, "(TCTX-01)"}));

// ---- TCTX-06..10 ----------------------------------------------------------

class ReferenceJudge : public testing::TestWithParam<JudgeCase> {};
TEST_P(ReferenceJudge, Judges) { check(GetParam()); }
INSTANTIATE_TEST_SUITE_P(
    Cases, ReferenceJudge,
    testing::Values(
        JudgeCase{"SchemaPublished", "TCTX-06", sampled([](auto&) {}), Outcome::Met, ""},
        JudgeCase{"NoSchema", "TCTX-06", sampled([](auto& f) {
                    f.publications[0].data->schema_version.reset();
                    f.publications[0].data->schema_version_value.reset();
                  }),
                  Outcome::Violated, ""},
        // threadlocal.* keys where no reader looks: the rule that puts them in attributes fails.
        JudgeCase{"SchemaInTheResource", "TCTX-06", sampled([](auto& f) {
                    auto& d = *f.publications[0].data;
                    d.schema_version.reset();
                    d.schema_version_value.reset();
                    d.keys_in_resource = {"threadlocal.schema_version"};
                  }),
                  Outcome::Violated, "is in the process context's resource, not its attributes", "in the resource"},
        JudgeCase{"KeyMapInTheResource", "TCTX-07", sampled([](auto& f) {
                    auto& d = *f.publications[0].data;
                    d.key_map.reset();
                    d.key_map_value.reset();
                    d.resource_key_map = kStartupKeys;
                    d.keys_in_resource = {"threadlocal.attribute_key_map"};
                  }),
                  Outcome::Violated, "threadlocal.attribute_key_map is in the process context's resource"},
        // Its records are still read by the map the writer meant.
        JudgeCase{"RecordsJudgedByTheResourcesMap", "TCTX-11", sampled([](auto& f) {
                    auto& d = *f.publications[0].data;
                    d.key_map.reset();
                    d.key_map_value.reset();
                    d.resource_key_map = kStartupKeys;
                    d.keys_in_resource = {"threadlocal.attribute_key_map"};
                    f.samples.push_back(sample(record(1, 1, {0, 3})));
                  }),
                  Outcome::Met, ""},
        JudgeCase{"KeyMapAsString", "TCTX-07", sampled([](auto& f) {
                    f.publications[0].data->key_map.reset();
                    f.publications[0].data->key_map_value = otlp::AttributeValue("http.route,http.method");
                    f.samples.push_back(sample(record(1)));
                  }),
                  Outcome::Violated, ""},
        JudgeCase{"KeysAppended", "TCTX-08", sampled([](auto& f) {
                    auto keys = kStartupKeys;
                    keys.push_back("tracecorr.late");
                    f.publications.push_back(publication(200, keys));
                  }),
                  Outcome::Met, "1 key(s) appended", "", 1},
        JudgeCase{"KeysReordered", "TCTX-08", sampled([](auto& f) {
                    KeyMap keys{"tracecorr.late", "http.method", "tracecorr.note", "http.status_code", "http.route"};
                    f.publications.push_back(publication(200, keys));
                  }),
                  Outcome::Violated, "key index 0 named http.route in publication 100 and tracecorr.late"},
        JudgeCase{"OnePublicationNothingToCompare", "TCTX-08", sampled([](auto&) {}), Outcome::NotApplicable,
                  "published once"},
        JudgeCase{"AppendingIsAFreedom", "TCTX-09", sampled([](auto&) {}), Outcome::NotApplicable, "(MAY)"},
        JudgeCase{"KeyBeforeItsPublication", "TCTX-10", sampled([](auto& f) {
                    auto keys = kStartupKeys;
                    keys.push_back("tracecorr.late");
                    f.publications.push_back(publication(200, keys));
                    f.samples.push_back(sample(record(1, 1, {0, 4}), 100));
                  }),
                  Outcome::Violated, "key index 4 (tracecorr.late) was visible while the current publication (100) had 4 keys"},
        JudgeCase{"KeyAfterItsPublication", "TCTX-10", sampled([](auto& f) {
                    auto keys = kStartupKeys;
                    keys.push_back("tracecorr.late");
                    f.publications.push_back(publication(200, keys));
                    f.samples.push_back(sample(record(1, 1, {0, 4}), 200));
                    f.samples.push_back(sample(record(1, 1, {0, 1}), 100));
                  }),
                  Outcome::Met, "carrying a key appended", "", 1},
        JudgeCase{"NoAppendSeenNoVerdict", "TCTX-10", sampled([](auto& f) {
                    f.samples.push_back(sample(record(1, 1, {0, 1}), 100));
                  }),
                  Outcome::NotApplicable, "no key was appended while tracecorr sampled"},
        JudgeCase{"KeyNoMapExplainsIsNotTCTX10", "TCTX-10", sampled([](auto& f) {
                    f.samples.push_back(sample(record(1, 1, {0, 9})));
                  }),
                  Outcome::NotApplicable, ""},
        JudgeCase{"UnmatchedSamplesNoVerdict", "TCTX-10", sampled([](auto& f) {
                    f.samples.push_back(sample(record(1), 999));
                  }),
                  Outcome::NotApplicable, "1 unmatched"}));

// ---- TCTX-11..20 ----------------------------------------------------------

// `count` valid records, trace_flags 0, naming kFlagsNeverSetSpans spans in turn.
void add_unflagged(ThreadContextFacts& f, std::size_t count) {
  for (std::size_t i = 0; i < count; ++i)
    f.samples.push_back(sample(with_byte(record(static_cast<std::uint8_t>(1 + i % kFlagsNeverSetSpans)), 25, 0)));
}

class RecordJudge : public testing::TestWithParam<JudgeCase> {};
TEST_P(RecordJudge, Judges) { check(GetParam()); }
INSTANTIATE_TEST_SUITE_P(
    Cases, RecordJudge,
    testing::Values(
        JudgeCase{"KeysInsideTheMap", "TCTX-11", sampled([](auto& f) { f.samples.push_back(sample(record(1))); }),
                  Outcome::Met, ""},
        JudgeCase{"KeyOutsideEveryMap", "TCTX-11", sampled([](auto& f) {
                    f.samples.push_back(sample(record(1, 1, {0, 7})));
                  }),
                  Outcome::Violated, "outside the 4-key map"},
        JudgeCase{"UnreadableRecord", "TCTX-12", sampled([](auto& f) {
                    RecordSample s;
                    s.tid = kThread;
                    s.record_pointer = kRecordA;
                    s.error = SampleError::RecordReadFailed;
                    f.samples.push_back(s);
                  }),
                  Outcome::Violated, "cannot be read"},
        JudgeCase{"ValidTwo", "TCTX-13", sampled([](auto& f) { f.samples.push_back(sample(record(1, 2))); }),
                  Outcome::Violated, ""},
        JudgeCase{"NoSpansExported", "TCTX-14", sampled([](auto& f) { f.samples.push_back(sample(record(1))); }),
                  Outcome::NotApplicable, "exported no spans"},
        JudgeCase{"FlagsAsExported", "TCTX-14", sampled([](auto& f) { f.samples.push_back(sample(record(1))); },
                                                        [](SessionEvidence& e) { e.spans.push_back(exported(1, 0x101)); }),
                  Outcome::Met, "carried its flags (1 sampled, 0 not)", "", 1},
        JudgeCase{"FlagsNotAsExported", "TCTX-14", sampled([](auto& f) { f.samples.push_back(sample(record(1))); },
                                                           [](SessionEvidence& e) { e.spans.push_back(exported(1, 0x100)); }),
                  Outcome::Violated, "was exported with flags 0"},
        JudgeCase{"ExporterWithoutFlagsField", "TCTX-14",
                  sampled([](auto& f) { f.samples.push_back(sample(record(1))); },
                          [](SessionEvidence& e) { e.spans.push_back(exported(1, 0)); }),
                  Outcome::NotApplicable, "predates the field"},
        JudgeCase{"SpanNeverExportedNotJudged", "TCTX-14",
                  sampled([](auto& f) { f.samples.push_back(sample(record(1))); },
                          [](SessionEvidence& e) { e.spans.push_back(exported(7, 0x101)); }),
                  Outcome::NotApplicable, "1 named a span never exported"},
        // No span to compare with: hundreds of valid records naming many spans, none with a flag set,
        // are a warning (a writer that never sets the sampled bit), not silence.
        JudgeCase{"FlagsNeverSetWithoutSpans", "TCTX-14", sampled([](auto& f) { add_unflagged(f, kFlagsNeverSetRecords); }),
                  Outcome::Tolerated, "trace_flags was 0 in every one of the 100 valid sampled records", "00 in all 100"},
        JudgeCase{"FlagsNeverSetUnderFlaglessExporter", "TCTX-14",
                  sampled([](auto& f) { add_unflagged(f, kFlagsNeverSetRecords); },
                          [](SessionEvidence& e) { e.spans.push_back(exported(1, 0)); }),
                  Outcome::Tolerated, "predates the field"},
        JudgeCase{"TooFewUnflaggedRecordsToWarn", "TCTX-14",
                  sampled([](auto& f) { add_unflagged(f, kFlagsNeverSetRecords - 1); }), Outcome::NotApplicable,
                  "99 valid sampled record(s) named a span, 0 with flags set"},
        JudgeCase{"TooFewSpansToWarn", "TCTX-14", sampled([](auto& f) {
                    for (std::size_t i = 0; i < kFlagsNeverSetRecords; ++i)
                      f.samples.push_back(sample(with_byte(record(static_cast<std::uint8_t>(1 + i % 3)), 25, 0)));
                  }),
                  Outcome::NotApplicable, "exported no spans"},
        JudgeCase{"OneFlagSetIsNoWarning", "TCTX-14", sampled([](auto& f) {
                    add_unflagged(f, kFlagsNeverSetRecords);
                    f.samples.push_back(sample(record(200)));
                  }),
                  Outcome::NotApplicable, "1 with flags set"},
        JudgeCase{"FlagsWithoutIds", "TCTX-14", sampled([](auto& f) {
                    ThreadContextRecord header;
                    header.valid = 1;
                    header.trace_flags = 1;
                    f.samples.push_back(sample(RecordBytes(*encode_record(header, {}))));
                  }),
                  Outcome::Violated, "without trace and span ids"},
        JudgeCase{"RepeatedKeysAreAFreedom", "TCTX-18",
                  sampled([](auto& f) { f.samples.push_back(sample(record(1, 1, {0, 0}))); }), Outcome::NotApplicable,
                  "1 repeated key(s)"},
        JudgeCase{"NoRecordNoVerdict", "TCTX-16", sampled([](auto&) {}), Outcome::NotApplicable, "none with a record"}));

// ---- TCTX-27 ---------------------------------------------------------------

// Span 1 runs from 0 to 100 ms (monotonic), span 3 from 100 to 200 ms.
void two_spans(SessionEvidence& e) {
  e.spans.push_back(exported(1, 0x101, 0, 100));
  e.spans.push_back(exported(3, 0x100, 100, 200));
}

class DetachJudge : public testing::TestWithParam<JudgeCase> {};
TEST_P(DetachJudge, Judges) { check(GetParam()); }
INSTANTIATE_TEST_SUITE_P(
    Cases, DetachJudge,
    testing::Values(
        JudgeCase{"NoSpansNoVerdict", "TCTX-27", sampled([](auto& f) { f.samples.push_back(read_at(record(1), 50)); }),
                  Outcome::NotApplicable, "exported no spans"},
        JudgeCase{"DetachedOnceTheSpanEnded", "TCTX-27", sampled([](auto& f) {
                    f.samples.push_back(read_at(record(1), 50));
                    f.samples.push_back(read_at(std::nullopt, 105));
                  }, two_spans),
                  Outcome::Met, "1 found the record detached", "", 2},
        JudgeCase{"ValidZeroIsDetached", "TCTX-27", sampled([](auto& f) {
                    f.samples.push_back(read_at(record(1), 50));
                    f.samples.push_back(read_at(record(1, 0), 105));
                  }, two_spans),
                  Outcome::Met, "1 found the record detached", "", 2},
        JudgeCase{"ReplacedByTheNextSpan", "TCTX-27", sampled([](auto& f) {
                    f.samples.push_back(read_at(record(3), 150));  // order of reads is the judge's to restore
                    f.samples.push_back(read_at(record(1), 50));
                  }, two_spans),
                  Outcome::Met, "1 another span's", "", 3},
        JudgeCase{"StillAttachedAfterItsSpanEnded", "TCTX-27", sampled([](auto& f) {
                    f.samples.push_back(read_at(record(1), 50));
                    f.samples.push_back(read_at(record(1), 1100));
                  }, two_spans),
                  Outcome::Violated, "still attached 1000 ms after its span (trace"},
        JudgeCase{"AttachedWhileItsWriterWaitedForACpuIsNotAFailure", "TCTX-27", sampled([](auto& f) {
                    f.samples.push_back(read_at(record(1), 50, 10));
                    f.samples.push_back(read_at(record(1), 1100, 980));  // 1000 ms late, 40 of them its own
                    f.samples.push_back(read_at(std::nullopt, 1200, 980));
                  }, two_spans),
                  Outcome::Met, "1 found it attached past its span's end by less than 50 ms of the writer's own time"},
        JudgeCase{"AThreadSlowToStopIsReadAtTheInterrupt", "TCTX-27", sampled([](auto& f) {
                    f.samples.push_back(read_at(record(1), 50));
                    f.samples.push_back(read_at(record(1), 190, 0, 100));  // interrupted at 90, before the end's margin
                    f.samples.push_back(read_at(std::nullopt, 300));
                  }, two_spans),
                  Outcome::Met, "2 read(s) named a running exported span"},
        JudgeCase{"NoReadAfterItNoBoundOnTheWaits", "TCTX-27", sampled([](auto& f) {
                    f.samples.push_back(read_at(record(1), 50));
                    RecordSample late = read_at(record(1), 1100);
                    late.run_queue_wait_ns.reset();  // schedstat unreadable: nothing bounds its waits
                    f.samples.push_back(late);
                  }, two_spans),
                  Outcome::NotApplicable, "or by a time no read bounds"},
        JudgeCase{"WithinTheMarginNotJudged", "TCTX-27", sampled([](auto& f) {
                    f.samples.push_back(read_at(record(1), 50));
                    f.samples.push_back(read_at(record(1), 100 + kDetachMargin.count() / 1'000'000 - 1));
                  }, two_spans),
                  Outcome::NotApplicable, "no read came after one of a thread's spans had ended"},
        JudgeCase{"DetachedWithoutAnEndedSpanIsNoEvidence", "TCTX-27", sampled([](auto& f) {
                    f.samples.push_back(read_at(std::nullopt, 50));
                    f.samples.push_back(read_at(record(1), 60));
                  }, two_spans),
                  Outcome::NotApplicable, "1 read(s) named a running exported span"},
        JudgeCase{"WallClockStepped", "TCTX-27", sampled([](auto& f) {
                    f.samples.push_back(read_at(record(1), 1100));
                    *f.wall_minus_monotonic_at_end_ns += ms(3000);
                  }, two_spans),
                  Outcome::NotApplicable, "the wall clock was stepped by 3000 ms"},
        JudgeCase{"AnOffsetWithinItsReadsUncertaintyIsNoStep", "TCTX-27", sampled([](auto& f) {
                    f.samples.push_back(read_at(record(1), 50));
                    f.samples.push_back(read_at(std::nullopt, 105));
                    *f.wall_minus_monotonic_at_end_ns += ms(30);
                    f.wall_offset_uncertainty_ns = ms(10);
                  }, two_spans),
                  Outcome::Met, "1 found the record detached", "", 2},
        JudgeCase{"ClockReadsTooFarApartToPlaceTheWallClock", "TCTX-27", sampled([](auto& f) {
                    f.samples.push_back(read_at(record(1), 1100));
                    f.wall_offset_uncertainty_ns = ms(40);
                  }, two_spans),
                  Outcome::NotApplicable, "could not be placed on the monotonic one"},
        JudgeCase{"SamplerNeverRan", "TCTX-27", sampled([](auto& f) {
                    f.wall_minus_monotonic_at_start_ns.reset();
                  }, two_spans),
                  Outcome::NotApplicable, "the sampler did not run"}));

// A pass on exported spans rests on more than a handful of reads.
TEST(SpanJudges, PassNeedsMinimumReads) {
  for (const char* id : {"TCTX-14", "TCTX-27"}) {
    const conform::Probe* probe = conform::probe_for(id);
    ASSERT_NE(probe, nullptr) << id;
    EXPECT_EQ(probe->minimum_evidence(id), kMinReadsAgainstSpans) << id;
  }
  EXPECT_EQ(conform::probe_for("TCTX-27")->sessions_for("TCTX-27"), std::vector<std::string>{kSampledSession});
}

// ---- TCTX-21..28 ----------------------------------------------------------

class PublicationJudge : public testing::TestWithParam<JudgeCase> {};
TEST_P(PublicationJudge, Judges) { check(GetParam()); }
INSTANTIATE_TEST_SUITE_P(
    Cases, PublicationJudge,
    testing::Values(
        JudgeCase{"SwapsOfCompleteRecords", "TCTX-21", watched(swaps()), Outcome::Met, "pointer store(s)", "",
                  kMinWatchedChanges + 1},
        JudgeCase{"PointerBeforeRecord", "TCTX-21",
                  watched([] {
                    auto s = swaps();
                    s.push_back(state(Cause::kRecordStore, s.back().pointer, with_byte(*s.back().record, 8, 0x77)));
                    return s;
                  }()),
                  Outcome::Violated, "changed while the record was visible and valid"},
        JudgeCase{"UnwatchedChangeBeforeTheSwap", "TCTX-21",
                  watched([] {
                    auto s = swaps();
                    s.back().left_record = with_byte(*s.back().left_record, 34, 0x77);
                    return s;
                  }()),
                  Outcome::Violated, "before the pointer moved away"},
        JudgeCase{"NoSwapNoVerdict", "TCTX-21", watched(in_place()), Outcome::NotApplicable, "no pointer swap"},
        JudgeCase{"InPlaceUnderValidZero", "TCTX-23", watched(in_place()), Outcome::Met, "in-place update(s)", "",
                  kMinWatchedChanges / 2},
        JudgeCase{"InPlaceWithoutFlip", "TCTX-23",
                  watched({state(Cause::kWatchBegan, kRecordA, record(1)),
                           state(Cause::kRecordStore, kRecordA, with_byte(record(1), 9, 0x55))}),
                  Outcome::Violated, "changed while the record was visible and valid"},
        JudgeCase{"UnwatchedChangeSeenAtTheClear", "TCTX-23",
                  watched({state(Cause::kWatchBegan, kRecordA, record(1)),
                           state(Cause::kRecordStore, kRecordA, with_byte(record(1, 0), 2, 0x55))}),
                  Outcome::Violated, "unwatched"},
        JudgeCase{"OneStyleEach", "TCTX-24", watched(swaps()), Outcome::Met, "one style"},
        JudgeCase{"SwapAndFlip", "TCTX-24",
                  watched([] {
                    auto s = swaps();
                    const auto seed = (*s.back().record)[8];
                    s.back().record = record(seed, 0);
                    s.push_back(state(Cause::kRecordStore, s.back().pointer, record(seed, 1)));
                    return s;
                  }()),
                  Outcome::Violated, "8 pointer swap(s) and 1 change(s) of valid"},
        // A thread that gave way to others and was watched again is one thread: its styles add up.
        JudgeCase{"TwoWatchesOfOneThreadMixingStyles", "TCTX-24", in_session(kWatchedSession, [](ThreadContextFacts& f) {
                    for (const auto& states : {swaps(), in_place()}) {
                      PublishedRecordWatchReport r;
                      r.pid = kWriter;
                      r.tid = kThread;
                      r.states = states;
                      f.watches.push_back({kThread, r, std::nullopt});
                    }
                  }),
                  Outcome::Violated, "8 pointer swap(s) and 8 change(s) of valid"},
        JudgeCase{"PerThreadCountsInTheReason", "TCTX-24", watched(swaps()), Outcome::Met,
                  "per thread (swaps/flips): 4243 8/0"},
        JudgeCase{"EntriesBeforeSize", "TCTX-25", watched(append(false)), Outcome::Met, "1 append(s)"},
        JudgeCase{"SizeBeforeEntries", "TCTX-25", watched(append(true)), Outcome::Violated, "appended by the last size store"},
        JudgeCase{"NoAppendNoVerdict", "TCTX-25", watched(swaps()), Outcome::NotApplicable, "no record grew"},
        JudgeCase{"OnlyTheThreadWrites", "TCTX-28", watched(in_place()), Outcome::Met, "thread(s)' records watched"},
        JudgeCase{"AnotherWriter", "TCTX-28",
                  watched({state(Cause::kWatchBegan, kRecordA, record(1)),
                           state(Cause::kOtherWriter, kRecordA, with_byte(record(1), 23, 0x80))}),
                  Outcome::Violated, "changed while the thread made no store to them"},
        JudgeCase{"NoWatchNoVerdict", "TCTX-28", in_session(kWatchedSession, [](auto& f) {
                    f.watch_unavailable = "hardware watchpoints are implemented for x86-64 and arm64 hosts only";
                  }),
                  Outcome::NotApplicable, "x86-64 and arm64 hosts only"},
        // A watch that saw no store at all (a starved writer) judges no style: inconclusive, not a skip.
        JudgeCase{"NothingChangedIsInconclusiveForSwaps", "TCTX-21",
                  watched({state(Cause::kWatchBegan, kRecordA, record(1))}), Outcome::KitError, "saw 0 pointer swap(s)"},
        JudgeCase{"NothingChangedIsInconclusiveInPlace", "TCTX-23",
                  watched({state(Cause::kWatchBegan, kRecordA, record(1))}), Outcome::KitError, "saw 0 pointer swap(s)"},
        JudgeCase{"NothingChangedIsInconclusiveForStyle", "TCTX-24",
                  watched({state(Cause::kWatchBegan, kRecordA, record(1))}), Outcome::KitError, "saw 0 pointer swap(s)"},
        JudgeCase{"NothingChangedIsInconclusiveForAppends", "TCTX-25",
                  watched({state(Cause::kWatchBegan, kRecordA, record(1))}), Outcome::KitError, "saw 0 pointer swap(s)"},
        // Nor does a watch that saw a few: a starved arm64 guest showed one in-place cycle of a
        // mutant whose breach comes with its span switches, and TCTX-23 passed on it; a swapping
        // mutant showed two flips, and TCTX-21 said "no pointer swap seen".
        JudgeCase{"OneCycleIsInconclusiveInPlace", "TCTX-23", watched(in_place(1)), Outcome::KitError,
                  "saw 2 pointer swap(s) and valid flip(s), fewer than the 8"},
        JudgeCase{"TwoFlipsAreInconclusiveForSwaps", "TCTX-21", watched(in_place(1)), Outcome::KitError,
                  "fewer than the 8"},
        JudgeCase{"FewSwapsAreInconclusive", "TCTX-21", watched(swaps(kMinWatchedChanges - 1)), Outcome::KitError,
                  "saw 7 pointer swap(s)"},
        JudgeCase{"FewSwapsStillShowABreach", "TCTX-21",
                  watched([] {
                    auto s = swaps(1);
                    s.push_back(state(Cause::kRecordStore, s.back().pointer, with_byte(*s.back().record, 8, 0x77)));
                    return s;
                  }()),
                  Outcome::Violated, "changed while the record was visible and valid"}));

}  // namespace
}  // namespace tracecorr::otel_thread_context

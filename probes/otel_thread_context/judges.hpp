// The OTEP 4947 suite's judges over plain evidence (evidence.hpp): the
// shared checks (otel_thread_context/checks.hpp) applied to what a session
// saw, and the rules only a session can judge (the key map over time, the
// writer's stores). Each is defined beside its area's probe
// (<area>_probe.cpp), which only picks the session.
#pragma once

#include <chrono>
#include <cstddef>
#include <vector>

#include "evidence.hpp"
#include "tracecorr/conform/session_evidence.hpp"
#include "tracecorr/finding.hpp"

namespace tracecorr::otel_thread_context {

// TCTX-14 and 27 pass on no fewer sampled records judged against the spans
// the writer exported (the probes' minimum_evidence; below it: inconclusive).
inline constexpr std::size_t kMinReadsAgainstSpans = 10;
// TCTX-21, 23, 24, 25: the pointer swaps and valid flips the watch must see
// before a rule of publication is judged, passed or called not applicable
// (a breach is judged on any). Below it the writer was starved or idle while
// watched: an emulated guest beside a busy host showed one flip in 3.5 s of a
// writer that makes a hundred, and a mutant whose breach comes with its span
// switches escaped as "no swap seen". Inconclusive, with the figures.
inline constexpr std::size_t kMinWatchedChanges = 8;
// TCTX-14 without exported spans to compare with: a warning when at least
// this many valid sampled records, naming at least kFlagsNeverSetSpans
// distinct spans, all carried trace_flags 0 (a writer that never sets the
// sampled bit; an SDK whose every span is unsampled shows the same, hence a
// warning, not a failure).
inline constexpr std::size_t kFlagsNeverSetRecords = 100;
inline constexpr std::size_t kFlagsNeverSetSpans = 10;
// TCTX-27: how long after its span's exported end, in its writer's own
// time, a record may still be read attached (detach_probe.cpp, judge_detach,
// says why).
inline constexpr std::chrono::nanoseconds kDetachMargin = std::chrono::milliseconds(50);

// Whether a record read whole has its valid byte set.
bool valid_record(const std::optional<RecordBytes>& r);

// variable_probe.cpp. TCTX-01..05: the module found (or not) in the process that published keys.
std::vector<Finding> judge_variable(const ThreadContextFacts& facts);
// reference_probe.cpp. TCTX-06, 07 (every publication, the worst standing), 08 (consecutive key
// maps), 09 (MAY: what was seen).
std::vector<Finding> judge_reference_data(const ThreadContextFacts& facts);
// TCTX-10: each sampled record's keys against the publication current when
// its thread was stopped (the sample's timestamp).
Finding judge_key_published_first(const ThreadContextFacts& sampled);
// record_probe.cpp. TCTX-11..13, 15..20 over every sampled record (the worst standing; TCTX-11
// against the longest key map seen), 14 against the spans the writer
// exported (not applicable without any), 18 (MAY).
std::vector<Finding> judge_records(const conform::SessionEvidence& session, const ThreadContextFacts& sampled);
// detach_probe.cpp. TCTX-27: no sampled record names a span that had ended (as exported)
// before its thread was stopped.
Finding judge_detach(const conform::SessionEvidence& session, const ThreadContextFacts& sampled);
// publication_probe.cpp. TCTX-21..26, 28 from the published-record watches.
std::vector<Finding> judge_publication(const ThreadContextFacts& watched);

}  // namespace tracecorr::otel_thread_context

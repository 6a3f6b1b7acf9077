// The Node.js thread context's reader side (profiler mode): the stage of
// V8-shaped writers (the addon's TLS model in static and dynamic TLS, and
// processes under another schema or none), each thread journaling what it
// published, with the walk's hazards in turn; and the probes of NJSR-01..14
// judging a profiler's samples against those journals.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "tracecorr/profiler/reader_suite.hpp"

namespace tracecorr::otel_nodejs_thread_context::reader {

using profiler::MemberEvidence;
using profiler::ReaderEvidence;
using profiler::ReaderProbe;

std::vector<profiler::StageMember> stage(const profiler::StageOptions& options);

std::unique_ptr<ReaderProbe> make_link_probe();    // link_probe.cpp: NJSR-02, 03, 13
std::unique_ptr<ReaderProbe> make_walk_probe();    // walk_probe.cpp: NJSR-04..06, 08, 10, 11, 14
std::unique_ptr<ReaderProbe> make_schema_probe();  // schema_probe.cpp: NJSR-01
std::unique_ptr<ReaderProbe> make_record_probe();  // record_probe.cpp: NJSR-12

// The members whose records a conforming reader reads, and those it must leave alone.
std::vector<const MemberEvidence*> read_members(const ReaderEvidence& evidence);
std::vector<const MemberEvidence*> unread_members(const ReaderEvidence& evidence);

// The checked samples of every read member taken while its thread showed
// `hazard` ("": every sample), with the member they are of.
struct HazardSample {
  const MemberEvidence* member = nullptr;
  profiler::CheckedSample sample;
};
std::vector<HazardSample> samples_in(const ReaderEvidence& evidence, const std::string& hazard);

// A sample reporting what no state around it holds: ids never published
// valid (poison), ids of another time (stale), a torn pair, ids from nowhere.
bool reports_wrong_ids(const profiler::CheckedSample& sample);

// At least this many samples of a hazard make its verdict; fewer: inconclusive.
inline constexpr std::size_t kMinSamples = 5;
// A read state may miss this share of its samples (its first moments, a
// sample the sampler could not finish) before a reader is said not to read it.
inline constexpr double kMissingShare = 0.10;

}  // namespace tracecorr::otel_nodejs_thread_context::reader

// OTEP 4947's reader side (profiler mode): the stage of thread-context
// writers, in every TLS model the fixtures are built in, and the probes of
// TCTXR-01..16 judging a profiler's samples against their journals.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tracecorr/profiler/reader_suite.hpp"

namespace tracecorr::otel_thread_context::reader {

using profiler::MemberEvidence;
using profiler::ReaderEvidence;
using profiler::ReaderProbe;

std::vector<profiler::StageMember> stage(const profiler::StageOptions& options);

// The journal event of a writer whose process context gained its
// threadlocal.* keys late (--keys-on-signal, --keys-after-ms): {"t0", "t", "ok"}.
inline constexpr std::string_view kKeysEvent = "threadlocal_keys";

std::unique_ptr<ReaderProbe> make_link_probe();        // link_probe.cpp: TCTXR-05..08, 14
std::unique_ptr<ReaderProbe> make_attributes_probe();  // attributes_probe.cpp: TCTXR-01, 09..13, 16
std::unique_ptr<ReaderProbe> make_schema_probe();      // schema_probe.cpp: TCTXR-02..04, 15

// The members a probe judges: every one its writer is meant to be read in.
std::vector<const MemberEvidence*> read_members(const ReaderEvidence& evidence);
// A member's samples taken while its thread showed `hazard` ("": every sample).
std::size_t samples_in_hazard(const MemberEvidence& member, const profiler::MemberTally& tally, const std::string& hazard,
                              std::uint64_t tolerance_ns);

}  // namespace tracecorr::otel_thread_context::reader

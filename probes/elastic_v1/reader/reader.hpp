// Elastic v1's reader side (profiler mode): the reference APM agent on the
// stage, and the probes of TLS-08/09 (records read as the valid and
// trace-present bytes say) and MSG-01/08 (the datagrams a profiler sends it:
// registration first, counts that are the samples it took).
#pragma once

#include <memory>
#include <vector>

#include "tracecorr/profiler/reader_suite.hpp"

namespace tracecorr::elastic_v1::reader {

inline constexpr char kProtocolId[] = "elastic-v1";

std::vector<profiler::StageMember> stage(const profiler::StageOptions& options);
std::unique_ptr<profiler::ReaderProbe> make_msg_probe();  // msg_probe.cpp: MSG-01, MSG-08
std::unique_ptr<profiler::ReaderProbe> make_tls_probe();  // tls_probe.cpp: TLS-08, TLS-09

// The stage's Elastic writers that ran.
std::vector<const profiler::MemberEvidence*> elastic_members(const profiler::ReaderEvidence& evidence);

}  // namespace tracecorr::elastic_v1::reader

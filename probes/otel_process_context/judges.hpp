// The OTEP 4719 suite's judges, one function per requirement, over plain
// evidence (evidence.hpp). Each is defined beside its area's probe
// (<area>_probe.cpp), which only picks the sessions.
#pragma once

#include <vector>

#include "evidence.hpp"
#include "tracecorr/finding.hpp"

namespace tracecorr::otel_process_context {

// From the mapping watch (the watched session): seqlock_probe.cpp, naming_probe.cpp.
Finding judge_timestamp_written_last(const ContextFacts& watched);   // PCTX-07
Finding judge_zeroed_before_update(const ContextFacts& watched);     // PCTX-08
Finding judge_timestamp_moves_forward(const ContextFacts& watched);  // PCTX-09
Finding judge_named_on_publish(const ContextFacts& watched);         // PCTX-13
Finding judge_named_on_update(const ContextFacts& watched);          // PCTX-14
// From the smaps flags and the forks the watch saw: fork_probe.cpp.
Finding judge_not_inherited(const ContextFacts& session);            // PCTX-11
// From every session's seqlock reads: seqlock_probe.cpp.
Finding judge_no_torn_read(const std::vector<const ContextFacts*>& sessions);  // PCTX-10

// The least number of consistent reads PCTX-10's pass rests on.
inline constexpr std::size_t kMinimumConsistentReads = 20;

}  // namespace tracecorr::otel_process_context

// What the OTEP 4719 suite's judges of the mapping watch share (the seqlock
// and naming areas): why the watch cannot judge a session, what it said, the
// header history it recorded, and evidence built from a header.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "evidence.hpp"
#include "header_history.hpp"
#include "tracecorr/finding.hpp"

namespace tracecorr::otel_process_context {

// Why the watch cannot judge this session, or nullopt when it can.
std::optional<std::string> watch_missing(const ContextFacts& f);
// "mapping watch: <what it saw>", for a reason.
std::string watch_said(const ContextFacts& f);
// The judged process's header history, from the session's watch.
HeaderHistory history_of(const ContextFacts& f);
Evidence header_evidence(std::string label, const process_context::Header& header, std::string expected, std::string actual);
// "a, b, c".
std::string joined(const std::vector<std::string>& words);
// The publications after the first complete one: the updates.
std::vector<const Publication*> updates_of(const HeaderHistory& h);
// The event index of the first complete publication (events after it are updates).
std::optional<std::size_t> first_complete_publication(const HeaderHistory& h);

}  // namespace tracecorr::otel_process_context

// Profiler mode's truth: what the writers of the stage published, thread by
// thread, with honest time bounds, read back from their journals
// (docs/design/fixture-journal.md, the `state` and `context` events). A
// profiler's samples are judged against it: a context it reports for a
// thread at time T must be one the thread published around T.
//
// The journal's words are the engine's, not a protocol's: every package's
// stage writer journals the same `state` event (ids, attributes, ids that
// must never be reported), so one timeline serves every reader probe.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tracecorr/error.hpp"
#include "tracecorr/ids.hpp"

namespace tracecorr::profiler::stage {

using Attribute = std::pair<std::string, std::string>;  // key, value (UTF-8 as journaled)

// A context as a conforming reader reports it.
struct Context {
  TraceId trace_id{};
  SpanId span_id{};
  std::uint8_t trace_flags = 0;
  std::vector<Attribute> attributes;  // as a conforming reader names them (last duplicate wins, ...)
};

// One change of what a thread publishes: its first store after `begun_ns`,
// its last before `done_ns`; a reader may meet it until the thread's next
// change is done (`until_ns`).
struct ThreadState {
  std::int64_t pid = 0;
  std::int64_t tid = 0;
  std::uint64_t begun_ns = 0;  // unix ns before its first store
  std::uint64_t done_ns = 0;   // unix ns after its last store
  std::uint64_t until_ns = std::numeric_limits<std::uint64_t>::max();  // the next change's done_ns
  std::optional<Context> context;  // nullopt: a conforming reader reports no context
  // Ids in the record's memory a conforming reader never reports (a record
  // whose valid is not 1, trace-present 0), and values likewise (an entry
  // past the key map, the first of two duplicates, bytes past the bound).
  std::optional<std::pair<TraceId, SpanId>> poison;
  std::vector<std::string> poison_values;
  std::string hazard;  // "" or the hazard it shows ("valid_0_poison", "duplicate_key", ...)
};

// One publication of the process's OTel process context (OTEP 4719).
struct ContextPublication {
  std::uint64_t begun_ns = 0;
  std::uint64_t done_ns = 0;
  std::uint64_t until_ns = std::numeric_limits<std::uint64_t>::max();
  std::uint64_t published_at = 0;  // 0: the window of a publication being written
  std::vector<Attribute> resource;
  std::vector<std::string> poison_values;  // resource values a seqlock-respecting reader never takes
};

// One writer process of the stage, as its journal showed it.
struct MemberTruth {
  std::int64_t pid = 0;
  std::vector<ThreadState> states;  // by tid, then time
  std::vector<ContextPublication> contexts;
  std::vector<std::string> hazards_shown;    // announced by the writer ("hazards" event)
  std::vector<std::string> hazards_skipped;  // the writer could not show them (named, not hidden)
  std::vector<std::string> problems;         // lines that were not what the format says, bounded
  // Protocol-specific events a package's probes read (e.g. Elastic's
  // `message`), kept as their JSON text, bounded.
  std::map<std::string, std::vector<std::string>> other_events;
};

// Reads a journal's text. Malformed lines are named in problems (at most
// kMaxProblems), never fatal; a line longer than kMaxLineBytes is skipped.
inline constexpr std::size_t kMaxProblems = 20;
inline constexpr std::size_t kMaxLineBytes = 64 * 1024;
inline constexpr std::size_t kMaxStates = 1'000'000;
inline constexpr std::size_t kMaxOtherEvents = 100'000;
MemberTruth read_journal(std::string_view text, const std::vector<std::string>& other_events_kept = {});

// The states of thread `tid` whose lifetime meets [from_ns, to_ns]: what a
// sample taken in that window may rightly report.
std::vector<const ThreadState*> states_around(const MemberTruth& truth, std::int64_t tid, std::uint64_t from_ns,
                                              std::uint64_t to_ns);

}  // namespace tracecorr::profiler::stage

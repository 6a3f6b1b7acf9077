// What a session of the Node.js thread-context suite observed, as plain data:
// the process judged (the one whose process context declares the schema or
// that maps the module defining `otel_thread_ctx_nodejs_v1`), the module, the
// reference data, and every thread as each look found it, stopped (NJSR-03):
// how far its walk went, the record it reached, and what the rules one look
// judges (checks.hpp) found; or, in the watched session, every store into each
// thread's struct. The sessions fill it (looks.cpp, gate_watch.cpp); the
// probes judge it; tests build it by hand.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "otel_nodejs_thread_context/record.hpp"
#include "otel_nodejs_thread_context/walk.hpp"
#include "tracecorr/conform/exported_spans.hpp"
#include "tracecorr/conform/probe.hpp"
#include "tracecorr/conform/session_part.hpp"
#include "tracecorr/discovery.hpp"
#include "tracecorr/error.hpp"
#include "tracecorr/finding.hpp"
#include "tracecorr/watch/slot_watch.hpp"

namespace tracecorr::otel_nodejs_thread_context {

// "looked": every thread looked at, stopped, again and again while the writer
// runs (also what an attached target runs). "watched" (launch mode): each
// thread's struct under hardware watchpoints from the thread's start to its
// end, every store seen (the gate's order, NJS-04, 05).
inline constexpr const char* kLookedSession = "looked";
inline constexpr const char* kWatchedSession = "watched";

// One thread in one look.
struct ThreadLookFacts {
  pid_t tid = 0;
  // When the thread's state was the one read, on CLOCK_MONOTONIC: it stopped
  // after the look began (time_ns) and before its read ran (stopped_by_ns).
  // A thread starved of a CPU can take tens of milliseconds between the two.
  std::uint64_t time_ns = 0;
  std::uint64_t stopped_by_ns = 0;
  // The time it had waited in run queues since it started (schedstat), as it
  // stood when it stopped: what of the time around its reads the writer could
  // not use. nullopt: unreadable.
  std::optional<std::uint64_t> run_queue_wait_ns;
  bool gate_open = false;
  std::optional<WalkEnd> end;  // nullopt: the struct could not be read (`error`)
  std::optional<WalkStep> failed_step;
  std::optional<ThreadContextRecord> record;  // what the walk reached, decoded
  std::vector<Finding> violations;  // check_thread's (NJS-06, 07, 08, 11, 12)
  std::string error;

  // The rules this look could judge: the gate was open (NJS-06); the ALS key
  // was looked up on its hashed chain (NJS-07); a record pointer was read
  // (NJS-08); a record was decoded (NJS-11, 12).
  bool judges_struct() const { return gate_open && end.has_value(); }
  bool judges_hash() const;
  bool judges_slot() const { return end == WalkEnd::Record || end == WalkEnd::NullRecord; }
  bool judges_record() const { return record.has_value(); }
};

struct NodeFacts : conform::ProtocolEvidence {
  std::string session;
  bool launched = true;
  // Why no process of the target was judged (nullopt: one was).
  std::optional<Error> not_found;
  pid_t judged_pid = 0;
  std::string judged_because;
  // Where the judged process was told to run without AsyncContextFrame
  // (Node's --no-async-context-frame in its command line or NODE_OPTIONS):
  // NJS-10 then applies. nullopt: not told.
  std::optional<std::string> async_context_frame_off;
  std::optional<AgentLibrary> module;  // nullopt: none mapped (module_error says why, if it was not just absent)
  std::string module_error;
  // The process context's reference data at the last look that read it
  // (nullopt: never read; context_error says why).
  std::optional<ReferenceData> reference;
  std::string context_error;
  std::size_t looks = 0;
  std::vector<ThreadLookFacts> threads;  // every thread of every look, the first kMaxThreadLooks
  std::size_t threads_dropped = 0;
  std::vector<std::string> look_errors;  // looks that read no thread, the first kMaxLookErrors
  std::string ended_because;             // why the session stopped looking
  // Where CLOCK_MONOTONIC stood on the wall clock when the looks began and
  // ended: a look's time on the clock exported spans carry (nullopt: no look).
  std::optional<conform::ReadClock> read_clock;

  // The watched session: every thread's struct as armed and after each of its
  // stores (watch::SlotWatch, every_store over the 32 bytes); nullopt: no
  // watch ran (gate_watch_unavailable says why).
  std::optional<watch::SlotWatchReport> gate_watch;
  std::string gate_watch_unavailable;

  static constexpr std::size_t kMaxThreadLooks = 20000;
  static constexpr std::size_t kMaxLookErrors = 16;

  // Some thread's gate was open at some look.
  bool any_gate_open() const;
};

// The session's facts, or nullptr when it did not run (or ran another suite).
const NodeFacts* facts(const conform::SessionSet& sessions, const std::string& name);

}  // namespace tracecorr::otel_nodejs_thread_context

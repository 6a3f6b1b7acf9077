// What a session of the OTEP 4947 suite observed, as plain data: the process
// that published thread-local reference data, every publication of its
// process context seen (the key map over time), the module defining
// `otel_thread_ctx_v1` and how its threads reach it, and then either the
// records the ptrace sampler read from stopped threads ("sampled") or each
// thread's stores to its pointer and record under hardware watchpoints
// ("watched"). Sessions fill it (thread_context_watch.cpp); judges read it;
// tests build it by hand.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "otel_thread_context/record.hpp"
#include "tracecorr/conform/probe.hpp"
#include "tracecorr/watch/published_record_watch.hpp"
#include "tracecorr/conform/session_part.hpp"
#include "tracecorr/discovery.hpp"
#include "tracecorr/error.hpp"
#include "tracecorr/record_layout.hpp"
#include "tracecorr/sampler.hpp"

namespace tracecorr::otel_thread_context {

// "sampled": the ptrace sampler stops each thread now and then and reads its
// record with the process context's timestamp (what a profiler does; also
// what an attached target runs). "watched": hardware watchpoints on each
// thread's pointer and record (launch mode, native threads on x86-64 or arm64).
inline constexpr const char* kSampledSession = "sampled";
inline constexpr const char* kWatchedSession = "watched";

// One publication of the process context, as read.
struct Publication {
  std::uint64_t published_at_ns = 0;  // the header's timestamp: the samples name it
  std::optional<ReferenceData> data;  // nullopt: the read or the decode failed (error)
  std::optional<Error> error;
};

// One sample of one thread (Sample's record part).
struct RecordSample {
  pid_t tid = 0;
  std::uint64_t time_ns = 0;  // CLOCK_MONOTONIC
  std::uint64_t record_pointer = 0;
  SampleError error = SampleError::Ok;
  std::optional<RecordBytes> bytes;  // Ok and RecordTruncated
  std::uint64_t declared_length = 0;
  // The process context's timestamp when the thread was sampled (0: being
  // written; nullopt: the header was unreadable).
  std::optional<std::uint64_t> context_published_at;
  // The sampler's interrupt (CLOCK_MONOTONIC): the thread stopped after it
  // and by time_ns (0: unknown, time_ns stands for both); its run-queue
  // waits since it started, read while stopped (nullopt: unreadable).
  std::uint64_t interrupted_ns = 0;
  std::optional<std::uint64_t> run_queue_wait_ns;
  std::uint64_t stopped_after_ns() const { return interrupted_ns ? interrupted_ns : time_ns; }
};

// One watch of one thread (a thread that gave way to others while it stored
// nothing may have several, one after the other).
struct ThreadWatch {
  pid_t tid = 0;
  std::optional<watch::PublishedRecordWatchReport> report;
  std::optional<Error> error;  // the watch could not run on this thread
  bool requeued = false;       // it gave way and its thread waited for another turn
};

struct ThreadContextFacts : conform::ProtocolEvidence {
  std::string session;
  bool launched = true;
  // Why no process of the target was judged: none published threadlocal.*
  // keys in its process context before the deadline (nullopt: one did).
  std::optional<Error> not_found;
  pid_t judged_pid = 0;
  // The publisher's context names a schema this reader does not read
  // (TCTXR-03): what was seen (other_schema()); no record is read, and the
  // suite is not applicable. "" when the schema is one of ours.
  std::string other_schema;
  // Every distinct publication seen, in the order seen (the first is the one
  // that carried the keys when the process was found).
  std::vector<Publication> publications;
  // The module whose .dynsym defines otel_thread_ctx_v1 (nullopt: none; module_error says why).
  std::optional<AgentLibrary> module;
  std::optional<Error> module_error;
  // How its threads reach the variable (nullopt: access_error says why).
  std::optional<std::string> access_model;
  std::optional<Error> access_error;
  // The sampled session.
  std::vector<RecordSample> samples;
  std::uint64_t samples_dropped = 0;  // beyond kMaxSamples
  // CLOCK_REALTIME minus CLOCK_MONOTONIC (ns) as tracecorr measured it when
  // the sampler started and when it stopped: a sample's time on the clock
  // exported spans carry (unix ns) is its time_ns plus the first. The two
  // differ only when the wall clock was stepped meanwhile (NTP slews both
  // clocks alike). nullopt: not measured (the sampler never ran).
  std::optional<std::int64_t> wall_minus_monotonic_at_start_ns, wall_minus_monotonic_at_end_ns;
  // How far the two offsets together can be from the truth (each is a wall
  // read bracketed by monotonic ones: tracecorr::wall_minus_monotonic).
  std::int64_t wall_offset_uncertainty_ns = 0;
  // The watched session: every watch, in the order they ended.
  std::vector<ThreadWatch> watches;
  std::size_t threads_unwatched = 0;  // threads still waiting for a watch when the session ended
  std::chrono::milliseconds watched_for{0};  // from the first watch to the last one's end
  std::string watch_ended_because;           // why no more threads were watched (the session's rule)
  std::string watch_unavailable;      // why there is no watch

  static constexpr std::size_t kMaxSamples = 20000;
  static constexpr std::size_t kMaxWatches = 64;
};

// The session's facts, or nullptr when it did not run (or ran another suite).
const ThreadContextFacts* facts(const conform::SessionSet& sessions, const std::string& name);

}  // namespace tracecorr::otel_thread_context

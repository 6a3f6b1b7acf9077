// What a session of the OTEP 4719 suite observed, as plain data: the process
// context snapshots, the mapping watch's stores, system calls and forks, and
// the tally of the seqlock reads made while the target ran. Sessions fill it
// (context_watch.cpp); judges read it; tests build it by hand.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "tracecorr/watch/mapping_watch.hpp"
#include "tracecorr/conform/probe.hpp"
#include "tracecorr/conform/session_part.hpp"
#include "tracecorr/error.hpp"
#include "tracecorr/process_context.hpp"

namespace tracecorr::otel_process_context {

// The session followed by the mapping watch (launch mode, x86-64 or arm64 host), and
// the one that only reads, as often as it can: the torture, and the session
// an attached target runs.
inline constexpr const char* kWatchedSession = "watched";
inline constexpr const char* kReadSession = "read";

// Two consistent seqlock reads under one timestamp whose payloads differ: the
// seqlock let a change through (PCTX-10).
struct TornRead {
  std::uint64_t timestamp = 0;
  std::vector<std::uint8_t> first, second;  // the first kKeptBytes of each payload
  std::size_t first_size = 0, second_size = 0;
  std::size_t first_difference = 0;  // offset of the first differing byte (or the shorter size)
  static constexpr std::size_t kKeptBytes = 64;
};

struct ReadTally {
  std::uint64_t attempts = 0;          // seqlock reads started
  std::uint64_t consistent = 0;        // ... that returned a payload under a steady timestamp
  std::uint64_t retries_zero = 0;      // retries because the timestamp was 0 (an update in progress)
  std::uint64_t retries_changed = 0;   // retries because it changed during the copy
  std::uint64_t gave_up = 0;           // reads that ran out of retries
  std::uint64_t other_failures = 0;    // unreadable, bad header: the snapshot judges say why
  std::uint64_t timestamps_seen = 0;   // distinct non-zero timestamps among the consistent reads
  std::uint64_t torn = 0;              // same timestamp, different payload
  std::vector<TornRead> torn_reads;    // the first kKeptTorn
  std::chrono::milliseconds window{0};  // how long the reads went on
  static constexpr std::size_t kKeptTorn = 8;
};

struct ContextFacts : conform::ProtocolEvidence {
  std::string session;
  bool launched = true;
  bool under_qemu_user = false;  // the target is a qemu-user guest (qemu ignores madvise)
  // Why no process context was found in any process of the target (nullopt: found).
  std::optional<Error> not_found;
  // Not found, and no header anywhere else either (no misnamed mapping): the
  // target published nothing of the protocol, which judges nothing (PCTX-01
  // not applicable; the run's gate errs on "nothing judged"), where a header
  // no reader looks for fails PCTX-01.
  bool nothing_published = false;
  pid_t judged_pid = 0;
  // process_context::take_snapshot of the judged process when the session
  // opened (the context found) and when it closed.
  std::optional<process_context::Snapshot> first, last;
  // The mapping watch: launch mode on an x86-64 or arm64 host (its qemu-user guests included).
  std::optional<watch::MappingWatchReport> watch;
  std::string watch_unavailable;  // why there is no watch
  ReadTally reads;
};

// The session's facts, or nullptr when it did not run (or ran another suite).
const ContextFacts* facts(const conform::SessionSet& sessions, const std::string& name);

// The host's PR_SET_VMA prctl (linux/prctl.h) and its anonymous-name option.
inline constexpr std::uint64_t kPrSetVma = 0x53564d41;
inline constexpr std::uint64_t kPrSetVmaAnonName = 0;

}  // namespace tracecorr::otel_process_context

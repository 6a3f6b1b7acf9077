// Watches every thread's record of a target from user space, without stopping
// the threads: thread pointers are read once per thread (they do not change
// for a thread's life), then records are polled with process_vm_readv.
//
// A poll cannot pause the thread it reads, so a read can tear while the agent
// updates its record. Each record is therefore read twice and kept only when
// both reads agree; a torn read never becomes evidence against an agent.
//
// Records are read by a RecordLayout and kept as bytes; what they mean (which
// trace is active) is the protocol codec's answer, handed in as ActiveTraceOf.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <thread>
#include <vector>

#include "tracecorr/ids.hpp"
#include "tracecorr/memory.hpp"
#include "tracecorr/own_time.hpp"
#include "tracecorr/record_layout.hpp"
#include "tracecorr/threadptr.hpp"
#include "tracecorr/tls.hpp"

namespace tracecorr::watch {

// One observed state of one thread's record (recorded when it changes).
struct RecordObservation {
  std::chrono::steady_clock::time_point at;  // taken before the read that first saw this state
  // The state was visible no later than read_by (taken after that read) and
  // still visible no earlier than last_seen (taken before the last read that
  // saw it unchanged): a package's judge compares them with the named span's start and end.
  pid_t tid = 0;
  std::uint64_t record_pointer = 0;
  RecordBytes bytes;  // as read by the watcher's layout (decoding them is the protocol's, probes/judging.hpp)
  std::chrono::steady_clock::time_point read_by{};
  std::chrono::steady_clock::time_point last_seen{};
};

// What a record names while a trace is active on its thread (for Elastic v1:
// valid, trace present), in the protocol's words; nullopt: no active trace.
struct ActiveTrace {
  TraceId trace_id{};
  SpanId context_id{};  // the span the record names its context by (e.g. the local root span)
  std::uint8_t trace_flags = 0;
};
using ActiveTraceOf = std::function<std::optional<ActiveTrace>(std::span<const std::uint8_t> record)>;

// A context (trace and context id) seen active in some thread's record.
struct SeenContext {
  TraceId trace_id{};
  SpanId context_id{};
  std::uint8_t trace_flags = 0;
  std::chrono::steady_clock::time_point first_seen, last_seen;
  std::set<pid_t> threads;
  bool sampled() const { return trace_flags & 0x01; }
};

struct WatcherStats {
  std::uint64_t polls = 0;
  std::uint64_t torn_reads = 0;          // two reads disagreed: discarded
  std::uint64_t thread_pointer_failures = 0;
  std::uint64_t record_read_failures = 0;
};

class RecordWatcher {
 public:
  // Reads each thread's record by `layout` through the pointer at `site` (for
  // a TLS slot: the static TLS offset from the descriptor); `active_trace`
  // says which trace a record names.
  RecordWatcher(pid_t pid, RecordLayout layout, PointerSite site, ActiveTraceOf active_trace,
                std::unique_ptr<ThreadPointerSource> thread_pointers,
                std::chrono::microseconds interval = std::chrono::microseconds(1000));
  ~RecordWatcher();  // stops and joins
  RecordWatcher(const RecordWatcher&) = delete;
  RecordWatcher& operator=(const RecordWatcher&) = delete;

  void start();
  void stop();
  // After stop(): drops the thread-pointer source (a gdbstub connection
  // detaches); the evidence stays readable.
  void release_thread_pointer_source();

  std::vector<RecordObservation> observations() const;
  std::vector<SeenContext> contexts() const;
  // Contexts first seen after `since` that are still active now (seen in the last poll).
  std::vector<SeenContext> active_contexts() const;
  // The thread pointer and record pointer last seen per thread.
  std::map<pid_t, std::uint64_t> record_pointers() const;
  // Threads the watcher read with no record published (a null pointer) before
  // it first saw their record: only for these did a poll have the chance to
  // see the record between its publication and its initialisation.
  std::set<pid_t> seen_before_publication() const;
  // Each thread's run-queue waits when a new state of it is first seen, and
  // every 100 ms while it has a record (CLOCK_MONOTONIC): how much of the
  // time around a state it could use.
  std::map<pid_t, std::vector<RunQueueMark>> run_queue_marks() const;
  WatcherStats stats() const;
  std::vector<std::string> errors() const;

  // Reads every thread's record once. Called by the watcher's own thread, or
  // by the caller instead of start(): a ptrace-based thread-pointer source
  // must always be used from the same thread.
  void poll_once();

 private:
  std::optional<std::uint64_t> thread_pointer(pid_t tid, std::chrono::steady_clock::time_point now);

  pid_t pid_;
  RecordLayout layout_;
  PointerSite site_;
  ActiveTraceOf active_trace_;
  std::unique_ptr<ThreadPointerSource> thread_pointers_;
  LiveProcessMemory memory_;
  std::chrono::microseconds interval_;
  bool leader_zombie_ = false;
  std::chrono::steady_clock::time_point leader_state_read_at_;
  std::chrono::steady_clock::time_point marks_taken_at_;

  mutable std::mutex mutex_;
  std::map<pid_t, std::uint64_t> thread_pointer_cache_;
  // Threads whose pointer could not be read (qemu's own threads, exiting
  // threads) are asked again only after a pause, not on every poll.
  std::map<pid_t, std::chrono::steady_clock::time_point> thread_pointer_retry_at_;
  std::map<pid_t, std::chrono::milliseconds> thread_pointer_backoff_;
  std::map<pid_t, std::uint64_t> record_pointers_;
  std::map<pid_t, RecordBytes> last_bytes_;
  std::set<pid_t> seen_before_publication_;
  std::vector<RecordObservation> observations_;
  std::uint64_t observations_dropped_ = 0;          // erased from the front (bounded memory)
  std::map<pid_t, std::uint64_t> open_observation_;  // per thread: absolute index of its current state
  std::map<std::pair<TraceId, SpanId>, SeenContext> contexts_;
  std::set<std::pair<TraceId, SpanId>> active_now_;
  RunQueueMarks run_queue_marks_;
  WatcherStats stats_;
  std::vector<std::string> errors_;

  std::atomic<bool> running_{false};
  std::thread thread_;
};

}  // namespace tracecorr::watch

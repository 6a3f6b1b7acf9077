// Samplers: periodically interrupt the threads of tracked processes and read
// each thread's record together with its user stack. What a record is, and
// how it is reached (thread pointer + TLS offset, or a memory area, -> record
// pointer -> record), is the tracked process's RecordLayout: data a protocol's
// codec supplies (built from its registry), never code here.
//
// Two implementations yield the same Sample for the same thread state:
//  - BPF (bpf/bpf_sampler.hpp, library tracecorr_bpf): a perf_event program on
//    a cpu-clock event per CPU; samples threads while they run on a CPU.
//  - ptrace (here, in libtracecorr): PTRACE_SEIZE + PTRACE_INTERRUPT every
//    thread of each tracked process at the configured frequency (wall clock,
//    running or not), reading registers, frame-pointer stack and record with
//    process_vm_readv, then detaching. Needs no BPF, no BTF.
//
// A process may publish several protocols at once (a JVM with Elastic's agent
// and an OTel SDK): it is tracked with up to kLayoutsPerProcess layouts, one
// per slot, and each interrupt of one of its threads reads the thread's record
// by every layout, one Sample per layout (Sample::slot says which). The thread
// is interrupted once; the BPF sampler reads its stack again per layout, the
// ptrace one once.
//
// A tracked process may also publish an OpenTelemetry process context (OTEP
// 4719): given its header's address, both samplers read the header with each
// sample and hand on its timestamp, which names the publication (resource)
// the sample belongs to (process_context::PublicationResolver maps it).
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tracecorr/error.hpp"
#include "tracecorr/record_layout.hpp"

namespace tracecorr {

// How far the record read got. Ok: `record` holds the bytes as read (the
// valid and presence bytes not yet judged: that is the consumer's).
enum class SampleError {
  Ok,
  ThreadPointerFailed,       // thread pointer unreadable or 0 (a layout whose pointer is in a TLS slot)
  RecordPointerReadFailed,   // the record pointer's address (TLS slot or area) unreadable
  RecordPointerNull,         // the thread has not published a record (yet)
  RecordReadFailed,          // the record pointer points at unreadable memory
  RecordTruncated,           // the record declares more than its layout's max_size: `record` holds the first max_size bytes
  TlsBlockNotAllocated,      // dynamic TLS: the thread has no block for the variable's module yet (it published nothing)
};
const char* to_string(SampleError e);  // "thread_pointer_failed", ...

// The sampler's maximum stack depth (frames, innermost first).
inline constexpr std::size_t kMaxStackFrames = 64;

// Which of a tracked process's layouts a record is read by: 0 .. kLayoutsPerProcess - 1.
using LayoutSlot = unsigned;
// Layouts one process can be tracked with at once (bpf/sampler.h's
// TC_LAYOUTS_PER_PROCESS): two protocols per process is what real software
// ships (an Elastic agent beside an OTel SDK); each costs a record read, and
// for the BPF sampler a stack read, per sample.
inline constexpr LayoutSlot kLayoutsPerProcess = 2;

struct Sample {
  pid_t pid = 0;  // process (tgid), as seen from the sampler's pid namespace
  pid_t tid = 0;
  LayoutSlot slot = 0;            // the layout the record was read by (track()'s slot)
  int cpu = -1;                   // -1: unknown (ptrace sampler)
  std::uint64_t time_ns = 0;      // CLOCK_MONOTONIC
  // The ptrace sampler's: CLOCK_MONOTONIC before its interrupt (the thread
  // stopped after it, and before time_ns; 0: unknown), and the thread's
  // run-queue waits since it started, read while it was stopped (schedstat;
  // PtraceSamplerOptions::run_queue_waits).
  std::uint64_t interrupted_ns = 0;
  std::optional<std::uint64_t> run_queue_wait_ns;
  std::uint64_t thread_pointer = 0;
  std::uint64_t record_pointer = 0;
  SampleError error = SampleError::Ok;
  std::optional<RecordBytes> record;   // set iff error is Ok or RecordTruncated
  std::uint64_t record_declared_length = 0;  // what the record declared (> record->size() when truncated), at most 2^32 - 1
  std::vector<std::uint64_t> frames;   // user stack, innermost first, <= kMaxStackFrames
  int stack_errno = 0;                 // nonzero: the stack could not be read
  // The process context header's monotonic_published_at_ns when the thread
  // was sampled (0: the writer was updating it). nullopt: no context tracked
  // for the process, or its header unreadable or not a context's (counted:
  // SamplerCounters::context_unreadable).
  std::optional<std::uint64_t> context_published_at;
};

// Counters kept by the sampler (the BPF one in kernel per-CPU maps).
struct SamplerCounters {
  std::uint64_t samples = 0;   // interrupts of a tracked process's thread
  std::uint64_t emitted = 0;   // samples delivered to poll()'s callback (or queued for it): one per interrupt and layout
  std::uint64_t thread_pointer_failed = 0;
  std::uint64_t record_pointer_read_failed = 0;
  std::uint64_t record_pointer_null = 0;
  std::uint64_t record_read_failed = 0;
  std::uint64_t valid_zero = 0;    // record read while its valid byte held no accepted value (Elastic: 0)
  std::uint64_t trace_absent = 0;  // record valid, its layout's presence byte 0 (Elastic: trace_present)
  std::uint64_t stack_failed = 0;
  std::uint64_t lost = 0;          // samples dropped before user space saw them (ring buffer full)
  std::uint64_t not_stopping = 0;  // ptrace: threads that did not stop in time (parked in vfork, D state)
  std::uint64_t record_truncated = 0;  // records declaring more than their layout's max_size (emitted cut)
  std::uint64_t context_unreadable = 0;     // process context header unreadable or not a context's
  std::uint64_t context_being_written = 0;  // process context header read with timestamp 0
  std::uint64_t tls_block_not_allocated = 0;  // dynamic TLS: samples of threads without a block for the module yet
  std::uint64_t unread = 0;  // emitted, never delivered to poll()'s callback (a run stopped before it read them)
  // name -> value, in a stable order (new counters go last), for summaries.
  std::vector<std::pair<std::string, std::uint64_t>> named() const;
};

class Sampler {
 public:
  virtual ~Sampler() = default;
  virtual std::string name() const = 0;  // "bpf" or "ptrace"
  // Starts sampling pid's threads, reading each thread's record by `layout`
  // through the pointer at `site` (a thread-pointer offset, a module's block
  // in each thread's DTV, or the process's memory area: resolve_tls_access),
  // in layout slot `slot`: its samples carry it. Tracking a slot again
  // replaces its layout and site; the other slot stays. An error: the slot
  // is past kLayoutsPerProcess, the layout fails RecordLayout::check(), or
  // the sampler cannot hold it.
  virtual Status track(pid_t pid, LayoutSlot slot, const RecordLayout& layout, PointerSite site) = 0;
  Status track(pid_t pid, const RecordLayout& layout, PointerSite site) { return track(pid, 0, layout, site); }
  // Also reads, with each of pid's samples, the process context header at
  // `header_address` (a mapping process_context::discover found): its
  // signature and version checked, its timestamp in Sample::context_published_at.
  // nullopt stops it. pid must be tracked (in any slot): the header is the
  // process's, read once per interrupt; the address stays when track() is
  // called again for pid, and is forgotten with the process's last slot.
  virtual Status track_process_context(pid_t pid, std::optional<std::uint64_t> header_address) = 0;
  // Forgets slot's layout (no error when the slot holds none); with the last
  // slot, the process and its context header.
  virtual Status untrack(pid_t pid, LayoutSlot slot) = 0;
  Status untrack(pid_t pid);  // every slot
  // Delivers the samples taken so far, waiting up to `timeout` for the first,
  // and returns how many were delivered. It returns after a bounded time
  // however fast samples come (a caller slower than the sampled threads must
  // still reach its own deadline and stop flag): then backlog() is true, and
  // more may be waiting (poll again without a wait).
  using Callback = std::function<void(const Sample&)>;
  virtual Expected<std::size_t> poll(const Callback& callback, std::chrono::milliseconds timeout) = 0;
  virtual bool backlog() const { return false; }
  // Takes no more samples; those already taken stay for poll() (the BPF
  // sampler detaches its perf events, its ring buffer keeps what it holds).
  virtual void stop_sampling() {}
  virtual SamplerCounters counters() const = 0;
};

// The end of a sampling run: takes no more samples, then polls until what was
// taken has been read. Bounded by what the buffer held when sampling stopped;
// once `stop` is set (SIGINT, SIGTERM) only one more batch is read, and what
// is left is counted as unread (SamplerCounters::unread). A consumer slower
// than the sampled threads (every CPU busy, an emulated machine) is behind by
// what they made meanwhile: one last bounded batch left most of it unread.
Status read_what_was_sampled(Sampler& sampler, const Sampler::Callback& callback, const std::atomic<bool>& stop);

struct PtraceSamplerOptions {
  unsigned frequency_hz = 99;
  std::size_t max_frames = kMaxStackFrames;
  // A reader defect (`tracecorr agent --reader-defect reads-running-thread`,
  // for conformance kill matrices only): the thread runs again before its
  // record is read, and the record is read twice: the bytes before the
  // layout's second field from the first read, the rest from the second, so a
  // writer updating in place meanwhile gives a pair of ids it never published
  // together. The second read waits for the thread's own progress, not a
  // wall-clock pause (on a busy machine the thread may not run at all in a
  // millisecond, nor in the 20 ms of a loaded run queue): until the record
  // changed or the thread ran `running_read_progress` on a CPU, at most
  // `running_read_bound`.
  bool reads_running_thread = false;
  std::chrono::microseconds running_read_progress{1000};
  std::chrono::milliseconds running_read_bound{100};
  // A reader defect (any-signature): the process context header's timestamp
  // is taken whatever its signature and version say.
  bool context_identity_check = true;
  // Each sample carries its thread's run-queue waits (Sample::run_queue_wait_ns,
  // a /proc read per sample): for judges of a writer's own time, not the agent.
  bool run_queue_waits = false;
};
// The thread is stopped only while its registers, stack and record are read.
std::unique_ptr<Sampler> make_ptrace_sampler(const PtraceSamplerOptions& options);

// Reads the user stack by walking frame pointers the way the kernel's
// perf_callchain_user does (x86-64: [fp] = next fp, [fp+8] = return address;
// arm64: [fp] = next fp, [fp+8] = lr), starting with the instruction pointer.
// Stops at the first unreadable frame, a null or misaligned frame pointer, or
// max_frames. `read` reads target memory (false: unreadable).
using ReadWord = std::function<bool(std::uint64_t addr, std::uint64_t& out)>;
std::vector<std::uint64_t> walk_frame_pointers(std::uint64_t ip, std::uint64_t fp, const ReadWord& read,
                                               std::size_t max_frames);

}  // namespace tracecorr

#include "elastic_v1/agent/host_agent.hpp"

#include <poll.h>
#include <signal.h>
#include <time.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstdarg>
#include <cstring>
#include <deque>
#include <set>
#include <thread>

#include "tracecorr/report/report.hpp"
#include "elastic_v1/agent/deliverer.hpp"
#include "elastic_v1/library.hpp"
#include "tracecorr/discovery.hpp"
#include "tracecorr/memory.hpp"
#include "tracecorr/process_context.hpp"
#include "tracecorr/process_context_resolver.hpp"
#include "tracecorr/procfs.hpp"
#include "tracecorr/sampled_processes.hpp"
#include "tracecorr/tls.hpp"

namespace tracecorr::elastic_v1::agent {
namespace {

using Clock = std::chrono::steady_clock;

bool process_exists(pid_t pid) { return ::kill(pid, 0) == 0 || errno == EPERM; }

constexpr std::size_t kMaxDistinctRecords = 256;  // per process, in the summary
// How often the loop looks at the process contexts it follows (one 8-byte
// read each): often enough that a publication is read while it is current
// (the SDK frees the one it replaces), without a read per send tick.
constexpr auto kContextLookInterval = std::chrono::milliseconds(10);
// The longest the loop examines processes before it polls the sampler again
// and looks at the clock (a rescan goes on at the next turn).
constexpr auto kRescanSlice = std::chrono::milliseconds(20);
// At the end of a run, how long what is pending or unread may still wait for
// the agents' reads (at most samples-delay-ms: later, it would be late anyway).
constexpr auto kFinalDeliveryPatience = std::chrono::milliseconds(2000);
constexpr std::size_t kMaxSpanIdsPerTransaction = 256;
// Transactions listed per process in the summary (a long run meets millions;
// the rest are counted, still correlated and sent). Deliverer::sent keeps as many.
constexpr std::size_t kMaxTransactionsListed = Deliverer::kMaxTransactionsListed;

// How long the calling thread has waited for a CPU while runnable
// (/proc/thread-self/schedstat, second field), 0 when unreadable: what a
// loaded machine, not the loop, explains of a late end.
std::chrono::nanoseconds waited_for_cpu() {
  std::FILE* f = std::fopen("/proc/thread-self/schedstat", "re");
  if (!f) return {};
  unsigned long long running = 0, waiting = 0;
  const int n = std::fscanf(f, "%llu %llu", &running, &waiting);
  std::fclose(f);
  return std::chrono::nanoseconds(n == 2 ? waiting : 0);
}

// The sample's own time (CLOCK_MONOTONIC, as steady_clock): lateness is
// measured from it, not from when the ring buffer was read.
DeliveryTime sample_time(const Sample& s) {
  const auto now = DeliveryClock::now();
  const DeliveryTime taken{std::chrono::nanoseconds(s.time_ns)};
  return s.time_ns == 0 || taken > now ? now : taken;
}

std::string hex(const auto& bytes) { return to_hex(std::span<const std::uint8_t>(bytes.data(), bytes.size())); }

}  // namespace

struct HostAgent::Process {
  pid_t pid = 0;
  std::uint64_t start_time = 0;
  std::string exec_identity;  // changes when the process execs another program
  bool explicit_pid = false;
  std::string state = "examining";
  std::string last_notice;

  std::optional<AgentLibrary> library;
  std::uint64_t storage_address = 0;
  std::optional<elastic_v1::ProcessStorage> storage;
  std::optional<TlsDescriptor> tls;
  bool tls_read_once = false;  // ebpf-profiler: the offset is never re-read
  bool tracked = false;
  bool ever_tracked = false;
  std::int64_t tracked_offset = 0;
  bool exited = false;
  std::string exit_reason;
  Deliverer::Id delivery = 0;  // its socket, plan and sends (deliverer.hpp)

  // Counters.
  std::uint64_t samples = 0, correlated = 0;
  std::map<std::string, std::uint64_t> errors;   // reads that failed, records that cannot be trusted
  // Samples that are fine but carry nothing to correlate: a thread without a
  // record ("no_record": most JVM threads), a record being updated
  // ("valid_zero", TLS-08), a thread outside any trace ("trace_absent", TLS-09).
  std::map<std::string, std::uint64_t> not_correlated;
  // (trace id, transaction id) -> what was read (what was sent: Deliverer::sent).
  struct Transaction {
    std::uint64_t samples_read = 0;
    std::set<SpanId> span_ids;
  };
  std::map<std::pair<TraceId, SpanId>, Transaction> transactions;
  std::map<RecordBytes, std::uint64_t> records;  // distinct records read (bounded)
  std::uint64_t records_overflow = 0;
  std::uint64_t transactions_overflow = 0;  // beyond kMaxTransactionsListed: not listed

  // Its OpenTelemetry process context, when it publishes one: the header the
  // sampler reads with each sample, and the samples taken since then by the
  // publication they belong to.
  FollowedContext context;
};

struct HostAgent::Impl {
  Impl(Sampler& sampler, SampledProcesses::Notice notice, Deliverer::Options delivery)
      : sampled(sampler, contexts, std::move(notice)), deliverer(std::move(delivery)) {}
  DiscoveryOptions discovery = elastic_v1::discovery_options();
  LibraryCache cache;
  std::map<pid_t, Process> processes;
  std::vector<Process> retired;
  std::set<pid_t> not_agents;  // --all: processes without the library (rechecked each scan)
  std::deque<pid_t> rescan_work;  // the rescan's candidates not examined yet
  std::uint64_t unknown_pid_samples = 0;
  Clock::time_point started;
  // When the duration's clock started: at once, or with --pid once the first
  // rescan had examined every named process.
  std::optional<Clock::time_point> clock_started;
  std::set<pid_t> examined;  // named processes looked at (at most as many as named)
  double elapsed_s = 0;
  SamplerCounters last_counters;
  std::string sampler_error;
  // The run's own timeline, for the summary: when sampling stopped, when the final reads ended, and
  // how long the loop's thread waited for a CPU meanwhile.
  std::optional<Clock::time_point> sampling_ended, all_read, finished;
  DeliveryDuration final_reads_limit{};
  std::chrono::nanoseconds loop_waited_for_cpu{};
  process_context::PublicationResolver contexts;  // samples' context timestamps -> publications
  // Processes that publish no Elastic library but a protocol whose records the
  // sampler reads (OTEP 4947's thread context): listed per thread, nothing sent.
  SampledProcesses sampled;
  // Sends to every Elastic process's socket, on its own thread, at each process's own moments.
  Deliverer deliverer;
};

namespace {
Deliverer::Options delivery_options(const AgentOptions& o, std::function<void(const std::string&)> notice) {
  Deliverer::Options d;
  d.personality = o.personality;
  d.samples_delay_ms = o.samples_delay_ms;
  d.host_id = o.host_id;
  d.plan.samples_delay = std::chrono::milliseconds(o.samples_delay_ms);
  d.plan.settle = HostAgent::effective_flush_interval(o);
  d.plan.max_keys = std::max<std::size_t>(1, o.delivery_queue_capacity);
  d.notice = std::move(notice);
  return d;
}
}  // namespace

HostAgent::HostAgent(AgentOptions options, Sampler& sampler)
    : options_(std::move(options)),
      sampler_(sampler),
      impl_(std::make_unique<Impl>(sampler, [this](const std::string& text) { notice(text); },
                                   delivery_options(options_, [this](const std::string& text) { notice(text); }))) {
  options_.flush_interval = effective_flush_interval(options_);
}
HostAgent::~HostAgent() = default;

void HostAgent::notice(const std::string& text) {
  // Paths and errors come from targets: control characters are escaped.
  if (options_.log) std::fprintf(options_.log, "tracecorr agent: %s\n", conform::printable_text(text).c_str());
}

// ---- discovery ---------------------------------------------------------------------

void HostAgent::rescan() {
  // Drop processes that exited (or whose pid now names another process).
  std::vector<pid_t> gone, execed;
  for (auto& [pid, p] : impl_->processes) {
    if (!process_exists(pid))
      gone.push_back(pid);
    else if (p.start_time != 0 && process_start_time(pid) != p.start_time)
      gone.push_back(pid);
    else if (!p.exec_identity.empty() && exec_identity(pid) != p.exec_identity)
      execed.push_back(pid);  // a new image: the old library, storage and TLS offset mean nothing there
  }
  for (pid_t pid : gone) retire(pid, "exited");
  for (pid_t pid : execed) retire(pid, "exec'd another program");

  std::set<pid_t> candidates(options_.pids.begin(), options_.pids.end());
  if (options_.all)
    for (pid_t pid : list_processes()) candidates.insert(pid);
  impl_->sampled.rescan();  // retires those that exited or exec'd: examined afresh below
  impl_->rescan_work.assign(candidates.begin(), candidates.end());
}

// Examines the rescan's candidates until `until`: with --all on a host of
// thousands of processes a whole rescan takes longer than the loop may stay
// away from the sampler and the run's end. Returns true when it is done.
bool HostAgent::continue_rescan(Clock::time_point until) {
  auto& work = impl_->rescan_work;
  while (!work.empty() && Clock::now() < until) {
    const pid_t pid = work.front();
    work.pop_front();
    auto it = impl_->processes.find(pid);
    if (it != impl_->processes.end())
      refresh(it->second);
    else if (!impl_->sampled.follows(pid))
      examine(pid, std::find(options_.pids.begin(), options_.pids.end(), pid) != options_.pids.end());
  }
  return work.empty();
}

void HostAgent::examine(pid_t pid, bool explicit_pid) {
  if (explicit_pid) impl_->examined.insert(pid);
  if (!process_exists(pid)) return;
  auto found = discover_process(pid, impl_->discovery, impl_->cache);
  if (!found) {
    if (explicit_pid) notice("pid " + std::to_string(pid) + ": " + found.error().message());
    return;
  }
  if (!found->has_value()) {
    if (impl_->sampled.examine(pid, explicit_pid)) {  // another protocol's records: sampled, not correlated
      impl_->not_agents.erase(pid);
      return;
    }
    if (explicit_pid && !impl_->not_agents.count(pid))
      notice("pid " + std::to_string(pid) + ": no agent library mapped (yet); will look again");
    impl_->not_agents.insert(pid);
    return;
  }
  impl_->not_agents.erase(pid);
  Process p;
  p.pid = pid;
  p.delivery = impl_->deliverer.open(pid);
  p.start_time = process_start_time(pid);
  p.exec_identity = exec_identity(pid);
  p.explicit_pid = explicit_pid;
  p.library = std::move(**found);
  auto [it, inserted] = impl_->processes.emplace(pid, std::move(p));
  notice("pid " + std::to_string(pid) + ": agent library " + it->second.library->path);
  refresh(it->second);
}

// Reads (or re-reads) the process storage and TLS descriptor, connects,
// registers and starts tracking, each step only once its inputs exist.
void HostAgent::refresh(Process& p) {
  auto set_state = [&](const std::string& s) {
    if (s != p.state) {
      p.state = s;
      notice("pid " + std::to_string(p.pid) + ": " + s);
    }
  };
  if (p.exited) return;
  LiveProcessMemory mem(p.pid);
  const AgentLibrary& lib = *p.library;

  // Process storage: pointer first (0 until published, PROC-01), then the layout.
  if (!lib.process_pointer_addr) {
    set_state("the library defines no " + std::string(elastic_v1::spec::kProcessStorageSymbol) + " (ELF-02): cannot correlate");
    return;
  }
  auto storage_ptr = mem.read_u64(*lib.process_pointer_addr);
  if (!storage_ptr) {
    set_state("cannot read the process storage pointer: " + storage_ptr.error().message());
    return;
  }
  if (*storage_ptr == 0) {
    set_state("waiting for the process storage to be published");
    return;
  }
  const bool ebpf = options_.personality == Personality::EbpfProfiler;
  if (*storage_ptr != p.storage_address && !(ebpf && p.storage)) {
    if (!process_pointer_settled(lib, mem)) {
      set_state("waiting for the loader to finish with the library (its data page still shows file bytes)");
      return;
    }
    auto storage = elastic_v1::decode_process_storage(mem.source_at(*storage_ptr));
    if (!storage) {
      set_state("process storage unreadable: " + storage.error().message());
      return;
    }
    if (storage->minor == 0) {
      set_state("process storage has layout minor version 0 (PROC-02): not trusted");
      return;
    }
    const bool changed = p.storage && p.storage->socket_file_path != storage->socket_file_path;
    if (p.storage_address != 0)
      notice("pid " + std::to_string(p.pid) + ": process storage re-published" +
             (changed ? " with socket " + storage->socket_file_path : ""));
    p.storage_address = *storage_ptr;
    p.storage = std::move(*storage);
    // A new storage means a (re)started agent: talk to it from scratch.
    impl_->deliverer.disconnect(p.delivery);
  }

  // Socket, then registration (MSG-01), before the agent may publish TLS (TLS-06).
  if (!impl_->deliverer.connected(p.delivery)) {
    if (auto connected = impl_->deliverer.connect(p.delivery, p.storage->socket_file_path); !connected) {
      set_state("cannot connect to the agent socket: " + connected.error().message());
      return;
    }
  } else if (!ebpf) {
    impl_->deliverer.register_again(p.delivery);  // one the queue refused
  }

  // TLS descriptor: only a static offset can be read through the thread pointer.
  if (!(ebpf && p.tls_read_once)) {
    if (!lib.tls_descriptor_addr) {
      set_state("no TLSDESC relocation for " + std::string(elastic_v1::spec::kTlsSymbol) + " (ELF-04): records cannot be read");
      return;
    }
    auto tls = read_tls_descriptor(mem, *lib.tls_descriptor_addr, lib.elf.machine);
    if (!tls) {
      set_state("cannot read the TLS descriptor: " + tls.error().message());
      return;
    }
    p.tls = *tls;
    if (tls->model == TlsModel::Unresolved) {
      set_state("TLS descriptor not resolved by the loader yet; will read it again");
      return;
    }
    if (tls->model == TlsModel::Dynamic) {
      set_state("dynamic TLS (TLS-07): the record cannot be located from the thread pointer; not sampling. " +
                tls->explanation);
      untrack(p);
      return;
    }
    p.tls_read_once = true;
  }
  if (!p.tls || p.tls->model != TlsModel::StaticOffset) return;
  if (!p.tracked || p.tracked_offset != p.tls->tp_offset) {
    auto st = sampler_.track(p.pid, elastic_v1::tls_record_layout(), PointerSite::tls_offset(p.tls->tp_offset));
    if (!st) {
      set_state("the sampler cannot track it: " + st.error().message());
      return;
    }
    p.tracked = true;
    p.ever_tracked = true;
    p.tracked_offset = p.tls->tp_offset;
  }
  follow_process_context(p);
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%" PRId64, p.tracked_offset);
  set_state(std::string("sampling (TLS offset ") + buf + ", socket " + p.storage->socket_file_path + ")");
}

// A tracked process's context, as its mappings show it now: the sampler reads
// the header of the first (the OTEP allows one; which one a reader takes when
// there are more is not said: spec/otel-process-context.md §7), and a context
// that went away (dropped, or the process exec'd) is no longer read.
void HostAgent::follow_process_context(Process& p) {
  if (auto change = p.context.follow(p.pid, sampler_, impl_->contexts); !change.empty())
    notice("pid " + std::to_string(p.pid) + ": " + change);
}

void HostAgent::untrack(Process& p) {
  if (p.tracked) (void)sampler_.untrack(p.pid);  // the sampler forgets the context header too
  p.tracked = false;
  p.context.forget(p.pid, impl_->contexts);
}

void HostAgent::retire(pid_t pid, const std::string& why) {
  auto it = impl_->processes.find(pid);
  if (it == impl_->processes.end()) return;
  Process& p = it->second;
  untrack(p);
  p.exited = true;
  p.exit_reason = why;
  impl_->deliverer.retire(p.delivery);
  notice("pid " + std::to_string(pid) + ": " + why + "; no longer sampled");
  impl_->retired.push_back(std::move(p));
  impl_->processes.erase(it);
}

// ---- samples and messages ----------------------------------------------------------

void HostAgent::on_sample(const Sample& s) {
  auto it = impl_->processes.find(s.pid);
  if (it == impl_->processes.end()) {
    if (!impl_->sampled.on_sample(s)) ++impl_->unknown_pid_samples;
    return;
  }
  Process& p = it->second;
  ++p.samples;
  // Whatever its record says: which resource the sample belongs to.
  p.context.count(s, impl_->contexts);
  if (s.error == SampleError::RecordPointerNull) {  // the thread has not published a record: not an error
    ++p.not_correlated["no_record"];
    impl_->deliverer.left(p.delivery, s.tid, sample_time(s));
    return;
  }
  if (s.error != SampleError::Ok || !s.record) {
    ++p.errors[tracecorr::to_string(s.error)];
    return;
  }
  if (p.records.size() < kMaxDistinctRecords || p.records.count(*s.record))
    ++p.records[*s.record];
  else
    ++p.records_overflow;
  JudgedRecord j = judge_record(*s.record);
  if (j.verdict == RecordVerdict::ValidZero || j.verdict == RecordVerdict::TraceAbsent) {
    ++p.not_correlated[to_string(j.verdict)];
    // Outside any trace (TLS-09): the transaction it was in may be complete. Mid-update (TLS-08): nothing known.
    if (j.verdict == RecordVerdict::TraceAbsent) impl_->deliverer.left(p.delivery, s.tid, sample_time(s));
    return;
  }
  if (j.verdict != RecordVerdict::Correlate) {
    ++p.errors[to_string(j.verdict)];
    return;
  }
  ++p.correlated;
  CorrelationKey key{j.record.trace_id, j.record.transaction_id, stack_trace_id(s.frames)};
  auto listed = p.transactions.find({key.trace_id, key.transaction_id});
  if (listed == p.transactions.end() && p.transactions.size() < kMaxTransactionsListed)
    listed = p.transactions.try_emplace({key.trace_id, key.transaction_id}).first;
  if (listed == p.transactions.end()) {
    ++p.transactions_overflow;
  } else {
    ++listed->second.samples_read;
    if (listed->second.span_ids.size() < kMaxSpanIdsPerTransaction) listed->second.span_ids.insert(j.record.span_id);
  }
  // Spec: planned (aggregated until its transaction settles); ebpf-profiler: sent now or dropped.
  impl_->deliverer.add(p.delivery, key, s.tid, sample_time(s));
}

std::chrono::milliseconds HostAgent::effective_flush_interval(const AgentOptions& o) {
  using std::chrono::milliseconds;
  const auto delay = milliseconds(std::max<std::uint32_t>(o.samples_delay_ms, 2));
  if (o.flush_interval.count() <= 0) return std::clamp(delay / 5, milliseconds(1), milliseconds(1000));
  if (o.personality == Personality::Spec && o.flush_interval >= delay) return delay / 2;
  return o.flush_interval;
}

// ---- the loop -------------------------------------------------------------------------

Status HostAgent::run(const std::atomic<bool>& stop) {
  impl_->started = Clock::now();
  auto end = Clock::time_point::max();
  auto next_rescan = impl_->started;
  auto next_summary = impl_->started + options_.summary_interval;
  auto next_context_look = impl_->started;
  auto callback = [this](const Sample& s) { on_sample(s); };
  Status result = Ok{};
  const DeliveryDuration patience =
      std::min<DeliveryDuration>(kFinalDeliveryPatience, std::chrono::milliseconds(options_.samples_delay_ms));
  // The duration is how long what was named is sampled: examining the named
  // processes may take longer than it on a starved machine (an emulated
  // guest with every CPU busy took 4 s for 11), and a run that ends first
  // samples nothing of them.
  auto start_clock = [&](Clock::time_point at) {
    impl_->clock_started = at;
    if (!options_.duration) return;
    end = at + *options_.duration;
    impl_->deliverer.ends_at(end + patience);
  };
  if (options_.pids.empty()) start_clock(impl_->started);
  const auto waited_at_start = waited_for_cpu();
  // Sends happen on the deliverer's thread: this loop only samples and rescans.
  bool rescanning = false;
  for (;;) {
    auto now = Clock::now();
    if (stop.load() || now >= end) break;
    if (!rescanning && now >= next_rescan) {
      rescan();
      rescanning = true;
    }
    if (rescanning && continue_rescan(std::min(end, now + kRescanSlice))) {
      rescanning = false;
      next_rescan = Clock::now() + options_.rescan_interval;
      if (!impl_->clock_started) start_clock(Clock::now());
    }
    now = Clock::now();
    // Publications can be read only while current: look before the samples come.
    if (now >= next_context_look) {
      impl_->contexts.refresh_all();
      next_context_look = now + kContextLookInterval;
    }
    // A backlog: samples come faster than this loop takes them; take the next batch at once.
    const auto wake =
        rescanning || sampler_.backlog() ? now : std::min({next_rescan, next_summary, end, next_context_look});
    const auto wait = std::clamp(std::chrono::ceil<std::chrono::milliseconds>(wake - now), std::chrono::milliseconds(0),
                                 std::chrono::milliseconds(100));
    auto polled = sampler_.poll(callback, wait);
    if (!polled) {
      impl_->sampler_error = polled.error().message();
      result = polled.error();
      break;
    }
    if (Clock::now() >= next_summary) {
      live_summary(false);
      next_summary = Clock::now() + options_.summary_interval;
    }
  }
  // What was sampled until now is read (all of it, unless stopped), then what is pending goes out and the agents'
  // reads are awaited.
  impl_->sampling_ended = Clock::now();
  impl_->loop_waited_for_cpu = waited_for_cpu() - waited_at_start;
  if (auto read = read_what_was_sampled(sampler_, callback, stop); !read && result) {
    impl_->sampler_error = read.error().message();
    result = read.error();
  }
  impl_->all_read = Clock::now();
  impl_->final_reads_limit = patience;
  impl_->deliverer.finish(patience);
  impl_->finished = Clock::now();
  live_summary(true);
  return result;
}

void HostAgent::live_summary(bool final_line) {
  impl_->elapsed_s = std::chrono::duration<double>(Clock::now() - impl_->started).count();
  impl_->last_counters = sampler_.counters();
  if (!options_.log) return;
  std::uint64_t samples = 0, correlated = 0, sent = 0, lost_msgs = 0, lost_samples = 0, late = 0, unconfirmed = 0,
                queued = 0;
  std::map<std::string, std::uint64_t> errors, not_correlated;
  std::size_t sampling = 0, resources = 0, with_context = 0;
  std::uint64_t context_resolved = 0, context_being_written = 0, context_other = 0;
  auto add = [&](const Process& p) {
    const auto& contexts = p.context.tally();
    if (contexts.samples() > 0) {
      ++with_context;
      resources += contexts.resources();
      context_resolved += contexts.resolved();
      context_being_written += contexts.being_written();
      context_other += contexts.samples() - contexts.resolved() - contexts.being_written();
    }
    samples += p.samples;
    correlated += p.correlated;
    const Deliverer::Figures f = impl_->deliverer.figures(p.delivery);
    sent += f.samples_sent;
    lost_msgs += f.messages_lost;
    lost_samples += f.samples_lost;
    late += f.samples_late;
    unconfirmed += f.samples_unconfirmed;
    queued += f.samples_pending;
    for (const auto& [k, v] : p.errors) errors[k] += v;
    for (const auto& [k, v] : p.not_correlated) not_correlated[k] += v;
  };
  for (const auto& [pid, p] : impl_->processes) {
    add(p);
    sampling += p.tracked;
  }
  for (const auto& p : impl_->retired) add(p);
  std::string err_text, idle_text;
  for (const auto& [k, v] : errors) err_text += " " + k + "=" + std::to_string(v);
  for (const auto& [k, v] : not_correlated) idle_text += " " + k + "=" + std::to_string(v);
  std::string context_text;
  if (with_context > 0)
    context_text = " | process contexts: " + std::to_string(resources) + " resources, " +
                   std::to_string(context_resolved) + " samples attributed, " + std::to_string(context_being_written) +
                   " while being written, " + std::to_string(context_other) + " unattributed";
  if (impl_->sampled.followed() > 0 || impl_->sampled.samples() > 0)
    context_text += " | thread records: " + std::to_string(impl_->sampled.followed()) + " processes (" +
                    std::to_string(impl_->sampled.tracked()) + " sampling), " +
                    std::to_string(impl_->sampled.samples()) + " samples, " +
                    std::to_string(impl_->sampled.records_read()) + " with a record";
  std::fprintf(options_.log,
               "tracecorr agent: %s%.1fs processes %zu sampling %zu | samples %" PRIu64 " correlated %" PRIu64
               " | not correlated:%s | errors:%s | delivered %" PRIu64 " samples (%" PRIu64 " read late, %" PRIu64
               " unconfirmed), pending %" PRIu64 ", dropped %" PRIu64 " msgs (%" PRIu64 " samples; %s) | sampler lost %" PRIu64
               "%s\n",
               final_line ? "final " : "", impl_->elapsed_s, impl_->processes.size() + impl_->retired.size(), sampling,
               samples, correlated, idle_text.empty() ? " none" : idle_text.c_str(),
               err_text.empty() ? " none" : err_text.c_str(), sent, late, unconfirmed, queued, lost_msgs,
               lost_samples,
               options_.personality == Personality::EbpfProfiler
                   ? "the ebpf-profiler personality drops on EAGAIN, as that profiler does"
                   : "not read-able before due, or too many keys",
               impl_->last_counters.lost, context_text.c_str());
  if (final_line) {
    auto resources_of = [&](const Process& p) {
      if (p.context.tally().samples() == 0) return;
      const nlohmann::json tally = p.context.tally().to_json();
      for (const auto& r : tally["resources"]) {
        auto text = [](const nlohmann::json& v) { return v.is_null() ? std::string("(none)") : v.get<std::string>(); };
        notice("pid " + std::to_string(p.pid) + ": resource service.name=" + text(r["service_name"]) +
               " service.instance.id=" + text(r["service_instance_id"]) + ": " +
               std::to_string(r["samples"].get<std::uint64_t>()) + " samples in " +
               std::to_string(r["publications"].size()) + " publications");
      }
    };
    for (const auto& [pid, p] : impl_->processes) resources_of(p);
    for (const auto& p : impl_->retired) resources_of(p);
  }
  std::fflush(options_.log);
}

std::vector<std::string> HostAgent::nothing_readable() const {
  std::vector<std::string> out;
  for (pid_t pid : options_.pids) {
    const Process* p = nullptr;
    if (auto it = impl_->processes.find(pid); it != impl_->processes.end()) p = &it->second;
    for (const auto& r : impl_->retired)
      if (r.pid == pid) p = &r;
    std::string who = "pid " + std::to_string(pid) + ": ";
    if (!impl_->examined.count(pid)) {
      out.push_back(who + "not examined: the agent was stopped first");
      continue;
    }
    const std::string no_library = std::string(elastic_v1::spec::kProtocol.id) + ": no library defining " +
                                   std::string(elastic_v1::spec::kProcessStorageSymbol) + " or " +
                                   std::string(elastic_v1::spec::kTlsSymbol) + " was mapped while the agent ran";
    if (!p && impl_->sampled.ever_followed(pid)) {
      if (auto why = impl_->sampled.nothing_readable(pid))
        out.push_back(*why + (impl_->sampled.context_only(pid) ? "; " + no_library : std::string()));
    } else if (!p) {
      std::string others;
      for (const auto* protocol : sampled_protocols()) others += ", " + std::string(protocol->id());
      out.push_back(who + "publishes none of the protocols tracecorr agent samples (" + no_library + others +
                    ": no records published; nor an OTel process context)");
    } else if (!p->ever_tracked) {
      out.push_back(who + "never sampled: " + p->state);
    } else if (p->samples > 0 && p->correlated == 0 && p->not_correlated.count("valid_zero") == 0 &&
               p->not_correlated.count("trace_absent") == 0) {
      out.push_back(who + "sampled " + std::to_string(p->samples) + " times, but none of its threads had a readable record");
    }
  }
  return out;
}

// ---- summary ------------------------------------------------------------------------

nlohmann::json HostAgent::summary() const {
  using nlohmann::json;
  json totals = {{"samples", 0},          {"correlated", 0},         {"messages_sent", 0},
                 {"samples_sent", 0},     {"messages_lost", 0},      {"samples_lost", 0},
                 {"send_errors", 0},      {"samples_unsendable", 0}, {"registrations_sent", 0},
                 {"registrations_lost", 0}, {"samples_late", 0},     {"samples_unconfirmed", 0},
                 {"unknown_pid_samples", impl_->unknown_pid_samples}};
  json errors = json::object(), not_correlated = json::object();
  json processes = json::array();
  auto describe = [&](const Process& p) {
    const Deliverer::Figures f = impl_->deliverer.figures(p.delivery);
    json j = {{"pid", p.pid},
              {"protocol", std::string(elastic_v1::spec::kProtocol.id)},
              {"state", p.state},
              {"exited", p.exited},
              {"library", p.library ? p.library->path : ""},
              {"registered", f.registered},
              {"registrations_sent", f.registrations_sent},
              {"registrations_lost", f.registrations_lost},
              {"samples", p.samples},
              {"correlated", p.correlated},
              {"messages_sent", f.messages_sent},
              {"samples_sent", f.samples_sent},
              {"messages_lost", f.messages_lost},
              {"samples_lost", f.samples_lost},
              {"send_errors", f.send_errors},
              {"samples_unsendable", f.samples_unsendable},
              {"samples_late", f.samples_late},
              {"samples_unconfirmed", f.samples_unconfirmed},
              {"errors", p.errors},
              {"not_correlated", p.not_correlated}};
    // Where every correlated sample went, and whether the agent read it in time.
    j["delivery"] = impl_->deliverer.delivery_json(p.delivery);
    if (p.exited) j["exit_reason"] = p.exit_reason;
    if (p.storage) {
      j["service_name"] = p.storage->service_name;
      j["service_environment"] = p.storage->service_environment;
      j["socket_file_path"] = p.storage->socket_file_path;
    }
    if (p.tls) {
      j["tls_model"] = to_string(p.tls->model);
      if (p.tls->model == TlsModel::StaticOffset) j["tls_offset"] = p.tls->tp_offset;
    }
    if (auto context = p.context.to_json(); !context.is_null()) j["process_context"] = std::move(context);
    json records = json::array();
    for (const auto& [bytes, n] : p.records) records.push_back({{"hex", hex(bytes)}, {"count", n}});
    j["records"] = records;
    j["records_overflow"] = p.records_overflow;
    j["transactions_overflow"] = p.transactions_overflow;
    json txns = json::array();
    const auto sent_per_transaction = impl_->deliverer.sent(p.delivery);
    for (const auto& [ids, t] : p.transactions) {
      json stacks = json::object();
      std::uint64_t sent = 0;
      auto sent_here = sent_per_transaction.find(ids);
      for (const auto& [stack, n] : sent_here == sent_per_transaction.end() ? std::map<StackTraceId, std::uint64_t>{}
                                                                            : sent_here->second) {
        stacks[base64url_nopad(std::span<const std::uint8_t>(stack.data(), stack.size()))] = n;
        sent += n;
      }
      json spans = json::array();
      for (const auto& s : t.span_ids) spans.push_back(hex(s));
      txns.push_back({{"trace_id", hex(ids.first)},
                      {"transaction_id", hex(ids.second)},
                      {"samples_read", t.samples_read},
                      {"span_ids", spans},
                      {"stack_trace_ids", stacks},
                      {"samples_sent", sent}});
    }
    j["transactions"] = txns;
    for (const char* k : {"samples", "correlated", "messages_sent", "samples_sent", "messages_lost", "samples_lost",
                          "send_errors", "samples_unsendable", "registrations_sent", "registrations_lost",
                          "samples_late", "samples_unconfirmed"})
      totals[k] = totals[k].get<std::uint64_t>() + j[k].get<std::uint64_t>();
    for (const auto& [k, v] : p.errors) errors[k] = errors.value(k, std::uint64_t{0}) + v;
    for (const auto& [k, v] : p.not_correlated) not_correlated[k] = not_correlated.value(k, std::uint64_t{0}) + v;
    processes.push_back(std::move(j));
  };
  for (const auto& [pid, p] : impl_->processes) describe(p);
  for (const auto& p : impl_->retired) describe(p);
  // Processes read for another protocol's records: per thread what was read (nothing is sent to them).
  for (auto& j : impl_->sampled.to_json()) {
    totals["samples"] = totals["samples"].get<std::uint64_t>() + j["samples"].get<std::uint64_t>();
    processes.push_back(std::move(j));
  }
  totals["errors"] = errors;
  totals["not_correlated"] = not_correlated;
  json sampler = json::object();
  for (const auto& [k, v] : sampler_.counters().named()) sampler[k] = v;
  json out = {{"personality", to_string(options_.personality)},
              {"reader", sampler_.name()},
              {"frequency_hz", options_.frequency_hz},
              {"samples_delay_ms", options_.samples_delay_ms},
              {"host_id", options_.host_id},
              {"flush_interval_ms", options_.flush_interval.count()},
              {"elapsed_s", std::chrono::duration<double>(Clock::now() - impl_->started).count()},
              {"totals", totals},
              {"sampler", sampler},
              {"processes", processes}};
  if (!impl_->sampler_error.empty()) out["sampler_error"] = impl_->sampler_error;
  if (impl_->sampling_ended && impl_->finished) {
    auto s = [](auto d) { return std::chrono::duration<double>(d).count(); };
    const Deliverer::CpuWait sender = impl_->deliverer.cpu_wait();
    out["timeline"] = {
        {"duration_s", options_.duration ? json(s(*options_.duration)) : json(nullptr)},
        {"examining_s", s(impl_->clock_started.value_or(*impl_->sampling_ended) - impl_->started)},
        {"sampling_s", s(*impl_->sampling_ended - impl_->started)},
        {"loop_waited_for_cpu_s", s(impl_->loop_waited_for_cpu)},
        {"sender_waited_for_cpu_s", s(sender.total)},
        {"sender_longest_wait_for_cpu_ms", std::chrono::duration<double, std::milli>(sender.longest).count()},
        {"reading_rest_s", s(*impl_->all_read - *impl_->sampling_ended)},
        {"final_reads_s", s(*impl_->finished - *impl_->all_read)},
        {"final_reads_limit_s", s(impl_->final_reads_limit)},
        {"means", "examining_s: from start until every process named by --pid was examined once, when the "
                  "duration's clock started (0 without --pid); sampling_s: from start until the loop stopped "
                  "sampling (a rescan is examined in slices, so it stops at examining_s + duration_s unless the "
                  "machine kept its thread from a CPU: loop_waited_for_cpu_s); sender_waited_for_cpu_s: how long "
                  "the thread that sends to the agents, once woken (an agent read, a key's moment), waited for a "
                  "CPU, in all, and sender_longest_wait_for_cpu_ms at once at the worst (longer than an agent's "
                  "period between reads: a read it could not refill the queue for); reading_rest_s: then reading "
                  "what was sampled and not yet read (no more is taken meanwhile); "
                  "final_reads_s: then offering what was pending and awaiting the agents' reads, at most "
                  "final_reads_limit_s"}};
  }
  return out;
}

}  // namespace tracecorr::elastic_v1::agent

#include "elastic_v1/agent/host_agent.hpp"

#include <poll.h>
#include <signal.h>
#include <time.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstdarg>
#include <cstring>
#include <set>
#include <thread>

#include "tracecorr/conform/report.hpp"
#include "elastic_v1/library.hpp"
#include "tracecorr/discovery.hpp"
#include "tracecorr/memory.hpp"
#include "tracecorr/process_context.hpp"
#include "tracecorr/process_context_resolver.hpp"
#include "tracecorr/procfs.hpp"
#include "tracecorr/sampled_processes.hpp"
#include "tracecorr/socket.hpp"
#include "tracecorr/tls.hpp"

namespace tracecorr::elastic_v1::agent {
namespace {

using Clock = std::chrono::steady_clock;

bool process_exists(pid_t pid) { return ::kill(pid, 0) == 0 || errno == EPERM; }

constexpr std::size_t kMaxDistinctRecords = 256;  // per process, in the summary
// While messages wait for the agent's socket, the loop wakes at least this
// often to offer them (the sampler is polled in between, so it never waits on a send).
constexpr auto kSendTick = std::chrono::milliseconds(1);
// How often the loop looks at the process contexts it follows (one 8-byte
// read each): often enough that a publication is read while it is current
// (the SDK frees the one it replaces), without a read per send tick.
constexpr auto kContextLookInterval = std::chrono::milliseconds(10);
// At the end of a run, how long queued messages may still wait for the socket.
constexpr auto kFinalDeliveryPatience = std::chrono::milliseconds(2000);

bool socket_accepts(int fd) {
  pollfd p{fd, POLLOUT, 0};
  return ::poll(&p, 1, 0) > 0 && (p.revents & POLLOUT);
}
constexpr std::size_t kMaxSpanIdsPerTransaction = 256;

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
  std::optional<AgentSocket> socket;
  bool registered = false;
  bool exited = false;
  std::string exit_reason;

  Aggregator pending;
  explicit Process(std::size_t queue_capacity = 4096) : delivery(queue_capacity) {}
  DeliveryQueue delivery;                 // spec: between the aggregator and the socket
  Clock::time_point next_send{};          // pacing: sends spread over the flush interval
  Clock::duration send_spacing{};
  // Counters.
  std::uint64_t samples = 0, correlated = 0;
  std::map<std::string, std::uint64_t> errors;   // reads that failed, records that cannot be trusted
  // Samples that are fine but carry nothing to correlate: a thread without a
  // record ("no_record": most JVM threads), a record being updated
  // ("valid_zero", TLS-08), a thread outside any trace ("trace_absent", TLS-09).
  std::map<std::string, std::uint64_t> not_correlated;
  std::uint64_t registrations_sent = 0, registrations_lost = 0;
  std::uint64_t messages_sent = 0, samples_sent = 0;
  std::uint64_t messages_lost = 0, samples_lost = 0;  // ebpf-profiler: EAGAIN (the agent's queue was full), dropped
  std::uint64_t send_errors = 0, samples_unsendable = 0;  // refused, no socket, exited before the flush
  // (trace id, transaction id) -> what was read and what was sent.
  struct Transaction {
    std::uint64_t samples_read = 0;
    Clock::time_point last_sample{};  // + samples_delay_ms: the earliest the agent may export it
    std::set<SpanId> span_ids;
    std::map<StackTraceId, std::uint64_t> sent;
  };
  std::map<std::pair<TraceId, SpanId>, Transaction> transactions;
  std::map<RecordBytes, std::uint64_t> records;  // distinct records read (bounded)
  std::uint64_t records_overflow = 0;

  // Its OpenTelemetry process context, when it publishes one: the header the
  // sampler reads with each sample, and the samples taken since then by the
  // publication they belong to.
  FollowedContext context;
};

struct HostAgent::Impl {
  Impl(Sampler& sampler, SampledProcesses::Notice notice) : sampled(sampler, contexts, std::move(notice)) {}
  DiscoveryOptions discovery = elastic_v1::discovery_options();
  LibraryCache cache;
  std::map<pid_t, Process> processes;
  std::vector<Process> retired;
  std::set<pid_t> not_agents;  // --all: processes without the library (rechecked each scan)
  std::uint64_t unknown_pid_samples = 0;
  Clock::time_point started;
  double elapsed_s = 0;
  SamplerCounters last_counters;
  std::string sampler_error;
  process_context::PublicationResolver contexts;  // samples' context timestamps -> publications
  // Processes that publish no Elastic library but a protocol whose records the
  // sampler reads (OTEP 4947's thread context): listed per thread, nothing sent.
  SampledProcesses sampled;
};

HostAgent::HostAgent(AgentOptions options, Sampler& sampler)
    : options_(std::move(options)),
      sampler_(sampler),
      impl_(std::make_unique<Impl>(sampler, [this](const std::string& text) { notice(text); })) {}
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
  for (pid_t pid : candidates) {
    auto it = impl_->processes.find(pid);
    if (it != impl_->processes.end())
      refresh(it->second);
    else if (!impl_->sampled.follows(pid))
      examine(pid, std::find(options_.pids.begin(), options_.pids.end(), pid) != options_.pids.end());
  }
}

void HostAgent::examine(pid_t pid, bool explicit_pid) {
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
  Process p(options_.delivery_queue_capacity);
  p.pid = pid;
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
    p.socket.reset();
    p.registered = false;
  }

  // Socket, then registration (MSG-01), before the agent may publish TLS (TLS-06).
  if (!p.socket) {
    auto sock = AgentSocket::connect(p.pid, p.storage->socket_file_path);
    if (!sock) {
      set_state("cannot connect to the agent socket: " + sock.error().message());
      return;
    }
    p.socket.emplace(std::move(*sock));
    p.registered = false;
  }
  if (!ebpf && !p.registered) send_registration(p);

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
  p.samples_unsendable += p.pending.pending_samples();
  p.pending.drain();
  p.delivery.abandon();
  p.socket.reset();
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
    return;
  }
  if (j.verdict != RecordVerdict::Correlate) {
    ++p.errors[to_string(j.verdict)];
    return;
  }
  ++p.correlated;
  CorrelationKey key{j.record.trace_id, j.record.transaction_id, stack_trace_id(s.frames)};
  auto& txn = p.transactions[{key.trace_id, key.transaction_id}];
  ++txn.samples_read;
  txn.last_sample = Clock::now();
  if (txn.span_ids.size() < kMaxSpanIdsPerTransaction) txn.span_ids.insert(j.record.span_id);
  if (options_.personality == Personality::EbpfProfiler) {
    for (const auto& m : correlation_messages(key, 1)) send_correlation(p, m);
  } else {
    p.pending.add(key);
  }
}

void HostAgent::send_registration(Process& p) {
  if (!p.socket) return;
  elastic_v1::Registration r;
  r.minor = static_cast<std::uint16_t>(elastic_v1::spec::kMsgRegistrationMinor);
  r.samples_delay_ms = options_.samples_delay_ms;
  r.host_id = options_.host_id;
  auto bytes = elastic_v1::encode(r);
  switch (p.socket->send(bytes)) {
    case SendOutcome::Sent:
      p.registered = true;
      ++p.registrations_sent;
      break;
    case SendOutcome::WouldBlock:
      ++p.registrations_lost;  // retried at the next rescan
      break;
    case SendOutcome::Refused:
      ++p.send_errors;
      notice("pid " + std::to_string(p.pid) + ": registration refused: " + std::strerror(p.socket->last_errno()));
      p.socket.reset();  // reconnect at the next rescan
      break;
  }
}

void HostAgent::send_correlation(Process& p, const elastic_v1::Correlation& m) {
  if (!p.socket) {
    ++p.send_errors;
    p.samples_unsendable += m.count;
    return;
  }
  auto bytes = elastic_v1::encode(m);
  switch (p.socket->send(bytes)) {
    case SendOutcome::Sent: {
      ++p.messages_sent;
      p.samples_sent += m.count;
      p.transactions[{m.trace_id, m.transaction_id}].sent[m.stack_trace_id] += m.count;
      break;
    }
    case SendOutcome::WouldBlock:
      ++p.messages_lost;
      p.samples_lost += m.count;
      break;
    case SendOutcome::Refused:
      ++p.send_errors;
      p.samples_unsendable += m.count;
      notice("pid " + std::to_string(p.pid) + ": send refused: " + std::strerror(p.socket->last_errno()));
      p.socket.reset();
      break;
  }
}

std::chrono::milliseconds HostAgent::effective_flush_interval(const AgentOptions& o) {
  using std::chrono::milliseconds;
  const auto delay = milliseconds(std::max<std::uint32_t>(o.samples_delay_ms, 2));
  if (o.flush_interval.count() <= 0) return std::clamp(delay / 5, milliseconds(1), milliseconds(1000));
  if (o.personality == Personality::Spec && o.flush_interval >= delay) return delay / 2;
  return o.flush_interval;
}

// Spec: the aggregated counts join the delivery queue, due when the agent may
// export their transaction; pump_deliveries() sends them.
void HostAgent::flush(bool) {
  const auto now = Clock::now();
  const auto delay = std::chrono::milliseconds(options_.samples_delay_ms);
  for (auto& [pid, p] : impl_->processes) {
    if (p.pending.empty()) continue;
    if (!p.registered && p.socket) send_registration(p);
    for (const auto& m : p.pending.drain()) {
      auto& txn = p.transactions[{m.trace_id, m.transaction_id}];
      p.delivery.add({m.trace_id, m.transaction_id, m.stack_trace_id}, m.count, now, txn.last_sample + delay);
    }
    // Spread this interval's messages over the next one.
    p.send_spacing = options_.flush_interval / static_cast<long>(std::max<std::size_t>(p.delivery.size(), 1));
  }
}

bool HostAgent::pump_deliveries() {
  const auto now = Clock::now();
  bool waiting = false;
  for (auto& [pid, p] : impl_->processes) {
    if (p.delivery.empty()) continue;
    p.delivery.expire(now);
    // Sends owed by the pacing, when the socket was full, may catch up at most one interval.
    p.next_send = std::max(p.next_send, now - options_.flush_interval);
    while (p.socket && !p.delivery.empty() && now >= p.next_send && socket_accepts(p.socket->fd())) {
      auto e = *p.delivery.front();
      elastic_v1::Correlation m;
      m.trace_id = e.key.trace_id;
      m.transaction_id = e.key.transaction_id;
      m.stack_trace_id = e.key.stack_trace_id;
      m.count = e.count;
      auto outcome = p.socket->send(elastic_v1::encode(m));
      if (outcome == SendOutcome::WouldBlock) break;  // another sender took the room: next tick
      if (outcome == SendOutcome::Refused) {
        ++p.send_errors;
        p.samples_unsendable += e.count;
        p.delivery.unsendable();
        notice("pid " + std::to_string(p.pid) + ": send refused: " + std::strerror(p.socket->last_errno()));
        p.socket.reset();
        break;
      }
      p.delivery.sent(now, options_.flush_interval);
      ++p.messages_sent;
      p.samples_sent += e.count;
      p.transactions[{m.trace_id, m.transaction_id}].sent[m.stack_trace_id] += e.count;
      p.next_send += p.send_spacing;
    }
    waiting = waiting || !p.delivery.empty();
  }
  return waiting;
}

// ---- the loop -------------------------------------------------------------------------

Status HostAgent::run(const std::atomic<bool>& stop) {
  impl_->started = Clock::now();
  options_.flush_interval = effective_flush_interval(options_);
  const auto end = options_.duration ? impl_->started + *options_.duration : Clock::time_point::max();
  auto next_rescan = impl_->started;
  auto next_flush = impl_->started + options_.flush_interval;
  auto next_summary = impl_->started + options_.summary_interval;
  auto next_context_look = impl_->started;
  auto callback = [this](const Sample& s) { on_sample(s); };
  Status result = Ok{};
  bool deliveries_waiting = false;
  for (;;) {
    auto now = Clock::now();
    if (stop.load() || now >= end) break;
    if (now >= next_rescan) {
      rescan();
      next_rescan = now + options_.rescan_interval;
    }
    auto wake = std::min({next_rescan, next_flush, next_summary, end});
    now = Clock::now();
    auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(wake - now);
    wait = std::clamp(wait, std::chrono::milliseconds(0),
                      deliveries_waiting ? std::chrono::milliseconds(kSendTick) : std::chrono::milliseconds(100));
    // Publications can be read only while current: look before the samples come.
    if (now >= next_context_look) {
      impl_->contexts.refresh_all();
      next_context_look = now + kContextLookInterval;
    }
    auto polled = sampler_.poll(callback, wait);
    if (!polled) {
      impl_->sampler_error = polled.error().message();
      result = polled.error();
      break;
    }
    now = Clock::now();
    if (now >= next_flush) {
      flush(false);
      next_flush = now + options_.flush_interval;
    }
    deliveries_waiting = pump_deliveries();
    if (now >= next_summary) {
      live_summary(false);
      next_summary = now + options_.summary_interval;
    }
  }
  // Whatever the ring buffer still holds, then one last report.
  (void)sampler_.poll(callback, std::chrono::milliseconds(0));
  flush(true);
  // What is queued may still arrive in time: offer it a while longer, then give up on it.
  const auto patience = Clock::now() + std::min<Clock::duration>(kFinalDeliveryPatience,
                                                                 std::chrono::milliseconds(options_.samples_delay_ms));
  while (pump_deliveries() && Clock::now() < patience) std::this_thread::sleep_for(kSendTick);
  for (auto& [pid, p] : impl_->processes) {
    p.samples_unsendable += p.delivery.queued_samples();
    p.delivery.abandon();
  }
  live_summary(true);
  return result;
}

void HostAgent::live_summary(bool final_line) {
  impl_->elapsed_s = std::chrono::duration<double>(Clock::now() - impl_->started).count();
  impl_->last_counters = sampler_.counters();
  if (!options_.log) return;
  std::uint64_t samples = 0, correlated = 0, sent = 0, lost_msgs = 0, lost_samples = 0, late = 0, queued = 0;
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
    sent += p.samples_sent;
    lost_msgs += p.messages_lost + p.delivery.stats().expired.messages + p.delivery.stats().queue_full.messages;
    lost_samples += p.samples_lost + p.delivery.stats().expired.samples + p.delivery.stats().queue_full.samples;
    late += p.delivery.stats().late.samples;
    queued += p.delivery.queued_samples() + p.pending.pending_samples();
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
               " | not correlated:%s | errors:%s | delivered %" PRIu64 " samples (%" PRIu64 " late), queued %" PRIu64
               ", dropped %" PRIu64 " msgs (%" PRIu64 " samples; %s) | sampler lost %" PRIu64 "%s\n",
               final_line ? "final " : "", impl_->elapsed_s, impl_->processes.size() + impl_->retired.size(), sampling,
               samples, correlated, idle_text.empty() ? " none" : idle_text.c_str(),
               err_text.empty() ? " none" : err_text.c_str(), sent, late, queued, lost_msgs,
               lost_samples,
               options_.personality == Personality::EbpfProfiler
                   ? "the ebpf-profiler personality drops on EAGAIN, as that profiler does"
                   : "past due or queue full",
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
  json totals = {{"samples", 0},          {"correlated", 0},       {"messages_sent", 0},
                 {"samples_sent", 0},     {"messages_lost", 0},    {"samples_lost", 0},
                 {"send_errors", 0},      {"samples_unsendable", 0}, {"registrations_sent", 0},
                 {"registrations_lost", 0}, {"unknown_pid_samples", impl_->unknown_pid_samples}};
  json errors = json::object(), not_correlated = json::object();
  json processes = json::array();
  auto describe = [&](const Process& p) {
    json j = {{"pid", p.pid},
              {"protocol", std::string(elastic_v1::spec::kProtocol.id)},
              {"state", p.state},
              {"exited", p.exited},
              {"library", p.library ? p.library->path : ""},
              {"registered", p.registered},
              {"registrations_sent", p.registrations_sent},
              {"registrations_lost", p.registrations_lost},
              {"samples", p.samples},
              {"correlated", p.correlated},
              {"messages_sent", p.messages_sent},
              {"samples_sent", p.samples_sent},
              {"messages_lost", p.messages_lost},
              {"samples_lost", p.samples_lost},
              {"send_errors", p.send_errors},
              {"samples_unsendable", p.samples_unsendable},
              {"errors", p.errors},
              {"not_correlated", p.not_correlated}};
    // Where every correlated sample went.
    const auto& d = p.delivery.stats();
    auto counts = [](const DeliveryCounts& c) { return json{{"messages", c.messages}, {"samples", c.samples}}; };
    if (options_.personality == Personality::Spec) {
      j["messages_lost"] = d.expired.messages + d.queue_full.messages;
      j["samples_lost"] = d.expired.samples + d.queue_full.samples;
      j["delivery"] = {{"delivered", counts(d.delivered)},
                       {"late", counts(d.late)},
                       {"late_means", "waited longer than a flush interval for the agent's socket to accept"},
                       {"dropped",
                        {{"expired", counts(d.expired)},
                         {"queue_full", counts(d.queue_full)},
                         {"unsendable", counts(d.unsendable)}}},
                       {"dropped_causes",
                        {{"expired", "not accepted by the agent's socket before its transaction's last sample + "
                                     "samples-delay-ms (the agent may have exported it)"},
                         {"queue_full", "the bounded user-space queue was full"},
                         {"unsendable", "no socket, the send was refused, or the process exited"}}}};
    } else {
      j["delivery"] = {{"delivered", {{"messages", p.messages_sent}, {"samples", p.samples_sent}}},
                       {"dropped", {{"eagain", {{"messages", p.messages_lost}, {"samples", p.samples_lost}}}}},
                       {"dropped_causes",
                        {{"eagain", "the ebpf-profiler personality sends one message per sample and drops it when "
                                    "the agent's queue is full (EAGAIN), as the OTel eBPF profiler does: these "
                                    "losses are that profiler's"}}}};
    }
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
    json txns = json::array();
    for (const auto& [ids, t] : p.transactions) {
      json stacks = json::object();
      std::uint64_t sent = 0;
      for (const auto& [stack, n] : t.sent) {
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
                          "send_errors", "samples_unsendable", "registrations_sent", "registrations_lost"})
      totals[k] = totals[k].get<std::uint64_t>() + j[k].get<std::uint64_t>();
    totals["samples_late"] = totals.value("samples_late", std::uint64_t{0}) + d.late.samples;
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
  return out;
}

}  // namespace tracecorr::elastic_v1::agent

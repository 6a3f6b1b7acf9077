#include "elastic_v1/agent/hook.hpp"

#include <signal.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cinttypes>
#include <map>
#include <set>

#include "elastic_v1/agent/deliverer.hpp"
#include "elastic_v1/library.hpp"
#include "elastic_v1/registry.hpp"
#include "elastic_v1/wire.hpp"
#include "tracecorr/discovery.hpp"
#include "tracecorr/memory.hpp"
#include "tracecorr/procfs.hpp"
#include "tracecorr/sampled_processes.hpp"
#include "tracecorr/tls.hpp"

namespace tracecorr::elastic_v1::agent {
namespace {

bool process_exists(pid_t pid) { return ::kill(pid, 0) == 0 || errno == EPERM; }

constexpr std::size_t kMaxDistinctRecords = 256;  // per process, in the summary
constexpr std::size_t kMaxSpanIdsPerTransaction = 256;
// Transactions listed per process in the summary (a long run meets millions;
// the rest are counted, still correlated and sent). Deliverer::sent keeps as many.
constexpr std::size_t kMaxTransactionsListed = Deliverer::kMaxTransactionsListed;
// At the end of a run, how long what is pending or unread may still wait for
// the agents' reads (at most samples-delay-ms: later, it would be late anyway).
constexpr auto kFinalDeliveryPatience = std::chrono::milliseconds(2000);

// The sample's own time (CLOCK_MONOTONIC, as steady_clock): lateness is
// measured from it, not from when the ring buffer was read.
DeliveryTime sample_time(const Sample& s) {
  const auto now = DeliveryClock::now();
  const DeliveryTime taken{std::chrono::nanoseconds(s.time_ns)};
  return s.time_ns == 0 || taken > now ? now : taken;
}

std::string hex(const auto& bytes) { return to_hex(std::span<const std::uint8_t>(bytes.data(), bytes.size())); }

// The reader defects (reader_defects.hpp) this part can show, each the break of one rule.
std::vector<ReaderDefect> elastic_reader_defects() {
  return {{"ignores-valid", "TLS-08", "an Elastic record whose valid byte is 0 is correlated and exported as if valid"},
          {"ignores-trace-present", "TLS-09", "an Elastic record with trace-present 0 still gives its ids (a link, "
                                              "correlations)"},
          {"no-registration", "MSG-01", "correlation messages are sent without the registration message first"},
          {"wrong-counts", "MSG-08", "each correlation message's count is one more than the samples it covers"}};
}

RecordPolicy record_policy(const ReaderDefects& defects) {
  return RecordPolicy{defects.has("ignores-valid"), defects.has("ignores-trace-present")};
}

Deliverer::Options delivery_options(const AgentOptions& o, const AgentRun& run) {
  Deliverer::Options d;
  d.skip_registration = run.defects.has("no-registration");
  d.count_one_more = run.defects.has("wrong-counts");
  d.personality = o.personality;
  d.samples_delay_ms = o.samples_delay_ms;
  d.host_id = o.host_id;
  d.plan.samples_delay = std::chrono::milliseconds(o.samples_delay_ms);
  d.plan.settle = effective_flush_interval(o);
  d.plan.max_keys = std::max<std::size_t>(1, o.delivery_queue_capacity);
  d.notice = run.notice;
  return d;
}

// The per-process counters the summary sums over every process.
constexpr const char* kSummedCounters[] = {"samples",          "correlated",         "messages_sent",
                                           "samples_sent",     "messages_lost",      "samples_lost",
                                           "send_errors",      "samples_unsendable", "registrations_sent",
                                           "registrations_lost", "samples_late",     "samples_unconfirmed"};

void add_counts(nlohmann::json& into, const std::map<std::string, std::uint64_t>& counts) {
  for (const auto& [k, v] : counts) into[k] = into.value(k, std::uint64_t{0}) + v;
}

}  // namespace

std::chrono::milliseconds effective_flush_interval(const AgentOptions& o) {
  using std::chrono::milliseconds;
  const auto delay = milliseconds(std::max<std::uint32_t>(o.samples_delay_ms, 2));
  if (o.flush_interval.count() <= 0) return std::clamp(delay / 5, milliseconds(1), milliseconds(1000));
  if (o.personality == Personality::Spec && o.flush_interval >= delay) return delay / 2;
  return o.flush_interval;
}

namespace {

struct ElasticProcess {
  pid_t pid = 0;
  std::uint64_t start_time = 0;
  std::string exec_identity;  // changes when the process execs another program
  bool explicit_pid = false;
  std::string state = "examining";

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
  std::map<std::string, std::uint64_t> errors;  // reads that failed, records that cannot be trusted
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

class ElasticPart final : public AgentPart {
 public:
  ElasticPart(const AgentOptions& options, AgentRun run)
      : options_(options),
        run_(std::move(run)),
        record_policy_(record_policy(run_.defects)),
        deliverer_(delivery_options(options_, run_)) {
    options_.flush_interval = effective_flush_interval(options_);
  }

  void retire_gone() override;
  bool examine(pid_t pid, bool explicit_pid) override;
  bool on_sample(const Sample& s) override;
  RecordContext context_of(const Sample& s) override {
    return s.record && s.error == SampleError::Ok ? record_context(s.record->span(), record_policy_) : RecordContext{};
  }
  void ends_at(std::chrono::steady_clock::time_point end) override { deliverer_.ends_at(end); }
  std::chrono::milliseconds final_patience() const override {
    return std::min<std::chrono::milliseconds>(kFinalDeliveryPatience,
                                               std::chrono::milliseconds(options_.samples_delay_ms));
  }
  void finish(std::chrono::milliseconds patience) override { deliverer_.finish(patience); }

  std::size_t processes() const override { return processes_.size() + retired_.size(); }
  std::size_t sampling() const override;
  std::string live_text() const override;
  void each_context(const std::function<void(pid_t, const FollowedContext&)>& visit) const override;

  void summarize(nlohmann::json& summary) const override;
  bool ever_held(pid_t pid) const override { return held(pid) != nullptr; }
  std::optional<std::string> nothing_readable(pid_t pid) const override;
  std::string not_published() const override;
  const watch::ActiveTraceOf* trace_of(pid_t pid) const override {
    return held(pid) ? &elastic_v1::active_trace() : nullptr;
  }
  conform::StacksCaption stacks_caption() const override { return elastic_v1::stacks_caption(); }

 private:
  // refresh()'s steps, in order: each returns false when the next cannot be taken yet.
  void refresh(ElasticProcess& p);
  bool read_storage(ElasticProcess& p, const ProcessMemory& mem);
  bool connect(ElasticProcess& p);
  bool read_tls(ElasticProcess& p, const ProcessMemory& mem);
  bool track(ElasticProcess& p);
  void set_state(ElasticProcess& p, const std::string& state);
  void untrack(ElasticProcess& p);
  void retire(pid_t pid, const std::string& why);
  // on_sample()'s: a record judged worth correlating, listed and handed to the deliverer.
  void correlate(ElasticProcess& p, const Sample& s, const JudgedRecord& j);
  // summarize()'s.
  nlohmann::json process_json(const ElasticProcess& p) const;
  nlohmann::json transactions_json(const ElasticProcess& p) const;
  const ElasticProcess* held(pid_t pid) const;
  void notice(const std::string& text) const {
    if (run_.notice) run_.notice(text);
  }

  AgentOptions options_;
  AgentRun run_;
  RecordPolicy record_policy_;  // conforming unless a reader defect is in force
  DiscoveryOptions discovery_ = elastic_v1::discovery_options();
  LibraryCache cache_;
  std::map<pid_t, ElasticProcess> processes_;
  std::vector<ElasticProcess> retired_;
  // Sends to every Elastic process's socket, on its own thread, at each process's own moments.
  Deliverer deliverer_;
};

// ---- discovery ---------------------------------------------------------------------

void ElasticPart::retire_gone() {
  // Drop processes that exited (or whose pid now names another process).
  std::vector<pid_t> gone, execed;
  for (auto& [pid, p] : processes_) {
    if (!process_exists(pid))
      gone.push_back(pid);
    else if (p.start_time != 0 && process_start_time(pid) != p.start_time)
      gone.push_back(pid);
    else if (!p.exec_identity.empty() && exec_identity(pid) != p.exec_identity)
      execed.push_back(pid);  // a new image: the old library, storage and TLS offset mean nothing there
  }
  for (pid_t pid : gone) retire(pid, "exited");
  for (pid_t pid : execed) retire(pid, "exec'd another program");
}

bool ElasticPart::examine(pid_t pid, bool explicit_pid) {
  if (auto it = processes_.find(pid); it != processes_.end()) {
    refresh(it->second);
    return true;
  }
  if (!process_exists(pid)) return false;
  // Who the process is, read before what it maps: an exec while the library
  // is looked for then leaves the old identity, and the next rescan retires
  // the process as exec'd. Read after, it named the new image, and the old
  // image's library, storage and TLS offset were kept for it.
  const std::uint64_t start_time = process_start_time(pid);
  std::string identity = exec_identity(pid);
  auto found = discover_process(pid, discovery_, cache_);
  if (!found) {
    if (explicit_pid) notice("pid " + std::to_string(pid) + ": " + found.error().message());
    return false;
  }
  if (!found->has_value()) return false;  // no agent library mapped (yet): another protocol's, or looked at again
  // An identity unread (its auxv mid-exec) would let no exec be noticed: examined again at the next rescan.
  if (identity.empty()) return false;
  ElasticProcess p;
  p.pid = pid;
  p.delivery = deliverer_.open(pid);
  p.start_time = start_time;
  p.exec_identity = std::move(identity);
  p.explicit_pid = explicit_pid;
  p.library = std::move(**found);
  auto [it, inserted] = processes_.emplace(pid, std::move(p));
  notice("pid " + std::to_string(pid) + ": agent library " + it->second.library->path);
  refresh(it->second);
  return true;
}

void ElasticPart::set_state(ElasticProcess& p, const std::string& state) {
  if (state == p.state) return;
  p.state = state;
  notice("pid " + std::to_string(p.pid) + ": " + state);
}

// Reads (or re-reads) the process storage and TLS descriptor, connects,
// registers and starts tracking, each step only once its inputs exist.
void ElasticPart::refresh(ElasticProcess& p) {
  if (p.exited) return;
  LiveProcessMemory mem(p.pid);
  if (!read_storage(p, mem) || !connect(p) || !read_tls(p, mem) || !track(p)) return;
  // Its context, as its mappings show it now: the sampler reads the header of
  // the first (the OTEP allows one; which one a reader takes when there are
  // more is not said: spec/otel-process-context.md §7), and a context that
  // went away (dropped, or the process exec'd) is no longer read.
  if (auto change = p.context.follow(p.pid, run_.sampler, run_.contexts, context_reading(run_.defects)); !change.empty())
    notice("pid " + std::to_string(p.pid) + ": " + change);
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%" PRId64, p.tracked_offset);
  set_state(p, std::string("sampling (TLS offset ") + buf + ", socket " + p.storage->socket_file_path + ")");
}

// Process storage: pointer first (0 until published, PROC-01), then the layout.
bool ElasticPart::read_storage(ElasticProcess& p, const ProcessMemory& mem) {
  const AgentLibrary& lib = *p.library;
  if (!lib.process_pointer_addr) {
    set_state(p, "the library defines no " + std::string(spec::kProcessStorageSymbol) + " (ELF-02): cannot correlate");
    return false;
  }
  auto storage_ptr = mem.read_u64(*lib.process_pointer_addr);
  if (!storage_ptr) {
    set_state(p, "cannot read the process storage pointer: " + storage_ptr.error().message());
    return false;
  }
  if (*storage_ptr == 0) {
    set_state(p, "waiting for the process storage to be published");
    return false;
  }
  const bool ebpf = options_.personality == Personality::EbpfProfiler;
  if (*storage_ptr == p.storage_address || (ebpf && p.storage)) return true;
  if (!process_pointer_settled(lib, mem)) {
    set_state(p, "waiting for the loader to finish with the library (its data page still shows file bytes)");
    return false;
  }
  auto storage = decode_process_storage(mem.source_at(*storage_ptr));
  if (!storage) {
    set_state(p, "process storage unreadable: " + storage.error().message());
    return false;
  }
  if (storage->minor == 0) {
    set_state(p, "process storage has layout minor version 0 (PROC-02): not trusted");
    return false;
  }
  const bool changed = p.storage && p.storage->socket_file_path != storage->socket_file_path;
  if (p.storage_address != 0)
    notice("pid " + std::to_string(p.pid) + ": process storage re-published" +
           (changed ? " with socket " + storage->socket_file_path : ""));
  p.storage_address = *storage_ptr;
  p.storage = std::move(*storage);
  // A new storage means a (re)started agent: talk to it from scratch.
  deliverer_.disconnect(p.delivery);
  return true;
}

// Socket, then registration (MSG-01), before the agent may publish TLS (TLS-06).
bool ElasticPart::connect(ElasticProcess& p) {
  if (!deliverer_.connected(p.delivery)) {
    if (auto connected = deliverer_.connect(p.delivery, p.storage->socket_file_path); !connected) {
      set_state(p, "cannot connect to the agent socket: " + connected.error().message());
      return false;
    }
  } else if (options_.personality != Personality::EbpfProfiler) {
    deliverer_.register_again(p.delivery);  // one the queue refused
  }
  return true;
}

// TLS descriptor: only a static offset can be read through the thread pointer.
bool ElasticPart::read_tls(ElasticProcess& p, const ProcessMemory& mem) {
  const AgentLibrary& lib = *p.library;
  if (!(options_.personality == Personality::EbpfProfiler && p.tls_read_once)) {
    if (!lib.tls_descriptor_addr) {
      set_state(p, "no TLSDESC relocation for " + std::string(spec::kTlsSymbol) + " (ELF-04): records cannot be read");
      return false;
    }
    auto tls = read_tls_descriptor(mem, *lib.tls_descriptor_addr, lib.elf.machine);
    if (!tls) {
      set_state(p, "cannot read the TLS descriptor: " + tls.error().message());
      return false;
    }
    p.tls = *tls;
    if (tls->model == TlsModel::Unresolved) {
      set_state(p, "TLS descriptor not resolved by the loader yet; will read it again");
      return false;
    }
    if (tls->model == TlsModel::Dynamic) {
      set_state(p, "dynamic TLS (TLS-07): the record cannot be located from the thread pointer; not sampling. " +
                       tls->explanation);
      untrack(p);
      return false;
    }
    p.tls_read_once = true;
  }
  return p.tls && p.tls->model == TlsModel::StaticOffset;
}

bool ElasticPart::track(ElasticProcess& p) {
  if (p.tracked && p.tracked_offset == p.tls->tp_offset) return true;
  auto st = run_.sampler.track(p.pid, run_.slot, tls_record_layout(), PointerSite::tls_offset(p.tls->tp_offset));
  if (!st) {
    set_state(p, "the sampler cannot track it: " + st.error().message());
    return false;
  }
  p.tracked = true;
  p.ever_tracked = true;
  p.tracked_offset = p.tls->tp_offset;
  return true;
}

void ElasticPart::untrack(ElasticProcess& p) {
  // Its slot only: the process may still be sampled for another protocol
  // (the sampler forgets the context header with the last slot).
  if (p.tracked) (void)run_.sampler.untrack(p.pid, run_.slot);
  p.tracked = false;
  p.context.forget(p.pid, run_.contexts);
}

void ElasticPart::retire(pid_t pid, const std::string& why) {
  auto it = processes_.find(pid);
  if (it == processes_.end()) return;
  ElasticProcess& p = it->second;
  untrack(p);
  p.exited = true;
  p.exit_reason = why;
  deliverer_.retire(p.delivery);
  notice("pid " + std::to_string(pid) + ": " + why + "; no longer sampled");
  retired_.push_back(std::move(p));
  processes_.erase(it);
}

// ---- samples and messages ----------------------------------------------------------

bool ElasticPart::on_sample(const Sample& s) {
  if (s.slot != run_.slot) return false;  // another protocol's record of the process (the loop routes it)
  auto it = processes_.find(s.pid);
  if (it == processes_.end()) return false;
  ElasticProcess& p = it->second;
  ++p.samples;
  // Whatever its record says: which resource the sample belongs to.
  p.context.count(s, run_.contexts);
  if (s.error == SampleError::RecordPointerNull) {  // the thread has not published a record: not an error
    ++p.not_correlated["no_record"];
    deliverer_.left(p.delivery, s.tid, sample_time(s));
    return true;
  }
  if (s.error != SampleError::Ok || !s.record) {
    ++p.errors[tracecorr::to_string(s.error)];
    return true;
  }
  if (p.records.size() < kMaxDistinctRecords || p.records.count(*s.record))
    ++p.records[*s.record];
  else
    ++p.records_overflow;
  JudgedRecord j = judge_record(*s.record, record_policy_);
  if (j.verdict == RecordVerdict::ValidZero || j.verdict == RecordVerdict::TraceAbsent) {
    ++p.not_correlated[to_string(j.verdict)];
    // Outside any trace (TLS-09): the transaction it was in may be complete. Mid-update (TLS-08): nothing known.
    if (j.verdict == RecordVerdict::TraceAbsent) deliverer_.left(p.delivery, s.tid, sample_time(s));
    return true;
  }
  if (j.verdict != RecordVerdict::Correlate) {
    ++p.errors[to_string(j.verdict)];
    return true;
  }
  correlate(p, s, j);
  return true;
}

void ElasticPart::correlate(ElasticProcess& p, const Sample& s, const JudgedRecord& j) {
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
  deliverer_.add(p.delivery, key, s.tid, sample_time(s));
}

// ---- the live line --------------------------------------------------------------------

std::size_t ElasticPart::sampling() const {
  std::size_t n = 0;
  for (const auto& [pid, p] : processes_) n += p.tracked;
  return n;
}

void ElasticPart::each_context(const std::function<void(pid_t, const FollowedContext&)>& visit) const {
  for (const auto& [pid, p] : processes_) visit(pid, p.context);
  for (const auto& p : retired_) visit(p.pid, p.context);
}

std::string ElasticPart::live_text() const {
  std::uint64_t samples = 0, correlated = 0, sent = 0, lost_msgs = 0, lost_samples = 0, late = 0, unconfirmed = 0,
                queued = 0;
  std::map<std::string, std::uint64_t> errors, not_correlated;
  auto add = [&](const ElasticProcess& p) {
    samples += p.samples;
    correlated += p.correlated;
    const Deliverer::Figures f = deliverer_.figures(p.delivery);
    sent += f.samples_sent;
    lost_msgs += f.messages_lost;
    lost_samples += f.samples_lost;
    late += f.samples_late;
    unconfirmed += f.samples_unconfirmed;
    queued += f.samples_pending;
    for (const auto& [k, v] : p.errors) errors[k] += v;
    for (const auto& [k, v] : p.not_correlated) not_correlated[k] += v;
  };
  for (const auto& [pid, p] : processes_) add(p);
  for (const auto& p : retired_) add(p);
  auto listed = [](const std::map<std::string, std::uint64_t>& counts) {
    std::string text;
    for (const auto& [k, v] : counts) text += " " + k + "=" + std::to_string(v);
    return text.empty() ? std::string(" none") : text;
  };
  char line[512];
  std::snprintf(line, sizeof(line),
                "samples %" PRIu64 " correlated %" PRIu64 " | not correlated:%s | errors:%s | delivered %" PRIu64
                " samples (%" PRIu64 " read late, %" PRIu64 " unconfirmed), pending %" PRIu64 ", dropped %" PRIu64
                " msgs (%" PRIu64 " samples; %s)",
                samples, correlated, listed(not_correlated).c_str(), listed(errors).c_str(), sent, late, unconfirmed,
                queued, lost_msgs, lost_samples,
                options_.personality == Personality::EbpfProfiler
                    ? "the ebpf-profiler personality drops on EAGAIN, as that profiler does"
                    : "not read-able before due, or too many keys");
  return line;
}

// ---- what was read ------------------------------------------------------------------

const ElasticProcess* ElasticPart::held(pid_t pid) const {
  if (auto it = processes_.find(pid); it != processes_.end()) return &it->second;
  const ElasticProcess* last = nullptr;
  for (const auto& r : retired_)
    if (r.pid == pid) last = &r;
  return last;
}

std::string ElasticPart::not_published() const {
  return std::string(spec::kProtocol.id) + ": no library defining " + std::string(spec::kProcessStorageSymbol) +
         " or " + std::string(spec::kTlsSymbol) + " was mapped while the agent ran";
}

std::optional<std::string> ElasticPart::nothing_readable(pid_t pid) const {
  const ElasticProcess* p = held(pid);
  if (!p) return std::nullopt;
  if (!p->ever_tracked) return "never sampled: " + p->state;
  if (p->samples > 0 && p->correlated == 0 && p->not_correlated.count("valid_zero") == 0 &&
      p->not_correlated.count("trace_absent") == 0)
    return "sampled " + std::to_string(p->samples) + " times, but none of its threads had a readable record";
  return std::nullopt;
}

// ---- summary ------------------------------------------------------------------------

nlohmann::json ElasticPart::transactions_json(const ElasticProcess& p) const {
  using nlohmann::json;
  json txns = json::array();
  const auto sent_per_transaction = deliverer_.sent(p.delivery);
  for (const auto& [ids, t] : p.transactions) {
    json stacks = json::object();
    std::uint64_t sent = 0;
    if (auto here = sent_per_transaction.find(ids); here != sent_per_transaction.end())
      for (const auto& [stack, n] : here->second) {
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
  return txns;
}

nlohmann::json ElasticPart::process_json(const ElasticProcess& p) const {
  using nlohmann::json;
  const Deliverer::Figures f = deliverer_.figures(p.delivery);
  json j = {{"pid", p.pid}, {"protocol", std::string(spec::kProtocol.id)}, {"state", p.state}, {"exited", p.exited},
            {"library", p.library ? p.library->path : ""}, {"registered", f.registered},
            {"registrations_sent", f.registrations_sent}, {"registrations_lost", f.registrations_lost},
            {"samples", p.samples}, {"correlated", p.correlated}, {"messages_sent", f.messages_sent},
            {"samples_sent", f.samples_sent}, {"messages_lost", f.messages_lost}, {"samples_lost", f.samples_lost},
            {"send_errors", f.send_errors}, {"samples_unsendable", f.samples_unsendable},
            {"samples_late", f.samples_late}, {"samples_unconfirmed", f.samples_unconfirmed},
            {"errors", p.errors}, {"not_correlated", p.not_correlated}};
  // Where every correlated sample went, and whether the agent read it in time.
  j["delivery"] = deliverer_.delivery_json(p.delivery);
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
  j["transactions"] = transactions_json(p);
  return j;
}

void ElasticPart::summarize(nlohmann::json& summary) const {
  summary["personality"] = to_string(options_.personality);
  summary["samples_delay_ms"] = options_.samples_delay_ms;
  summary["host_id"] = options_.host_id;
  summary["flush_interval_ms"] = options_.flush_interval.count();
  auto& totals = summary["totals"];
  for (const char* k : kSummedCounters) totals[k] = totals.value(k, std::uint64_t{0});
  totals["errors"] = nlohmann::json::object();
  totals["not_correlated"] = nlohmann::json::object();
  auto describe = [&](const ElasticProcess& p) {
    nlohmann::json j = process_json(p);
    for (const char* k : kSummedCounters) totals[k] = totals[k].get<std::uint64_t>() + j[k].get<std::uint64_t>();
    add_counts(totals["errors"], p.errors);
    add_counts(totals["not_correlated"], p.not_correlated);
    summary["processes"].push_back(std::move(j));
  };
  for (const auto& [pid, p] : processes_) describe(p);
  for (const auto& p : retired_) describe(p);
  if (summary.contains("timeline")) {
    const Deliverer::CpuWait sender = deliverer_.cpu_wait();
    auto& t = summary["timeline"];
    t["sender_waited_for_cpu_s"] = std::chrono::duration<double>(sender.total).count();
    t["sender_longest_wait_for_cpu_ms"] = std::chrono::duration<double, std::milli>(sender.longest).count();
    t["means"] = t["means"].get<std::string>() +
                 "; sender_waited_for_cpu_s: how long the thread that sends to the agents, once woken (an agent "
                 "read, a key's moment), waited for a CPU, in all, and sender_longest_wait_for_cpu_ms at once at "
                 "the worst (longer than an agent's period between reads: a read it could not refill the queue for)";
  }
}

// ---- the hook -----------------------------------------------------------------------

// A whole number in [low, high] from a setting's text; nullopt otherwise.
std::optional<std::uint64_t> number_in(const std::string& text, std::uint64_t low, std::uint64_t high) {
  std::uint64_t v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size() || v < low || v > high) return std::nullopt;
  return v;
}

class Hook final : public AgentHook {
 public:
  std::string_view id() const override { return spec::kProtocol.id; }
  std::vector<AgentSetting> settings() const override {
    return {{"samples-delay-ms", "samples-delay-ms in the registration message (default 1000, the spec's default)",
             "1000", {}, "UINT"},
            {"host-id", "host-id in the registration message", "", {}, ""},
            {"personality", "spec: registration + aggregated counts; ebpf-profiler: no registration, one message per sample",
             "spec", {"spec", "ebpf-profiler"}, ""},
            {"flush-interval",
             "Spec: milliseconds a transaction goes unsampled before its counts are sent (a thread seen leaving it "
             "sends them at once; default: a fifth of --samples-delay-ms, at most 1000; must be below it)",
             "", {}, "UINT"}};
  }
  std::vector<ReaderDefect> reader_defects() const override { return elastic_reader_defects(); }
  Expected<std::unique_ptr<AgentPart>> start(const AgentSettings& settings, AgentRun run) const override {
    auto o = options_of(settings);
    if (!o) return o.error();
    return make_agent_part(*o, std::move(run));
  }

 private:
  static Expected<AgentOptions> options_of(const AgentSettings& settings) {
    auto setting = [&](const char* name) {
      auto it = settings.find(name);
      return it == settings.end() ? std::string() : it->second;
    };
    AgentOptions o;
    if (!parse_personality(setting("personality"), o.personality))
      return make_error("unknown personality '" + setting("personality") + "' (spec, ebpf-profiler)");
    auto delay = number_in(setting("samples-delay-ms"), 0, UINT32_MAX);
    if (!delay) return make_error("--samples-delay-ms " + setting("samples-delay-ms") + ": not a number of milliseconds");
    o.samples_delay_ms = static_cast<std::uint32_t>(*delay);
    o.host_id = setting("host-id");
    if (const std::string flush = setting("flush-interval"); !flush.empty()) {
      auto ms = number_in(flush, 1, 3600000);
      if (!ms) return make_error("--flush-interval " + flush + ": not a number of milliseconds in [1, 3600000]");
      o.flush_interval = std::chrono::milliseconds(*ms);
    }
    if (o.personality == Personality::Spec && o.flush_interval.count() >= o.samples_delay_ms &&
        o.flush_interval.count() != 0)
      return make_error("--flush-interval " + std::to_string(o.flush_interval.count()) +
                        " ms is not below --samples-delay-ms " + std::to_string(o.samples_delay_ms) +
                        " ms: agents could export transactions before their correlations arrive. Leave "
                        "--flush-interval out (it is derived: a fifth of samples-delay-ms, at most 1000 ms) or "
                        "shorten it");
    return o;
  }
};

}  // namespace

std::unique_ptr<AgentPart> make_agent_part(const AgentOptions& options, AgentRun run) {
  return std::make_unique<ElasticPart>(options, std::move(run));
}

const AgentHook& agent_hook() {
  static const Hook hook;
  return hook;
}

}  // namespace tracecorr::elastic_v1::agent

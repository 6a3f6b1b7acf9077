#include "tracecorr/agent/host_agent.hpp"

#include <signal.h>
#include <time.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstdarg>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>

#include "tracecorr/conform/report.hpp"
#include "tracecorr/discovery.hpp"
#include "tracecorr/memory.hpp"
#include "tracecorr/procfs.hpp"
#include "tracecorr/socket.hpp"
#include "tracecorr/tls.hpp"

namespace tracecorr::agent {
namespace {

using Clock = std::chrono::steady_clock;

bool process_exists(pid_t pid) { return ::kill(pid, 0) == 0 || errno == EPERM; }

constexpr std::size_t kMaxDistinctRecords = 256;  // per process, in the summary
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
  std::optional<wire::ProcessStorage> storage;
  std::optional<TlsDescriptor> tls;
  bool tls_read_once = false;  // ebpf-profiler: the offset is never re-read
  bool tracked = false;
  std::int64_t tracked_offset = 0;
  std::optional<AgentSocket> socket;
  bool registered = false;
  bool exited = false;
  std::string exit_reason;

  Aggregator pending;
  // Counters.
  std::uint64_t samples = 0, correlated = 0;
  std::map<std::string, std::uint64_t> errors;   // sample errors and record verdicts other than correlate
  std::uint64_t registrations_sent = 0, registrations_lost = 0;
  std::uint64_t messages_sent = 0, samples_sent = 0;
  std::uint64_t messages_lost = 0, samples_lost = 0;  // EAGAIN: the agent's queue was full
  std::uint64_t send_errors = 0, samples_unsendable = 0;  // refused, no socket, exited before the flush
  // (trace id, transaction id) -> what was read and what was sent.
  struct Transaction {
    std::uint64_t samples_read = 0;
    std::set<SpanId> span_ids;
    std::map<StackTraceId, std::uint64_t> sent;
  };
  std::map<std::pair<TraceId, SpanId>, Transaction> transactions;
  std::map<wire::TlsRecordBytes, std::uint64_t> records;  // distinct records read (bounded)
  std::uint64_t records_overflow = 0;
};

struct HostAgent::Impl {
  DiscoveryOptions discovery = DiscoveryOptions::defaults();
  LibraryCache cache;
  std::map<pid_t, Process> processes;
  std::vector<Process> retired;
  std::set<pid_t> not_agents;  // --all: processes without the library (rechecked each scan)
  std::uint64_t unknown_pid_samples = 0;
  Clock::time_point started;
  double elapsed_s = 0;
  SamplerCounters last_counters;
  std::string sampler_error;
};

HostAgent::HostAgent(AgentOptions options, Sampler& sampler)
    : options_(std::move(options)), sampler_(sampler), impl_(std::make_unique<Impl>()) {}
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
  for (pid_t pid : candidates) {
    auto it = impl_->processes.find(pid);
    if (it == impl_->processes.end()) {
      examine(pid, std::find(options_.pids.begin(), options_.pids.end(), pid) != options_.pids.end());
    } else {
      refresh(it->second);
    }
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
    if (explicit_pid && !impl_->not_agents.count(pid))
      notice("pid " + std::to_string(pid) + ": no agent library mapped (yet); will look again");
    impl_->not_agents.insert(pid);
    return;
  }
  impl_->not_agents.erase(pid);
  Process p;
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
  if (!lib.storage_pointer_addr) {
    set_state("the library defines no " + std::string(spec::kProcessStorageSymbol) + " (ELF-02): cannot correlate");
    return;
  }
  auto storage_ptr = mem.read_u64(*lib.storage_pointer_addr);
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
    if (!storage_pointer_settled(lib, mem)) {
      set_state("waiting for the loader to finish with the library (its data page still shows file bytes)");
      return;
    }
    auto storage = wire::decode_process_storage(mem.source_at(*storage_ptr));
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
      set_state("no TLSDESC relocation for " + std::string(spec::kTlsSymbol) + " (ELF-04): records cannot be read");
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
      if (p.tracked) {
        (void)sampler_.untrack(p.pid);
        p.tracked = false;
      }
      return;
    }
    p.tls_read_once = true;
  }
  if (!p.tls || p.tls->model != TlsModel::StaticOffset) return;
  if (!p.tracked || p.tracked_offset != p.tls->tp_offset) {
    auto st = sampler_.track(p.pid, p.tls->tp_offset);
    if (!st) {
      set_state("the sampler cannot track it: " + st.error().message());
      return;
    }
    p.tracked = true;
    p.tracked_offset = p.tls->tp_offset;
  }
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%" PRId64, p.tracked_offset);
  set_state(std::string("sampling (TLS offset ") + buf + ", socket " + p.storage->socket_file_path + ")");
}

void HostAgent::retire(pid_t pid, const std::string& why) {
  auto it = impl_->processes.find(pid);
  if (it == impl_->processes.end()) return;
  Process& p = it->second;
  if (p.tracked) (void)sampler_.untrack(pid);
  p.tracked = false;
  p.exited = true;
  p.exit_reason = why;
  p.samples_unsendable += p.pending.pending_samples();
  p.pending.drain();
  p.socket.reset();
  notice("pid " + std::to_string(pid) + ": " + why + "; no longer sampled");
  impl_->retired.push_back(std::move(p));
  impl_->processes.erase(it);
}

// ---- samples and messages ----------------------------------------------------------

void HostAgent::on_sample(const Sample& s) {
  auto it = impl_->processes.find(s.pid);
  if (it == impl_->processes.end()) {
    ++impl_->unknown_pid_samples;
    return;
  }
  Process& p = it->second;
  ++p.samples;
  if (s.error != SampleError::Ok || !s.record) {
    ++p.errors[tracecorr::to_string(s.error)];
    return;
  }
  if (p.records.size() < kMaxDistinctRecords || p.records.count(*s.record))
    ++p.records[*s.record];
  else
    ++p.records_overflow;
  JudgedRecord j = judge_record(*s.record);
  if (j.verdict != RecordVerdict::Correlate) {
    ++p.errors[to_string(j.verdict)];
    return;
  }
  ++p.correlated;
  CorrelationKey key{j.record.trace_id, j.record.transaction_id, stack_trace_id(s.frames)};
  auto& txn = p.transactions[{key.trace_id, key.transaction_id}];
  ++txn.samples_read;
  if (txn.span_ids.size() < kMaxSpanIdsPerTransaction) txn.span_ids.insert(j.record.span_id);
  if (options_.personality == Personality::EbpfProfiler) {
    for (const auto& m : correlation_messages(key, 1)) send_correlation(p, m);
  } else {
    p.pending.add(key);
  }
}

void HostAgent::send_registration(Process& p) {
  if (!p.socket) return;
  wire::Registration r;
  r.minor = static_cast<std::uint16_t>(spec::kMsgRegistrationMinor);
  r.samples_delay_ms = options_.samples_delay_ms;
  r.host_id = options_.host_id;
  auto bytes = wire::encode(r);
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

void HostAgent::send_correlation(Process& p, const wire::Correlation& m) {
  if (!p.socket) {
    ++p.send_errors;
    p.samples_unsendable += m.count;
    return;
  }
  auto bytes = wire::encode(m);
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

void HostAgent::flush(bool) {
  for (auto& [pid, p] : impl_->processes) {
    if (p.pending.empty()) continue;
    if (options_.personality == Personality::Spec && !p.registered && p.socket) send_registration(p);
    for (const auto& m : p.pending.drain()) send_correlation(p, m);
  }
}

// ---- the loop -------------------------------------------------------------------------

Status HostAgent::run(const std::atomic<bool>& stop) {
  impl_->started = Clock::now();
  if (options_.flush_interval.count() <= 0) options_.flush_interval = std::chrono::milliseconds(1);
  if (options_.personality == Personality::Spec &&
      options_.flush_interval.count() >= static_cast<long long>(options_.samples_delay_ms))
    notice("flush interval " + std::to_string(options_.flush_interval.count()) + " ms is not below samples-delay-ms " +
           std::to_string(options_.samples_delay_ms) +
           ": agents may export transactions before their correlations arrive");
  const auto end = options_.duration ? impl_->started + *options_.duration : Clock::time_point::max();
  auto next_rescan = impl_->started;
  auto next_flush = impl_->started + options_.flush_interval;
  auto next_summary = impl_->started + options_.summary_interval;
  auto callback = [this](const Sample& s) { on_sample(s); };
  Status result = Ok{};
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
    wait = std::clamp(wait, std::chrono::milliseconds(0), std::chrono::milliseconds(100));
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
    if (now >= next_summary) {
      live_summary(false);
      next_summary = now + options_.summary_interval;
    }
  }
  // Whatever the ring buffer still holds, then one last report.
  (void)sampler_.poll(callback, std::chrono::milliseconds(0));
  flush(true);
  live_summary(true);
  return result;
}

void HostAgent::live_summary(bool final_line) {
  impl_->elapsed_s = std::chrono::duration<double>(Clock::now() - impl_->started).count();
  impl_->last_counters = sampler_.counters();
  if (!options_.log) return;
  std::uint64_t samples = 0, correlated = 0, sent = 0, lost_msgs = 0, lost_samples = 0;
  std::map<std::string, std::uint64_t> errors;
  std::size_t sampling = 0;
  auto add = [&](const Process& p) {
    samples += p.samples;
    correlated += p.correlated;
    sent += p.samples_sent;
    lost_msgs += p.messages_lost;
    lost_samples += p.samples_lost;
    for (const auto& [k, v] : p.errors) errors[k] += v;
  };
  for (const auto& [pid, p] : impl_->processes) {
    add(p);
    sampling += p.tracked;
  }
  for (const auto& p : impl_->retired) add(p);
  std::string err_text;
  for (const auto& [k, v] : errors) err_text += " " + k + "=" + std::to_string(v);
  std::fprintf(options_.log,
               "tracecorr agent: %s%.1fs processes %zu sampling %zu | samples %" PRIu64 " correlated %" PRIu64
               " | errors%s | sent %" PRIu64 " samples, lost %" PRIu64 " msgs (%" PRIu64
               " samples) | sampler lost %" PRIu64 "\n",
               final_line ? "final " : "", impl_->elapsed_s, impl_->processes.size() + impl_->retired.size(), sampling,
               samples, correlated, err_text.empty() ? " none" : err_text.c_str(), sent, lost_msgs, lost_samples,
               impl_->last_counters.lost);
  std::fflush(options_.log);
}

// ---- summary ------------------------------------------------------------------------

nlohmann::json HostAgent::summary() const {
  using nlohmann::json;
  json totals = {{"samples", 0},          {"correlated", 0},       {"messages_sent", 0},
                 {"samples_sent", 0},     {"messages_lost", 0},    {"samples_lost", 0},
                 {"send_errors", 0},      {"samples_unsendable", 0}, {"registrations_sent", 0},
                 {"registrations_lost", 0}, {"unknown_pid_samples", impl_->unknown_pid_samples}};
  json errors = json::object();
  json processes = json::array();
  auto describe = [&](const Process& p) {
    json j = {{"pid", p.pid},
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
              {"errors", p.errors}};
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
    for (const auto& [k, v] : p.errors) errors[k] = errors.value(k, std::uint64_t{0}) + v;
    processes.push_back(std::move(j));
  };
  for (const auto& [pid, p] : impl_->processes) describe(p);
  for (const auto& p : impl_->retired) describe(p);
  totals["errors"] = errors;
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

}  // namespace tracecorr::agent

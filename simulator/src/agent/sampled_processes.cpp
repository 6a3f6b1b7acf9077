#include "tracecorr/sampled_processes.hpp"

#include <signal.h>

#include <algorithm>
#include <cerrno>

#include "tracecorr/ids.hpp"
#include "tracecorr/memory.hpp"
#include "tracecorr/plugin_registry.hpp"
#include "tracecorr/process_context.hpp"
#include "tracecorr/procfs.hpp"
#include "tracecorr/text.hpp"

namespace tracecorr {
namespace {

using Clock = std::chrono::steady_clock;

// Bounds on what one process may make the summary hold.
constexpr std::size_t kMaxThreads = 1024;            // per process
constexpr std::size_t kMaxDistinctRecords = 64;      // per thread, each decoded once
constexpr std::size_t kMaxContextsCached = 1024;     // per process; beyond, a record's context is read per sample
// How often sample_records' loop looks for exits, execs, libraries loaded
// late and context changes, and at the contexts it follows (one 8-byte read
// each: often enough that a publication is read while it is current).
constexpr auto kRescanInterval = std::chrono::milliseconds(500);
constexpr auto kContextLookInterval = std::chrono::milliseconds(10);

PluginRegistry<SampledProtocol>& registry() {
  static PluginRegistry<SampledProtocol> r;
  return r;
}

bool process_exists(pid_t pid) { return ::kill(pid, 0) == 0 || errno == EPERM; }

std::uint64_t monotonic_now_ns() {
  // steady_clock is CLOCK_MONOTONIC here, the clock of Sample::time_ns.
  return static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count());
}

// What a sample says about its thread, as the summary counts it: the
// sampler's error, or a record whose valid byte the layout accepts or not.
std::string status_of(const Sample& s, const RecordLayout& layout) {
  if (s.error != SampleError::Ok) return to_string(s.error);
  return layout.valid(s.record->span()) ? "record" : "record_not_valid";
}

// The resource of pid's OTel process context, {key: value} for people and
// the summary (at most kMaxResourceKeys); nullopt when pid publishes none
// that reads and decodes.
constexpr std::size_t kMaxResourceKeys = 32;
constexpr std::size_t kMaxResourceValue = 200;
std::optional<nlohmann::json> context_resource(pid_t pid) {
  auto snapshot = process_context::take_contents_snapshot(pid);
  if (!snapshot) return std::nullopt;
  for (const auto& m : snapshot->mappings) {
    if (!m.read.ok() || !m.decoded || !m.decoded->ok()) continue;
    nlohmann::json resource = nlohmann::json::object();
    for (const auto& kv : m.decoded->value().resource)
      if (resource.size() < kMaxResourceKeys && !resource.contains(kv.key)) {
        const std::string* text = kv.value.as_string();  // a string as itself; other values shown
        resource[kv.key] = text ? text->substr(0, kMaxResourceValue) : kv.value.to_display(kMaxResourceValue);
      }
    return resource;
  }
  return std::nullopt;
}

std::string resource_text(const nlohmann::json& resource) {
  std::string text;
  for (const auto& [k, v] : resource.items()) text += (text.empty() ? "" : ", ") + k + "=" + v.get<std::string>();
  return text.empty() ? "an empty resource" : text;
}

std::string sampled_protocol_names() {
  std::string names;
  for (const SampledProtocol* p : sampled_protocols()) names += (names.empty() ? "" : ", ") + std::string(p->id());
  return names;
}

nlohmann::json counts_json(const std::map<std::string, std::uint64_t>& counts) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [k, v] : counts) j[k] = v;
  return j;
}

}  // namespace

bool RecordContext::operator==(const RecordContext& other) const {
  static const otlp::Attributes none;
  return link == other.link && trace_flags == other.trace_flags &&
         (attributes ? *attributes : none) == (other.attributes ? *other.attributes : none);
}

void register_sampled_protocol(const SampledProtocol& protocol) { registry().add(protocol); }
std::vector<const SampledProtocol*> sampled_protocols() { return registry().all(); }

RecordContext linked_context(const TraceId& trace_id, const SpanId& span_id, std::uint8_t trace_flags,
                             const std::vector<NamedValue>& values, bool settled) {
  RecordContext context;
  if (!is_zero(trace_id) || !is_zero(span_id)) {
    context.link = RecordContext::Link{trace_id, span_id};
    context.trace_flags = trace_flags;
  }
  otlp::Attributes attributes;
  for (const auto& v : values) {
    std::string text(v.value.begin(), v.value.end());
    if (valid_utf8(text))
      attributes.emplace(v.key, otlp::AttributeValue(std::move(text)));
    else
      attributes.emplace(v.key, otlp::AttributeValue(otlp::AttributeValue::Bytes(v.value.begin(), v.value.end())));
  }
  if (!attributes.empty()) context.attributes = std::make_shared<const otlp::Attributes>(std::move(attributes));
  context.settled = settled;
  return context;
}

// ---- FollowedContext ------------------------------------------------------------------

ContextReading context_reading(const ReaderDefects& defects) {
  ContextReading reading;
  reading.anon_shmem_only = defects.has("one-mapping-name");
  reading.read.check_identity = !defects.has("any-signature");
  reading.read.seqlock = !defects.has("ignores-seqlock");
  return reading;
}

process_context::ResolverOptions resolver_options(const ReaderDefects& defects) {
  process_context::ResolverOptions options;
  options.read = context_reading(defects).read;
  return options;
}

std::string FollowedContext::follow(pid_t pid, Sampler& sampler, process_context::PublicationResolver& resolver,
                                    const ContextReading& reading) {
  auto found = process_context::discover(pid, process_context::DontFork::kRead, reading.anon_shmem_only);
  if (!found) return "";  // the process is going: its next rescan retires it
  mappings_ = found->size();
  const std::uint64_t header = found->empty() ? 0 : found->front().mapping.start;
  if (header == header_) return "";
  if (auto st = sampler.track_process_context(pid, header ? std::optional(header) : std::nullopt); !st)
    return "the sampler cannot read its process context: " + st.error().message();
  header_ = header;
  if (!header) {
    resolver.forget(pid);
    return "its OTel process context is gone";
  }
  resolver.watch(pid, header);
  resolver.refresh(pid);
  since_ns_ = monotonic_now_ns();
  return "OTel process context at " + hex_address(header) + " (" + found->front().mapping.path + ")" +
         (found->size() > 1 ? "; " + std::to_string(found->size()) + " context mappings, the first is read" : "") +
         ": samples are attributed to its resource";
}

void FollowedContext::count(const Sample& s, process_context::PublicationResolver& resolver) {
  if (header_ == 0) return;
  // A sample carrying the header's timestamp is resolved as its observation's
  // resource is (host_agent.cpp's ObservedResources), whenever it was taken:
  // one taken just before the follow began, delivered after, was exported
  // with its resource and must be counted so. One without a timestamp is the
  // header's failure only once the sampler was told of it.
  if (s.context_published_at)
    tally_.add(resolver.resolve(s.pid, *s.context_published_at));
  else if (s.time_ns >= since_ns_)
    tally_.add_header_unreadable();
}

void FollowedContext::forget(pid_t pid, process_context::PublicationResolver& resolver) {
  header_ = 0;
  resolver.forget(pid);
}

nlohmann::json FollowedContext::to_json() const {
  if (header_ == 0 && tally_.samples() == 0) return nullptr;
  nlohmann::json j = tally_.to_json();
  j["header_address"] = header_ ? nlohmann::json(hex_address(header_)) : nlohmann::json(nullptr);
  j["mappings"] = mappings_;
  return j;
}

// ---- SampledProcesses -----------------------------------------------------------------

struct SampledProcesses::Process {
  pid_t pid = 0;
  std::uint64_t start_time = 0;
  std::string exec_identity;  // changes when the process execs another program
  bool explicit_pid = false;
  const SampledProtocol* protocol = nullptr;  // nullptr: a process context alone, listed with its resource
  std::string others_said;  // "; <protocol>: <why not>" of the protocols that did not take it, while it cannot be read
  nlohmann::json resource;                   // that context's resource
  std::unique_ptr<SampledRecords> records;  // set once located
  std::string state;
  bool tracked = false, ever_tracked = false, exited = false;
  std::string exit_reason;
  FollowedContext context;

  struct DistinctRecord {
    std::uint64_t samples = 0;
    nlohmann::json decoded;
  };
  struct Thread {
    std::uint64_t samples = 0;
    std::map<std::string, std::uint64_t> statuses;
    std::map<RecordBytes, DistinctRecord> records;
    std::uint64_t records_overflow = 0;  // samples of records past kMaxDistinctRecords
  };
  std::map<pid_t, Thread> threads;
  std::uint64_t samples = 0, records_read = 0, threads_overflow = 0;
  std::map<std::string, std::uint64_t> statuses;  // every thread's
  std::map<RecordBytes, RecordContext> contexts;  // context_of()'s, by the record's bytes
};

SampledProcesses::SampledProcesses(Sampler& sampler, process_context::PublicationResolver& resolver, Notice notice,
                                   LayoutSlot slot, ReaderDefects defects)
    : sampler_(sampler), resolver_(resolver), notice_(std::move(notice)), slot_(slot), defects_(std::move(defects)) {}
SampledProcesses::~SampledProcesses() = default;

bool SampledProcesses::adopt(Process& p) {
  // The first protocol that reads the process takes it. One that sees its
  // variable announced under another schema passes it on (OTEP 4947's
  // lookalike is the Node.js struct, which that schema's protocol reads).
  // None reads it: the first that cannot takes it, saying what every other
  // protocol said.
  std::vector<std::pair<const SampledProtocol*, Error>> cannot;
  for (const SampledProtocol* protocol : sampled_protocols()) {
    auto located = protocol->locate(p.pid, cache_, defects_);
    if (located && !*located) continue;  // not published (yet)
    if (located) return adopt_as(p, *protocol, std::move(located));
    cannot.emplace_back(protocol, located.error());
  }
  if (cannot.empty()) return false;
  // Another schema's answer goes last: a reader's own trouble comes first.
  std::stable_partition(cannot.begin(), cannot.end(),
                        [](const auto& c) { return c.second.kind != ErrorKind::kUnsupported; });
  for (std::size_t i = 1; i < cannot.size(); ++i)
    p.others_said += "; " + std::string(cannot[i].first->id()) + ": " + cannot[i].second.message();
  return adopt_as(p, *cannot.front().first, std::move(cannot.front().second));
}

bool SampledProcesses::adopt_as(Process& p, const SampledProtocol& protocol,
                                Expected<std::unique_ptr<SampledRecords>> located) {
  if (!process_exists(p.pid)) return false;  // the error was its going
  // No memory to look in (a kernel thread, a zombie): it publishes nothing.
  // One tracecorr may not look into (a sandbox's init, even for root): it
  // cannot tell, and says so only of a process it was asked for by pid.
  // Taken for publishers, every kernel thread of the host was one, listed
  // and located again at every rescan (a hundred in the arm64 guest).
  if (!located && (located.error().kind == ErrorKind::kGone ||
                   (located.error().kind == ErrorKind::kPermission && !p.explicit_pid)))
    return false;
  p.protocol = &protocol;
  if (located)
    p.records = std::move(*located);
  else
    p.state = "publishes " + std::string(protocol.id()) + ", but its records cannot be read: " +
              located.error().message() + p.others_said;
  if (notice_) notice_("pid " + std::to_string(p.pid) + ": publishes " + std::string(protocol.id()));
  return true;
}

bool SampledProcesses::examine(pid_t pid, bool explicit_pid, bool context_alone) {
  if (follows(pid) || !process_exists(pid)) return false;
  auto p = std::make_unique<Process>();
  p->pid = pid;
  p->start_time = process_start_time(pid);
  p->exec_identity = exec_identity(pid);
  p->explicit_pid = explicit_pid;
  if (!adopt(*p)) {
    if (!context_alone) return false;
    auto resource = context_resource(pid);
    if (!resource) return false;
    p->resource = std::move(*resource);
    p->state = "publishes only an OTel process context (resource " + resource_text(p->resource) +
               "): no per-thread records of " + sampled_protocol_names() + " to sample";
    if (notice_) notice_("pid " + std::to_string(pid) + ": " + p->state);
    processes_.push_back(std::move(p));
    return true;
  }
  processes_.push_back(std::move(p));
  refresh(*processes_.back());
  return true;
}

bool SampledProcesses::follows(pid_t pid) const {
  return std::any_of(processes_.begin(), processes_.end(), [&](const auto& p) { return !p->exited && p->pid == pid; });
}

bool SampledProcesses::ever_followed(pid_t pid) const {
  return std::any_of(processes_.begin(), processes_.end(), [&](const auto& p) { return p->pid == pid; });
}

bool SampledProcesses::context_only(pid_t pid) const {
  const Process* p = nullptr;
  for (const auto& q : processes_)
    if (q->pid == pid) p = q.get();  // the latest
  return p && !p->protocol;
}

void SampledProcesses::rescan() {
  for (auto& p : processes_) {
    if (p->exited) continue;
    if (!process_exists(p->pid) || process_start_time(p->pid) != p->start_time)
      retire(*p, "exited");
    else if (exec_identity(p->pid) != p->exec_identity)
      retire(*p, "exec'd another program");  // its module, site and context mean nothing there
    else
      refresh(*p);
  }
}

// Locates the records again until they can be read, tracks the process, and
// follows its context.
void SampledProcesses::refresh(Process& p) {
  auto set_state = [&](const std::string& s) {
    if (s == p.state) return;
    p.state = s;
    if (notice_) notice_("pid " + std::to_string(p.pid) + ": " + s);
  };
  if (!p.protocol && !adopt(p)) return;  // still a process context alone
  if (!p.records) {
    auto located = p.protocol->locate(p.pid, cache_, defects_);
    if (!located) {
      set_state("publishes " + std::string(p.protocol->id()) + ", but its records cannot be read: " +
                located.error().message() + p.others_said);
      return;
    }
    if (!*located) {
      set_state("no longer publishes " + std::string(p.protocol->id()));
      return;
    }
    p.records = std::move(*located);
  }
  if (!p.tracked) {
    if (auto st = sampler_.track(p.pid, slot_, p.records->layout(), p.records->site()); !st) {
      set_state("the sampler cannot track it: " + st.error().message());
      return;
    }
    p.tracked = p.ever_tracked = true;
  }
  if (auto change = p.context.follow(p.pid, sampler_, resolver_, context_reading(defects_)); !change.empty() && notice_)
    notice_("pid " + std::to_string(p.pid) + ": " + change);
  set_state("sampling " + std::string(p.protocol->id()) + " records (" + p.records->where() + ")");
}

void SampledProcesses::retire(Process& p, const std::string& why) {
  // Its slot only (the sampler forgets the context header with the process's last slot).
  if (p.tracked) (void)sampler_.untrack(p.pid, slot_);
  p.tracked = false;
  p.context.forget(p.pid, resolver_);
  p.exited = true;
  p.exit_reason = why;
  if (notice_) notice_("pid " + std::to_string(p.pid) + ": " + why + "; no longer sampled");
}

bool SampledProcesses::on_sample(const Sample& s) {
  if (s.slot != slot_) return false;
  auto it = std::find_if(processes_.begin(), processes_.end(),
                         [&](const auto& p) { return !p->exited && p->pid == s.pid; });
  if (it == processes_.end()) return false;
  Process& p = **it;
  if (!p.records) return true;  // tracked only once located: a stale sample of an earlier image
  ++p.samples;
  p.context.count(s, resolver_);
  const std::string status = status_of(s, p.records->layout());
  ++p.statuses[status];
  if (s.record) ++p.records_read;
  auto thread = p.threads.find(s.tid);
  if (thread == p.threads.end()) {
    if (p.threads.size() >= kMaxThreads) {
      ++p.threads_overflow;
      return true;
    }
    thread = p.threads.emplace(s.tid, Process::Thread{}).first;
  }
  auto& t = thread->second;
  ++t.samples;
  ++t.statuses[status];
  if (!s.record) return true;
  if (auto r = t.records.find(*s.record); r != t.records.end()) {
    ++r->second.samples;
  } else if (t.records.size() < kMaxDistinctRecords) {
    t.records.emplace(*s.record, Process::DistinctRecord{1, p.records->decode(s.record->span())});
  } else {
    ++t.records_overflow;
  }
  return true;
}

RecordContext SampledProcesses::context_of(const Sample& s) {
  if (s.slot != slot_ || !s.record) return {};
  auto it = std::find_if(processes_.begin(), processes_.end(),
                         [&](const auto& p) { return !p->exited && p->pid == s.pid; });
  if (it == processes_.end() || !(*it)->records) return {};
  Process& p = **it;
  if (auto known = p.contexts.find(*s.record); known != p.contexts.end()) return known->second;
  RecordContext context = p.records->context_at(s.record->span(), s.record_pointer);
  if (context.settled && p.contexts.size() < kMaxContextsCached) p.contexts.emplace(*s.record, context);
  return context;
}

std::size_t SampledProcesses::followed() const {
  return static_cast<std::size_t>(std::count_if(processes_.begin(), processes_.end(), [](const auto& p) { return !p->exited; }));
}

std::size_t SampledProcesses::tracked() const {
  return static_cast<std::size_t>(std::count_if(processes_.begin(), processes_.end(), [](const auto& p) { return p->tracked; }));
}

std::uint64_t SampledProcesses::samples() const {
  std::uint64_t n = 0;
  for (const auto& p : processes_) n += p->samples;
  return n;
}

std::uint64_t SampledProcesses::records_read() const {
  std::uint64_t n = 0;
  for (const auto& p : processes_) n += p->records_read;
  return n;
}

nlohmann::json SampledProcesses::to_json() const {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& p : processes_) {
    nlohmann::json threads = nlohmann::json::array();
    for (const auto& [tid, t] : p->threads) {
      nlohmann::json records = nlohmann::json::array();
      for (const auto& [bytes, r] : t.records)
        records.push_back({{"samples", r.samples}, {"hex", to_hex(bytes.span())}, {"record", r.decoded}});
      threads.push_back({{"tid", tid},
                         {"samples", t.samples},
                         {"statuses", counts_json(t.statuses)},
                         {"records", std::move(records)},
                         {"records_overflow", t.records_overflow}});
    }
    nlohmann::json j = {{"pid", p->pid},
                        {"protocol", p->protocol ? nlohmann::json(std::string(p->protocol->id())) : nlohmann::json(nullptr)},
                        {"state", p->state},
                        {"exited", p->exited},
                        {"records_at", p->records ? p->records->description() : nlohmann::json(nullptr)},
                        {"samples", p->samples},
                        {"records_read", p->records_read},
                        {"statuses", counts_json(p->statuses)},
                        {"threads", std::move(threads)},
                        {"threads_overflow", p->threads_overflow}};
    if (p->exited) j["exit_reason"] = p->exit_reason;
    if (!p->protocol) j["process_context_only"] = {{"resource", p->resource}};
    if (auto context = p->context.to_json(); !context.is_null()) j["process_context"] = std::move(context);
    out.push_back(std::move(j));
  }
  return out;
}

std::optional<std::string> SampledProcesses::nothing_readable(pid_t pid) const {
  const Process* p = nullptr;
  for (const auto& q : processes_)
    if (q->pid == pid) p = q.get();  // the latest, when it exec'd and was followed again
  if (!p) return std::nullopt;
  const std::string who = "pid " + std::to_string(pid) + ": ";
  if (!p->protocol) return who + p->state;
  if (!p->ever_tracked) return who + "never sampled: " + p->state;
  if (p->samples > 0 && p->records_read == 0)
    return who + "sampled " + std::to_string(p->samples) + " times, but none of its threads had a record";
  return std::nullopt;
}

// ---- sample_records ---------------------------------------------------------------------

Expected<nlohmann::json> sample_records(Sampler& sampler, const std::vector<pid_t>& pids,
                                        std::chrono::milliseconds duration, const std::atomic<bool>& stop) {
  process_context::PublicationResolver resolver;
  SampledProcesses processes(sampler, resolver);
  NamedProcesses named;  // a number whose process exited names no process of ours
  const auto started = Clock::now();
  const auto end = started + duration;
  auto next_rescan = started;
  auto next_context_look = started;
  auto callback = [&](const Sample& s) { (void)processes.on_sample(s); };
  std::optional<Error> failure;
  for (;;) {
    auto now = Clock::now();
    if (stop.load() || now >= end) break;
    if (now >= next_rescan) {
      processes.rescan();
      for (pid_t pid : pids)
        if (!processes.follows(pid) && named.still_named(pid)) (void)processes.examine(pid, true);
      next_rescan = now + kRescanInterval;
    }
    if (now >= next_context_look) {
      resolver.refresh_all();
      next_context_look = now + kContextLookInterval;
    }
    const auto wake = sampler.backlog() ? now : std::min({next_rescan, next_context_look, end});
    auto wait = std::clamp(std::chrono::duration_cast<std::chrono::milliseconds>(wake - Clock::now()),
                           std::chrono::milliseconds(0), std::chrono::milliseconds(100));
    if (auto polled = sampler.poll(callback, wait); !polled) {
      failure = polled.error();
      break;
    }
  }
  if (!failure)
    if (auto read = read_what_was_sampled(sampler, callback, stop); !read) failure = read.error();
  if (failure) return *failure;
  nlohmann::json counters = nlohmann::json::object();
  for (const auto& [k, v] : sampler.counters().named()) counters[k] = v;
  return nlohmann::json{{"reader", sampler.name()},
                        {"elapsed_s", std::chrono::duration<double>(Clock::now() - started).count()},
                        {"sampler", counters},
                        {"processes", processes.to_json()}};
}

}  // namespace tracecorr

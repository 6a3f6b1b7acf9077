#include "tracecorr/host_agent.hpp"
#include "tracecorr/procfs.hpp"

#include <algorithm>
#include <cinttypes>
#include <deque>
#include <set>

#include "tracecorr/text.hpp"
#include "tracecorr/discovery.hpp"
#include "tracecorr/plugin_registry.hpp"
#include "tracecorr/sampled_processes.hpp"

namespace tracecorr {
namespace {

using Clock = std::chrono::steady_clock;

// How often the loop looks at the process contexts it follows (one 8-byte
// read each): often enough that a publication is read while it is current
// (the SDK frees the one it replaces), without a read per send tick.
constexpr auto kAgentContextLookInterval = std::chrono::milliseconds(10);
// The longest the loop examines processes before it polls the sampler again
// and looks at the clock (a rescan goes on at the next turn).
constexpr auto kAgentRescanSlice = std::chrono::milliseconds(20);

PluginRegistry<AgentHook>& hook_registry() {
  static PluginRegistry<AgentHook> r;
  return r;
}

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

double seconds(auto d) { return std::chrono::duration<double>(d).count(); }

// The resource each observation carries: `process.pid` as the sampler saw it,
// with the resource attributes of the process context publication the
// sample's context timestamp names (the first of duplicate keys). Made once
// per process and publication and shared by its observations.
class ObservedResources {
 public:
  std::shared_ptr<const otlp::Attributes> of(const Sample& s, process_context::PublicationResolver& resolver) {
    std::shared_ptr<const process_context::Publication> publication;
    // 0: being written, nothing to name (but for a reader that ignores the
    // seqlock, the reader defect ignores-seqlock: whatever the header points at).
    if (s.context_published_at && (*s.context_published_at != 0 || !resolver.keeps_seqlock())) {
      auto resolved = resolver.resolve(s.pid, *s.context_published_at);
      if (resolved.kind == process_context::ResolutionKind::Resolved && resolved.publication &&
          resolved.publication->payload)
        publication = resolved.publication;
    }
    // None: a key no publication has (under ignores-seqlock one has 0).
    const std::uint64_t published_at = publication ? publication->published_at_ns : kNoPublication;
    auto known = by_pid_.find(s.pid);
    if (known != by_pid_.end() && known->second.published_at == published_at) return known->second.attributes;
    if (by_pid_.size() >= kMaxProcesses) by_pid_.clear();  // --all over a host of short-lived processes
    otlp::Attributes attributes;
    if (publication)
      for (const auto& kv : publication->payload->resource) attributes.emplace(kv.key, kv.value);
    attributes.insert_or_assign("process.pid", otlp::AttributeValue(static_cast<std::int64_t>(s.pid)));
    auto made = std::make_shared<const otlp::Attributes>(std::move(attributes));
    by_pid_[s.pid] = {published_at, made};
    return made;
  }

 private:
  static constexpr std::size_t kMaxProcesses = 4096;
  static constexpr std::uint64_t kNoPublication = ~std::uint64_t{0};
  struct Known {
    std::uint64_t published_at = 0;
    std::shared_ptr<const otlp::Attributes> attributes;
  };
  std::map<pid_t, Known> by_pid_;
};

// One interrupt of a process tracked in several layout slots yields one
// Sample per slot, with the same pid, tid and time: it is handed on as one
// observation, the slots' contexts merged (the first link and its flags,
// every attribute, the first of a key kept), so a process that publishes two
// protocols is not counted twice. The slots of one interrupt are written one
// after the other, but the BPF ring is shared by every CPU: another CPU's
// samples can come between them (4 of 602 interrupts exported twice beside
// stress-ng when only the last sample was held). So the last kPending
// interrupts wait for their other slots; the oldest goes out when a newer one
// needs its place, and all at flush() (the run's end).
class InterruptMerger {
 public:
  using Emit = std::function<void(const Sample&, RecordContext)>;
  void add(const Sample& s, RecordContext context, const Emit& emit) {
    for (auto& p : pending_)
      if (p.sample.pid == s.pid && p.sample.tid == s.tid && p.sample.time_ns == s.time_ns && p.sample.slot != s.slot) {
        merge(p.context, std::move(context));
        return;
      }
    if (pending_.size() == kPending) emit_oldest(emit);
    pending_.push_back(Pending{s, std::move(context)});
  }
  void flush(const Emit& emit) {
    while (!pending_.empty()) emit_oldest(emit);
  }

 private:
  // Far more than the samples other CPUs can write between two slots' of one interrupt.
  static constexpr std::size_t kPending = 64;
  struct Pending {
    Sample sample;
    RecordContext context;
  };
  void emit_oldest(const Emit& emit) {
    Pending oldest = std::move(pending_.front());
    pending_.pop_front();
    emit(oldest.sample, std::move(oldest.context));
  }
  static void merge(RecordContext& into, RecordContext other) {
    if (!into.link && other.link) {
      into.link = other.link;
      into.trace_flags = other.trace_flags;
    }
    if (other.attributes && !other.attributes->empty()) {
      otlp::Attributes both = into.attributes ? *into.attributes : otlp::Attributes{};
      both.insert(other.attributes->begin(), other.attributes->end());  // a key already there is kept
      into.attributes = std::make_shared<const otlp::Attributes>(std::move(both));
    }
  }
  std::deque<Pending> pending_;
};

}  // namespace

void register_agent_hook(const AgentHook& hook) { hook_registry().add(hook); }
std::vector<const AgentHook*> agent_hooks() { return hook_registry().all(); }

namespace {
PluginRegistry<std::vector<ReaderDefect>>& declared_defects() {
  static PluginRegistry<std::vector<ReaderDefect>> registry;
  return registry;
}
}  // namespace

void declare_reader_defects(const std::vector<ReaderDefect>& defects) { declared_defects().add(defects); }

std::vector<ReaderDefect> known_reader_defects() {
  std::vector<ReaderDefect> known;
  auto add = [&](const ReaderDefect& d) {
    auto same = std::find_if(known.begin(), known.end(), [&](const ReaderDefect& k) { return k.name == d.name; });
    if (same == known.end())
      known.push_back(d);
    else if (same->rules.find(d.rules) == std::string::npos)  // another protocol's rule for the same defect
      same->rules += "; " + d.rules;
  };
  for (const SampledProtocol* protocol : sampled_protocols())
    for (const auto& d : protocol->reader_defects()) add(d);
  for (const AgentHook* hook : agent_hooks())
    for (const auto& d : hook->reader_defects()) add(d);
  for (const auto* declared : declared_defects().all())
    for (const auto& d : *declared) add(d);
  return known;
}

struct HostAgent::Impl {
  Impl(Sampler& sampler, SampledProcesses::Notice notice, const ReaderDefects& defects)
      : contexts(resolver_options(defects)),
        sampled(sampler, contexts, std::move(notice), HostAgent::kSampledProcessesSlot, defects) {}
  process_context::PublicationResolver contexts;  // samples' context timestamps -> publications
  std::vector<std::unique_ptr<AgentPart>> parts;  // the hooks' (Elastic v1: correlation and delivery)
  // Processes that publish a sampled protocol (OTEP 4947's thread context),
  // held by a part or not: listed per thread, nothing sent.
  SampledProcesses sampled;
  std::set<pid_t> noticed_nothing;  // named processes said to publish nothing (yet): said once
  std::deque<pid_t> rescan_work;    // the rescan's candidates not examined yet
  std::set<pid_t> examined;         // named processes looked at (at most as many as named)
  NamedProcesses named;             // what each --pid number named when first found
  std::set<pid_t> replaced;         // named numbers now held by another process: said once
  std::uint64_t unknown_pid_samples = 0;
  ObservedResources resources;     // of the observations handed to HostAgentOptions::observe
  InterruptMerger interrupts;      // an interrupt's samples in several slots, handed on as one
  std::uint64_t observed = 0;
  Clock::time_point started;
  // When the duration's clock started: at once, or with --pid once the first
  // rescan had examined every named process.
  std::optional<Clock::time_point> clock_started;
  std::optional<Clock::time_point> end;
  std::string sampler_error;
  // The run's own timeline, for the summary: when sampling stopped, when the final reads ended, and
  // how long the loop's thread waited for a CPU meanwhile.
  std::optional<Clock::time_point> sampling_ended, all_read, finished;
  std::chrono::milliseconds final_reads_limit{};
  std::chrono::nanoseconds loop_waited_for_cpu{};

  // The loop's steps (run()).
  struct Loop;
};

HostAgent::HostAgent(HostAgentOptions options, Sampler& sampler)
    : options_(std::move(options)),
      sampler_(sampler),
      impl_(std::make_unique<Impl>(sampler, [this](const std::string& text) { notice(text); },
                                   options_.reader_defects)) {}
HostAgent::~HostAgent() = default;

void HostAgent::notice(const std::string& text) const {
  // Paths and errors come from targets: control characters are escaped.
  if (options_.log) std::fprintf(options_.log, "tracecorr agent: %s\n", tracecorr::printable_text(text).c_str());
}

Expected<AgentRun> HostAgent::make_run() {
  if (next_part_slot_ >= kSampledProcessesSlot)
    return make_error("a process holds " + std::to_string(kLayoutsPerProcess) + " layouts, the last for the sampled " +
                      "protocols: no layout slot left for another protocol's part");
  return AgentRun{sampler_, impl_->contexts, [this](const std::string& text) { notice(text); }, next_part_slot_++,
                  options_.reader_defects};
}

void HostAgent::add_part(std::unique_ptr<AgentPart> part) { impl_->parts.push_back(std::move(part)); }

Status HostAgent::add_registered_parts(const AgentSettings& settings) {
  for (const AgentHook* hook : agent_hooks()) {
    AgentSettings own;
    for (const auto& s : hook->settings()) {
      auto given = settings.find(s.name);
      own[s.name] = given == settings.end() ? s.default_value : given->second;
    }
    auto run = make_run();
    if (!run) return make_error(std::string(hook->id()) + ": " + run.error().message());
    auto part = hook->start(own, std::move(*run));
    if (!part) return make_error(std::string(hook->id()) + ": " + part.error().message());
    add_part(std::move(*part));
  }
  return Ok{};
}

// ---- discovery ---------------------------------------------------------------------

// The loop's state and steps: one object per run() so each step is short and named.
struct HostAgent::Impl::Loop {
  HostAgent& agent;
  Impl& impl;
  const std::atomic<bool>& stop;
  Clock::time_point end = Clock::time_point::max();
  Clock::time_point next_rescan, next_summary, next_context_look;
  bool rescanning = false;
  std::chrono::milliseconds patience{};
  Sampler::Callback callback;
  InterruptMerger::Emit emit;  // to HostAgentOptions::observe

  Loop(HostAgent& a, const std::atomic<bool>& s) : agent(a), impl(*a.impl_), stop(s) {
    impl.started = Clock::now();
    next_rescan = next_context_look = impl.started;
    next_summary = impl.started + agent.options_.summary_interval;
    callback = [this](const Sample& sample) { on_sample(sample); };
    emit = [this](const Sample& s, RecordContext context) {
      ++impl.observed;
      agent.options_.observe(AgentObservation{s, std::move(context), impl.resources.of(s, impl.contexts)});
    };
    for (const auto& part : impl.parts) patience = std::max(patience, part->final_patience());
    patience = std::min(patience, kFinalPatience);
  }

  // The duration is how long what was named is sampled: examining the named
  // processes may take longer than it on a starved machine (an emulated
  // guest with every CPU busy took 4 s for 11), and a run that ends first
  // samples nothing of them.
  void start_clock(Clock::time_point at) {
    impl.clock_started = at;
    if (!agent.options_.duration) return;
    end = at + *agent.options_.duration;
    impl.end = end;
    for (auto& part : impl.parts) part->ends_at(end + patience);
  }

  void begin_rescan() {
    for (auto& part : impl.parts) part->retire_gone();
    impl.sampled.rescan();  // retires those that exited or exec'd: examined afresh below
    std::set<pid_t> candidates(agent.options_.pids.begin(), agent.options_.pids.end());
    if (agent.options_.all)
      for (pid_t pid : list_processes()) candidates.insert(pid);
    impl.rescan_work.assign(candidates.begin(), candidates.end());
  }

  // Examines the rescan's candidates until `until`: with --all on a host of
  // thousands of processes a whole rescan takes longer than the loop may stay
  // away from the sampler and the run's end. Returns true when it is done.
  bool continue_rescan(Clock::time_point until) {
    auto& work = impl.rescan_work;
    while (!work.empty() && Clock::now() < until) {
      const pid_t pid = work.front();
      work.pop_front();
      const auto& named = agent.options_.pids;
      examine(pid, std::find(named.begin(), named.end(), pid) != named.end());
    }
    return work.empty();
  }

  // Every part, and SampledProcesses, may hold the same process: it may
  // publish several protocols. A process a part holds is not followed by
  // SampledProcesses for its process context alone (the part follows it).
  void examine(pid_t pid, bool explicit_pid) {
    if (explicit_pid) impl.examined.insert(pid);
    if (explicit_pid && !impl.named.still_named(pid)) {
      if (impl.replaced.insert(pid).second)
        agent.notice("pid " + std::to_string(pid) + ": the process named by --pid exited and the number now names "
                     "another process: not followed");
      return;
    }
    bool held = false;
    for (auto& part : impl.parts)
      if (part->examine(pid, explicit_pid)) {
        held = true;
        break;
      }
    // A followed process is refreshed by SampledProcesses' own rescan.
    if (impl.sampled.follows(pid) || impl.sampled.examine(pid, explicit_pid, !held) || held) return;
    if (explicit_pid && impl.noticed_nothing.insert(pid).second)
      agent.notice("pid " + std::to_string(pid) + ": publishes none of the protocols tracecorr agent samples (yet); will look again");
  }

  // By the sample's layout slot: SampledProcesses' own, or the part's whose it is.
  void on_sample(const Sample& s) {
    if (s.slot == kSampledProcessesSlot) {
      if (!impl.sampled.on_sample(s)) {
        ++impl.unknown_pid_samples;
        return;
      }
      if (agent.options_.observe) observe(s, impl.sampled.context_of(s));
      return;
    }
    for (auto& part : impl.parts)
      if (part->on_sample(s)) {
        if (agent.options_.observe) observe(s, part->context_of(s));
        return;
      }
    ++impl.unknown_pid_samples;
  }

  // Every sample a protocol took is handed on, with or without a context, one per interrupt.
  void observe(const Sample& s, RecordContext context) { impl.interrupts.add(s, std::move(context), emit); }
  void flush_observations() {
    if (agent.options_.observe) impl.interrupts.flush(emit);
  }

  // One turn: rescan (a slice of it), the contexts, one poll, the live line. False: the sampler failed.
  Status turn() {
    auto now = Clock::now();
    if (!rescanning && now >= next_rescan) {
      begin_rescan();
      rescanning = true;
    }
    if (rescanning && continue_rescan(std::min(end, now + kAgentRescanSlice))) {
      rescanning = false;
      next_rescan = Clock::now() + agent.options_.rescan_interval;
      if (!impl.clock_started) start_clock(Clock::now());
    }
    now = Clock::now();
    // Publications can be read only while current: look before the samples come.
    if (now >= next_context_look) {
      impl.contexts.refresh_all();
      next_context_look = now + kAgentContextLookInterval;
    }
    // A backlog: samples come faster than this loop takes them; take the next batch at once.
    const auto wake = rescanning || agent.sampler_.backlog()
                          ? now
                          : std::min({next_rescan, next_summary, end, next_context_look});
    const auto wait = std::clamp(std::chrono::ceil<std::chrono::milliseconds>(wake - now),
                                 std::chrono::milliseconds(0), std::chrono::milliseconds(100));
    if (auto polled = agent.sampler_.poll(callback, wait); !polled) return polled.error();
    if (Clock::now() >= next_summary) {
      agent.live_summary(false);
      next_summary = Clock::now() + agent.options_.summary_interval;
    }
    return Ok{};
  }

  // What was sampled until now is read (all of it, unless stopped), then what
  // is pending goes out and the parts' waits end.
  Status wind_down(Status result, std::chrono::nanoseconds waited_at_start) {
    impl.sampling_ended = Clock::now();
    impl.loop_waited_for_cpu = waited_for_cpu() - waited_at_start;
    if (auto read = read_what_was_sampled(agent.sampler_, callback, stop); !read && result) {
      impl.sampler_error = read.error().message();
      result = read.error();
    }
    flush_observations();
    impl.all_read = Clock::now();
    impl.final_reads_limit = patience;
    for (auto& part : impl.parts) part->finish(patience);
    impl.finished = Clock::now();
    agent.live_summary(true);
    return result;
  }
};

Status HostAgent::run(const std::atomic<bool>& stop) {
  Impl::Loop loop(*this, stop);
  if (options_.pids.empty()) loop.start_clock(impl_->started);
  const auto waited_at_start = waited_for_cpu();
  Status result = Ok{};
  // Sends happen on the parts' own threads: this loop only samples and rescans.
  while (!stop.load() && Clock::now() < loop.end) {
    if (result = loop.turn(); !result) {
      impl_->sampler_error = result.error().message();
      break;
    }
  }
  return loop.wind_down(std::move(result), waited_at_start);
}

// ---- the live line ------------------------------------------------------------------

namespace {

// The followed contexts of every part's processes, summed up for people.
struct ContextFigures {
  std::size_t with_context = 0, resources = 0;
  std::uint64_t resolved = 0, being_written = 0, other = 0;
  void add(const FollowedContext& context) {
    const auto& tally = context.tally();
    if (tally.samples() == 0) return;
    ++with_context;
    resources += tally.resources();
    resolved += tally.resolved();
    being_written += tally.being_written();
    other += tally.samples() - tally.resolved() - tally.being_written();
  }
  std::string text() const {
    if (with_context == 0) return "";
    return " | process contexts: " + std::to_string(resources) + " resources, " + std::to_string(resolved) +
           " samples attributed, " + std::to_string(being_written) + " while being written, " +
           std::to_string(other) + " unattributed";
  }
};

std::string resource_notice(pid_t pid, const nlohmann::json& r) {
  auto text = [](const nlohmann::json& v) { return v.is_null() ? std::string("(none)") : v.get<std::string>(); };
  return "pid " + std::to_string(pid) + ": resource service.name=" + text(r["service_name"]) +
         " service.instance.id=" + text(r["service_instance_id"]) + ": " +
         std::to_string(r["samples"].get<std::uint64_t>()) + " samples in " +
         std::to_string(r["publications"].size()) + " publications";
}

}  // namespace

void HostAgent::live_summary(bool final_line) const {
  if (!options_.log) return;
  std::size_t processes = 0, sampling = 0;
  std::string parts_text;
  ContextFigures contexts;
  for (const auto& part : impl_->parts) {
    processes += part->processes();
    sampling += part->sampling();
    parts_text += " | " + part->live_text();
    part->each_context([&](pid_t, const FollowedContext& c) { contexts.add(c); });
  }
  std::string records_text;
  if (impl_->sampled.followed() > 0 || impl_->sampled.samples() > 0)
    records_text = " | thread records: " + std::to_string(impl_->sampled.followed()) + " processes (" +
                   std::to_string(impl_->sampled.tracked()) + " sampling), " +
                   std::to_string(impl_->sampled.samples()) + " samples, " +
                   std::to_string(impl_->sampled.records_read()) + " with a record";
  std::fprintf(options_.log, "tracecorr agent: %s%.1fs processes %zu sampling %zu%s | sampler lost %" PRIu64 "%s%s\n",
               final_line ? "final " : "", seconds(Clock::now() - impl_->started), processes, sampling,
               parts_text.c_str(), sampler_.counters().lost, contexts.text().c_str(), records_text.c_str());
  if (final_line) notice_several_protocols();
  if (final_line)
    for (const auto& part : impl_->parts)
      part->each_context([&](pid_t pid, const FollowedContext& c) {
        if (c.tally().samples() == 0) return;
        const nlohmann::json tally = c.tally().to_json();  // the loop below must not range over a temporary's member
        for (const auto& r : tally["resources"]) notice(resource_notice(pid, r));
      });
  std::fflush(options_.log);
}

// A process that publishes several protocols is sampled under each: said
// with each protocol's own count, from the summary's process list.
void HostAgent::notice_several_protocols() const {
  std::map<pid_t, std::map<std::string, std::uint64_t>> under;  // pid -> protocol -> samples (an exec'd pid's images summed)
  const nlohmann::json listed = summary();  // the loop must not range over a temporary's member
  for (const auto& p : listed["processes"]) {
    if (!p.contains("pid") || !p["protocol"].is_string() || !p["samples"].is_number_unsigned()) continue;
    under[p["pid"].get<pid_t>()][p["protocol"].get<std::string>()] += p["samples"].get<std::uint64_t>();
  }
  for (const auto& [pid, protocols] : under) {
    if (protocols.size() < 2) continue;
    std::string text;
    for (const auto& [protocol, samples] : protocols)
      text += (text.empty() ? "" : ", ") + protocol + " (" + std::to_string(samples) + " samples)";
    notice("pid " + std::to_string(pid) + ": sampled under " + std::to_string(protocols.size()) + " protocols: " + text);
  }
}

// ---- what was read ------------------------------------------------------------------

std::vector<std::string> HostAgent::nothing_readable() const {
  std::vector<std::string> out;
  for (pid_t pid : options_.pids) {
    const std::string who = "pid " + std::to_string(pid) + ": ";
    if (!impl_->examined.count(pid)) {
      out.push_back(who + "not examined: the agent was stopped first");
      continue;
    }
    const AgentPart* holder = nullptr;
    for (const auto& part : impl_->parts)
      if (part->ever_held(pid)) holder = part.get();
    if (holder) {
      if (auto why = holder->nothing_readable(pid)) out.push_back(who + *why);
    } else if (impl_->sampled.ever_followed(pid)) {
      if (auto why = impl_->sampled.nothing_readable(pid))
        out.push_back(*why + (impl_->sampled.context_only(pid) ? "; " + not_published_text() : std::string()));
    } else {
      out.push_back(who + "publishes none of the protocols tracecorr agent samples (" + not_published_text() +
                    ": no records published; nor an OTel process context)");
    }
  }
  return out;
}

// "<hook>: no library ..., <sampled protocol>, ...": what the agent looked for.
std::string HostAgent::not_published_text() const {
  std::string text;
  for (const auto& part : impl_->parts) text += (text.empty() ? "" : ", ") + part->not_published();
  for (const auto* protocol : sampled_protocols()) text += (text.empty() ? "" : ", ") + std::string(protocol->id());
  return text;
}

// ---- summary ------------------------------------------------------------------------

nlohmann::json HostAgent::summary() const {
  using nlohmann::json;
  json out = {{"reader", sampler_.name()},
              {"frequency_hz", options_.frequency_hz},
              {"elapsed_s", seconds(Clock::now() - impl_->started)},
              {"totals", {{"samples", 0}, {"unknown_pid_samples", impl_->unknown_pid_samples}}},
              {"processes", json::array()}};
  if (auto timeline = timeline_json(); !timeline.is_null()) out["timeline"] = std::move(timeline);
  if (options_.observe) out["totals"]["observations"] = impl_->observed;  // samples handed on for export
  // A defective reader says so in its data too (conformance kill matrices: --reader-defect).
  out["reader_defects"] = options_.reader_defects.names();
  for (const auto& part : impl_->parts) part->summarize(out);
  // Processes read for a sampled protocol's records: per thread what was read (nothing is sent to them).
  for (auto& j : impl_->sampled.to_json()) {
    out["totals"]["samples"] = out["totals"]["samples"].get<std::uint64_t>() + j["samples"].get<std::uint64_t>();
    out["processes"].push_back(std::move(j));
  }
  json sampler = json::object();
  for (const auto& [k, v] : sampler_.counters().named()) sampler[k] = v;
  out["sampler"] = std::move(sampler);
  if (!impl_->sampler_error.empty()) out["sampler_error"] = impl_->sampler_error;
  return out;
}

const watch::ActiveTraceOf* HostAgent::trace_of(const Sample& sample) const {
  // A process publishing two protocols: a record read by SampledProcesses' layout is not the part's.
  if (sample.slot == kSampledProcessesSlot) return nullptr;
  for (const auto& part : impl_->parts)
    if (const auto* of = part->trace_of(sample.pid)) return of;
  return nullptr;
}

conform::StacksCaption HostAgent::stacks_caption(const Sample& sample) const {
  if (sample.slot == kSampledProcessesSlot) return {};
  for (const auto& part : impl_->parts)
    if (part->trace_of(sample.pid)) return part->stacks_caption();
  return {};
}

nlohmann::json HostAgent::timeline_json() const {
  using nlohmann::json;
  if (!impl_->sampling_ended || !impl_->finished) return nullptr;
  return {{"duration_s", options_.duration ? json(seconds(*options_.duration)) : json(nullptr)},
          {"examining_s", seconds(impl_->clock_started.value_or(*impl_->sampling_ended) - impl_->started)},
          {"sampling_s", seconds(*impl_->sampling_ended - impl_->started)},
          {"loop_waited_for_cpu_s", seconds(impl_->loop_waited_for_cpu)},
          {"reading_rest_s", seconds(*impl_->all_read - *impl_->sampling_ended)},
          {"final_reads_s", seconds(*impl_->finished - *impl_->all_read)},
          {"final_reads_limit_s", seconds(impl_->final_reads_limit)},
          {"means", "examining_s: from start until every process named by --pid was examined once, when the "
                    "duration's clock started (0 without --pid); sampling_s: from start until the loop stopped "
                    "sampling (a rescan is examined in slices, so it stops at examining_s + duration_s unless the "
                    "machine kept its thread from a CPU: loop_waited_for_cpu_s); reading_rest_s: then reading "
                    "what was sampled and not yet read (no more is taken meanwhile); final_reads_s: then "
                    "offering what was pending and awaiting the agents' reads, at most final_reads_limit_s"}};
}

}  // namespace tracecorr

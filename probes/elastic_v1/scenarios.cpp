#include "scenarios.hpp"

#include <algorithm>
#include <cstring>
#include <random>
#include <set>
#include <stdexcept>
#include <thread>

#include "tracecorr/report/flames.hpp"
#include "tracecorr/watch/activity_clock.hpp"
#include "tracecorr/sampler.hpp"
#include "channel.hpp"
#include "elastic_v1/library.hpp"
#include "elastic_v1/registry.hpp"

namespace tracecorr::elastic_v1 {
namespace {

using namespace std::chrono_literals;

std::mt19937_64& rng() {
  static std::mt19937_64 engine{std::random_device{}()};
  return engine;
}

template <std::size_t N>
std::array<std::uint8_t, N> random_id() {
  std::array<std::uint8_t, N> id{};
  for (auto& b : id) b = static_cast<std::uint8_t>(rng()());
  id[0] |= 1;  // never all zero
  return id;
}

Millis scaled(const ScenarioOptions& o, Millis d) {
  return Millis(static_cast<long long>(static_cast<double>(d.count()) * o.time_scale));
}

using TransactionKey = std::pair<TraceId, SpanId>;

Correlation correlation_for(const TransactionKey& t, const StackTraceId& stack, std::uint16_t count) {
  Correlation c;
  c.trace_id = t.first;
  c.transaction_id = t.second;
  c.stack_trace_id = stack;
  c.count = count;
  return c;
}

// True once kWindowSpans spans arrived well after the agent read the latest
// registration (so they were exported under it), or when nothing was sent.
constexpr std::size_t kWindowSpans = 5;
constexpr Millis kWindowMargin{300};  // more than the judges' kMargin (150 ms)
// The wait for those spans ends after kWindowPatience of the agent's own time
// (wall minus its longest wait for a CPU: ActivityClock), never past
// kWindowCeiling of wall time. A starved agent (its own autogroup beside a
// busy session, a loaded CI machine) exports late, not never: 8 s of wall
// time ended its windows empty, and the rules they judge went unjudged.
constexpr Millis kWindowPatience{8000};
constexpr Millis kWindowCeiling{30000};
bool still_patient(const watch::ActivityClock& waited) {
  return !waited.past_ceiling() && !waited.quiet_for(kWindowPatience);
}
bool exported_under_latest_registration(Session& s, Channel& ch) {
  auto regs = ch.registrations();
  if (regs.empty() || !regs.back().sent()) return true;
  if (!regs.back().taken_up_at) return false;
  // The judges' window ends a margin before the next message: count only
  // what arrived a margin ago.
  auto from = *regs.back().taken_up_at + kWindowMargin, to = std::chrono::system_clock::now() - kWindowMargin;
  // Looked at in place (a zero wait), not copied: this runs every 50-100 ms.
  return s.receiver().wait_for(
      [&](const std::vector<otlp::ReceivedSpan>& spans) {
        std::size_t within = 0;
        for (const auto& span : spans) within += span.received_at_system >= from && span.received_at_system <= to;
        return within >= kWindowSpans;
      },
      Millis(0));
}

// Sleeps for `at_least`, then on until exported_under_latest_registration, or
// the agent's patience (still_patient, from before the sleep) runs out.
void sleep_until_exported(Session& s, Channel& ch, Millis at_least) {
  watch::ActivityClock waited(s.pid(), kWindowCeiling);
  s.sleep(at_least);
  while (still_patient(waited) && !exported_under_latest_registration(s, ch)) s.sleep(50ms);
}

// A launched agent that died (the message battery crashes some) leaves
// nothing to drive: the phases after it would only wait out their patience.
// The judges find the death in the session's evidence.
bool launched_target_died(Session& s) { return s.launched() && !s.target_alive(); }

// Sends correlations for transactions as they become active, in the shape the
// personality dictates, each with fresh stack ids so judges can attribute
// every id to the one message that carried it.
class CorrelationTraffic {
 public:
  CorrelationTraffic(Session& s, Channel& ch, const ScenarioOptions& o) : s_(s), ch_(ch), o_(o) {}

  // Runs for `duration`, targeting at most `max_transactions` new transactions.
  // expected_per_count: false when the agent must ignore the messages.
  void pump(Millis duration, const std::string& requirement, bool attach_expected, std::size_t max_transactions = 12) {
    auto* records = s_.records();
    auto end = Clock::now() + duration;
    std::size_t targeted = 0;
    while (Clock::now() < end) {
      if (records && ch_.can_send() && targeted < max_transactions) {
        for (const auto& t : records->active_contexts()) {
          if (!t.sampled() || targeted >= max_transactions) continue;
          TransactionKey key{t.trace_id, t.context_id};
          if (!targeted_.insert(key).second) continue;
          send_pattern(key, requirement, attach_expected);
          ++targeted;
        }
      }
      std::this_thread::sleep_for(3ms);
    }
  }

  // Pumps for `at_least`, then on until spans exported under the latest
  // registration have arrived (exported_under_latest_registration), or the
  // agent's patience (still_patient) runs out: an exporter that batches every
  // 5 s (the OTel SDK default) or a starved agent otherwise leaves the
  // registration's window without a span to judge it by.
  void pump_until_exported(Millis at_least, const std::string& requirement) {
    watch::ActivityClock waited(s_.pid(), kWindowCeiling);
    pump(at_least, requirement, true);
    while (still_patient(waited) && !exported_under_latest_registration(s_, ch_) && !launched_target_died(s_))
      pump(100ms, requirement, true, 1);
  }

  void reserve(const TransactionKey& key) { targeted_.insert(key); }
  bool taken(const TransactionKey& key) const { return targeted_.count(key) != 0; }

 private:
  // Spec: the reference's own example (A x2, B x1, A x1). eBPF profiler: the
  // same samples, one message each with count 1.
  void send_pattern(const TransactionKey& key, const std::string& requirement, bool attach_expected) {
    auto a = random_id<16>(), b = random_id<16>();
    auto expect = [&](unsigned n) { return attach_expected ? n : 0u; };
    if (settings_of(o_).personality == Personality::Spec) {
      ch_.send_correlation(correlation_for(key, a, 2), requirement, "correlation (stack A, count 2)", expect(2));
      ch_.send_correlation(correlation_for(key, b, 1), requirement, "correlation (stack B, count 1)", expect(1));
      ch_.send_correlation(correlation_for(key, a, 1), requirement, "correlation (stack A again, count 1)", expect(1));
    } else {
      for (const auto* which : {"A", "B", "A", "A"}) {
        const auto& id = which[0] == 'A' ? a : b;
        ch_.send_correlation(correlation_for(key, id, 1), requirement,
                            std::string("correlation per sample (stack ") + which + ", count 1)", expect(1));
      }
    }
  }

  Session& s_;
  Channel& ch_;
  const ScenarioOptions& o_;
  std::set<TransactionKey> targeted_;
};

// The newest active sampled transaction not yet used by the traffic; failing
// that (a slow target, e.g. under qemu-user, whose live transactions the
// traffic already took), the newest active sampled one: judges key every
// count by (transaction, stack id) and each message has its own stack id, so
// sharing a transaction with the traffic blurs nothing.
std::optional<TransactionKey> fresh_transaction(Session& s, CorrelationTraffic& traffic, Millis wait) {
  auto* records = s.records();
  if (!records) return std::nullopt;
  auto end = Clock::now() + wait;
  std::optional<TransactionKey> shared;
  do {
    auto active = records->active_contexts();
    std::sort(active.begin(), active.end(), [](const auto& x, const auto& y) { return x.first_seen > y.first_seen; });
    shared.reset();  // only the latest poll's transactions are still live
    for (const auto& t : active) {
      TransactionKey key{t.trace_id, t.context_id};
      if (!t.sampled()) continue;
      if (!traffic.taken(key)) {
        traffic.reserve(key);
        return key;
      }
      if (!shared) shared = key;
    }
    std::this_thread::sleep_for(1ms);
  } while (Clock::now() < end);
  if (!shared) {
    // Still nothing live: keep looking a while longer for any active one.
    auto patience = Clock::now() + wait;
    while (!shared && Clock::now() < patience) {
      for (const auto& t : records->active_contexts())
        if (t.sampled()) shared = TransactionKey{t.trace_id, t.context_id};
      std::this_thread::sleep_for(1ms);
    }
  }
  return shared;
}

Registration registration(std::uint16_t minor, std::uint32_t delay, std::string host_id,
                                std::size_t trailing_bytes = 0) {
  Registration r;
  r.minor = minor;
  r.samples_delay_ms = delay;
  r.host_id = std::move(host_id);
  r.trailing.assign(trailing_bytes, 0xA5);
  return r;
}

std::string unique_host_id(const char* stem) { return std::string(stem) + "-" + to_hex(random_id<4>()); }

// MSG-04..07: every truncation, unknown types, trailing bytes, boundary values,
// aimed at one live transaction, with control messages around them that must
// still be counted.
void send_message_battery(Channel& ch, const TransactionKey& t) {
  auto control = [&](const char* when) {
    ch.send_correlation(correlation_for(t, random_id<16>(), 1), "MSG-04",
                       std::string("control correlation ") + when + " the truncated messages", 1u);
  };
  control("before");
  // Each truncated message is recorded with the ids it would carry, expected
  // 0 times; each is followed by a control that must count once. An agent that
  // decodes a short datagram with stale bytes of the previous one shows up as a
  // control counted twice or an id that was never sent whole.
  for (std::size_t len = 0; len < elastic_v1::spec::kMsgCorrelationFixedSize; ++len) {
    auto c = correlation_for(t, random_id<16>(), 1);
    auto bytes = encode(c);
    bytes.resize(len);
    ch.send_correlation(c, "MSG-04",
                       "correlation truncated to " + std::to_string(len) + " of " +
                           std::to_string(elastic_v1::spec::kMsgCorrelationFixedSize) + " bytes",
                       0u, std::move(bytes));
    ch.send_correlation(correlation_for(t, random_id<16>(), 1), "MSG-04",
                       "control correlation after the " + std::to_string(len) + "-byte one", 1u);
  }
  auto reg = encode(registration(elastic_v1::spec::kMsgRegistrationMinor, scenario::kFirstDelayMs, scenario::kTruncatedHostId));
  for (std::size_t len = 0; len < reg.size(); ++len) {
    std::vector<std::uint8_t> bytes(reg.begin(), reg.begin() + static_cast<long>(len));
    ch.send(bytes, "MSG-04", "registration truncated to " + std::to_string(len) + " of " + std::to_string(reg.size()) +
                                " bytes");
  }
  control("after");

  // MSG-05: unknown types and minor 0 carry a correlation's payload; none may count.
  for (std::uint16_t type : {std::uint16_t{0}, std::uint16_t{3}, std::uint16_t{0xFFFF}}) {
    auto c = correlation_for(t, random_id<16>(), 1);
    auto bytes = encode(c);
    std::memcpy(bytes.data() + elastic_v1::spec::kHeaderMessageTypeOffset, &type, sizeof type);
    ch.send_correlation(c, "MSG-05", "unknown message type " + std::to_string(type) + " with a correlation's payload",
                       0u, std::move(bytes));
    ch.send_correlation(correlation_for(t, random_id<16>(), 1), "MSG-05",
                       "control correlation after unknown type " + std::to_string(type), 1u);
  }
  {
    auto c = correlation_for(t, random_id<16>(), 1);
    c.minor = 0;
    ch.send_correlation(c, "MSG-05", "correlation at minor version 0", 0u);
  }

  // MSG-06: a later minor's trailing bytes are ignored; an oversized datagram
  // disturbs nothing (whether it counts is the agent's choice).
  {
    auto c = correlation_for(t, random_id<16>(), 1);
    c.trailing.assign(10, 0x5A);
    ch.send_correlation(c, "MSG-06", "correlation with 10 trailing bytes", 1u);
    c = correlation_for(t, random_id<16>(), 1);
    c.minor = 2;
    c.trailing.assign(4, 0x5A);
    ch.send_correlation(c, "MSG-06", "correlation at minor 2 with 4 trailing bytes", 1u);
    c = correlation_for(t, random_id<16>(), 1);
    c.trailing.assign(60000, 0x00);
    ch.send_correlation(c, "MSG-06", "oversized correlation (60046 bytes)", std::nullopt);
    ch.send_correlation(correlation_for(t, random_id<16>(), 1), "MSG-06", "control correlation after the oversized one",
                       1u);
  }

  // MSG-07: boundary values of every correlation field.
  ch.send_correlation(correlation_for(t, random_id<16>(), 0), "MSG-07", "correlation with count 0", 0u);
  ch.send_correlation(correlation_for({random_id<16>(), random_id<8>()}, random_id<16>(), 1), "MSG-07",
                     "correlation for a transaction the agent never had", std::nullopt);
  ch.send_correlation(correlation_for({TraceId{}, SpanId{}}, random_id<16>(), 1), "MSG-07",
                     "correlation with all-zero trace and transaction ids", std::nullopt);
  ch.send_correlation(correlation_for(t, random_id<16>(), 1), "MSG-07", "control correlation after the boundary values",
                     1u);
}

// MSG-07: boundary values of the registration. Their effect on delay and
// host.id is not specified, so they are not judged, only survived.
void send_boundary_registrations(Channel& ch) {
  const std::uint16_t minor = elastic_v1::spec::kMsgRegistrationMinor;
  for (auto r : {registration(minor, scenario::kFirstDelayMs, ""),
                 registration(minor, scenario::kFirstDelayMs, std::string(elastic_v1::spec::kMsgRegistrationHostIdMaxLength, 'h')),
                 registration(minor, scenario::kFirstDelayMs, std::string("\xff\xfe\xc0\x80", 4)),
                 registration(minor, 0xFFFFFFFFu, "tracecorr-boundary"), registration(minor, 0, "tracecorr-boundary")}) {
    ch.register_profiler(std::move(r), "MSG-07", /*judged=*/false);
    std::this_thread::sleep_for(10ms);
  }
}

// TLS-04 on up to two threads, on a thread of its own (ptrace is per thread).
// A thread starved of CPU (a busy machine) or slow (an emulated guest) may
// update its record only now and then while watched: the watch goes round the
// threads again until it has seen enough updates, or the target has had
// kUpdateOrderPatience rounds' worth of its own time (wall minus its longest
// wait for a CPU) since the last update it saw, or the wall-clock ceiling.
constexpr std::size_t kWantedUpdates = 10;
constexpr int kUpdateOrderPatience = 8;
constexpr int kUpdateOrderCeiling = 40;  // rounds' worth of wall time

std::thread watch_update_order_async(Session& s, Millis per_thread) {
  return std::thread([&s, per_thread] {
    auto* records = s.records();
    if (!records) return;
    std::set<std::uint64_t> seen;
    std::vector<std::pair<pid_t, std::uint64_t>> threads;
    for (const auto& [tid, pointer] : records->record_pointers()) {
      if (pointer == 0 || !seen.insert(pointer).second) continue;
      threads.emplace_back(tid, pointer);
      if (threads.size() == 2) break;
    }
    if (threads.empty()) return;
    watch::ActivityClock activity(s.pid(), kUpdateOrderCeiling * per_thread);
    auto patient = [&] { return !activity.past_ceiling() && !activity.quiet_for(kUpdateOrderPatience * per_thread); };
    std::size_t updates = 0;
    for (std::size_t round = 0; round == 0 || (updates < kWantedUpdates && patient()); ++round) {
      for (const auto& [tid, pointer] : threads) {
        auto report = watch::watch_update_order(s.pid(), tid, elastic_v1::tls_record_layout(), pointer, per_thread, 40);
        if (report && report->updates_seen > 0) updates += report->updates_seen, activity.changed();
        bool failed = !report || !report->conforms();
        s.add_update_order_report(std::move(report));
        if (failed || !s.target_alive()) return;  // the evidence is in; do not watch on
      }
    }
  });
}

// Real stacks of the target for the report's flame graphs: tracecorr's ptrace
// sampler (no BPF needed) stops each thread for a few microseconds at 99 Hz,
// reading its stack and its record, so each sample names the transaction that
// was current. Frames are named while the target is alive (its maps and files
// are needed).
constexpr unsigned kStackSamplingHz = 99;
constexpr Millis kStackSamplingTime{900};

std::thread sample_stacks_async(Session& s, Millis duration) {
  return std::thread([&s, duration] {
    const auto& descriptor = s.tls_descriptor();
    if (!descriptor || descriptor->model != TlsModel::StaticOffset) {
      s.set_stack_samples({"not sampled: the TLS descriptor gives no static thread-pointer offset (TLS-07), so a "
                           "sample could not read the thread's record to name its transaction",
                           {}});
      return;
    }
#if defined(__x86_64__)
    constexpr auto host = elf::Machine::X86_64;
#elif defined(__aarch64__)
    constexpr auto host = elf::Machine::AArch64;
#else
    constexpr auto host = elf::Machine::Other;
#endif
    if (!s.library() || s.library()->elf.machine != host) {
      // Under qemu-user the threads' registers and stacks are qemu's own, not
      // the guest agent's: samples would name qemu's code and misread records.
      s.set_stack_samples({"not sampled: the agent is not native to this host (emulated), so its threads' "
                           "registers and stacks are the emulator's",
                           {}});
      return;
    }
    PtraceSamplerOptions options;
    options.frequency_hz = kStackSamplingHz;
    auto sampler = make_ptrace_sampler(options);
    if (!sampler->track(s.pid(), elastic_v1::tls_record_layout(), PointerSite::tls_offset(descriptor->tp_offset))) return;
    // On a busy machine each stop waits for the thread to be scheduled, so a
    // round takes longer: keep going (up to three times as long) until some
    // samples fell inside transactions.
    constexpr std::size_t kWantedInTransactions = 30;
    std::vector<Sample> raw;
    std::size_t in_transactions = 0;
    auto start = Clock::now();
    auto enough = [&] {
      auto now = Clock::now();
      return now >= start + 3 * duration || (now >= start + duration && in_transactions >= kWantedInTransactions);
    };
    while (!enough() && raw.size() < 20000) {
      auto polled = sampler->poll(
          [&](const Sample& sample) {
            if (report::context_of(sample, active_trace())) ++in_transactions;
            raw.push_back(sample);
          },
          50ms);
      if (!polled) break;
    }
    auto sampled_for = std::chrono::duration_cast<Millis>(Clock::now() - start);
    StackSamples out;
    out.source = "tracecorr's ptrace sampler during session enabled: every thread stopped at " +
                 std::to_string(kStackSamplingHz) + " Hz (wall clock) for " + std::to_string(sampled_for.count()) +
                 " ms after the timing boundary (while the agent drained, so no judged timing was disturbed); "
                 "the transaction is the one in the thread's record at that instant; stacks walked by frame pointers";
    Symbolizer symbols(s.pid());
    for (const auto& r : raw) out.samples.push_back(report::stack_sample_of(r, symbols, active_trace()));
    s.set_stack_samples(std::move(out));
  });
}

void drain(Session& s, Channel& ch, Millis timeout) {
  // Wait until every transaction a message expects to see has been exported.
  std::set<TransactionKey> expected;
  for (const auto& m : ch.sent_messages())
    if (m.transaction && m.expected_count && *m.expected_count > 0) expected.insert(*m.transaction);
  s.receiver().wait_for(
      [&](const std::vector<otlp::ReceivedSpan>& spans) {
        std::size_t found = 0;
        for (const auto& span : spans)
          if (expected.count({span.trace_id, span.span_id})) ++found;
        return found >= expected.size();
      },
      timeout);
}

// Only watching: the update order (TLS-04) and the records and spans the
// agent produces on its own. Nothing is sent.
Status run_enabled_watching(Session& s, Channel& ch, const ScenarioOptions& o) {
  // An agent may wait for a registration before it publishes records (TLS-06):
  // then, and only then, one registration is sent (never in observe-only).
  if (!s.wait_for_records(3000ms) && !o.observe_only && ch.can_send()) {
    ch.register_profiler(registration(elastic_v1::spec::kMsgRegistrationMinor, scenario::kFirstDelayMs,
                                     unique_host_id("tracecorr-host-records")),
                        "TLS-06");
    s.wait_for_records(1500ms);
  }
  if (o.judges("TLS-04")) watch_update_order_async(s, scaled(o, 350ms)).join();
  // TLS-05 needs many transactions read (its evidence minimum): watch longer.
  s.sleep(scaled(o, o.judges("TLS-05") ? 4000ms : 1300ms));
  return Ok{};
}

Status run_enabled(Session& s, Channel& ch, const ScenarioOptions& o) {
  if (!sends_messages(o)) return run_enabled_watching(s, ch, o);
  CorrelationTraffic traffic(s, ch, o);
  s.wait_for_records(3000ms);
  // Unregistered: the default delay applies (DEFER-03); the update order is watched (TLS-04).
  std::thread watcher;
  if (o.judges("TLS-04")) watcher = watch_update_order_async(s, scaled(o, 350ms));
  traffic.pump(scaled(o, 1300ms), "ATTR-04", true);
  if (watcher.joinable()) watcher.join();

  ch.register_profiler(registration(1, scenario::kFirstDelayMs, unique_host_id("tracecorr-host-1"), 8), "MSG-02");
  traffic.pump(scaled(o, 150ms), "ATTR-04", true);
  const bool battery_judged = o.judges("MSG-04") || o.judges("MSG-05") || o.judges("MSG-06") || o.judges("MSG-07");
  if (battery_judged)
    if (auto battery = fresh_transaction(s, traffic, 500ms)) send_message_battery(ch, *battery);
  traffic.pump_until_exported(scaled(o, 800ms), "ATTR-04");
  if (launched_target_died(s)) return Ok{};

  ch.reconnect_socket();  // a profiler restart
  ch.register_profiler(registration(elastic_v1::spec::kMsgRegistrationMinor, scenario::kSecondDelayMs,
                                   unique_host_id("tracecorr-host-2")),
                      "MSG-03");
  traffic.pump_until_exported(scaled(o, 1100ms), "ATTR-04");

  if (o.judges("MSG-07")) {
    auto long_host_id = unique_host_id("tracecorr-host-long");
    long_host_id.resize(scenario::kLongHostIdBytes, 'l');
    ch.register_profiler(registration(elastic_v1::spec::kMsgRegistrationMinor, scenario::kSecondDelayMs, std::move(long_host_id)),
                        "MSG-07");
    traffic.pump_until_exported(scaled(o, 700ms), "ATTR-04");
    send_boundary_registrations(ch);
  }
  if (launched_target_died(s)) return Ok{};
  ch.register_profiler(registration(elastic_v1::spec::kMsgRegistrationMinor, scenario::kFinalDelayMs,
                                   unique_host_id("tracecorr-host-3")),
                      "MSG-07");
  traffic.pump(scaled(o, 700ms), "MSG-07", true);
  // The largest count makes a 65535-element attribute; exporting it disturbs
  // the agent's timing, so it goes last and deferral is not judged after it.
  if (o.judges("MSG-07")) {
    if (auto big = fresh_transaction(s, traffic, 500ms)) {
      s.mark_timing_boundary();
      ch.send_correlation(correlation_for(*big, random_id<16>(), 0xFFFF), "MSG-07", "correlation with count 65535",
                         65535u);
    }
  }
  // Stack samples for the report, while the agent drains: past the timing
  // boundary, so stopping threads cannot disturb any judged deferral.
  auto sampling = sample_stacks_async(s, kStackSamplingTime);
  drain(s, ch, 3000ms);
  sampling.join();
  // Last, informational: how many datagrams the agent absorbs. The flood may
  // disturb its timing, so nothing after it is judged for deferral.
  if (ch.can_send()) {
    if (!s.timing_boundary()) s.mark_timing_boundary();
    (void)ch.measure_socket_capacity(scenario::kCapacityWindow, scenario::kCapacityMaxSends);
  }
  return Ok{};
}

Status run_disabled(Session& s, Channel& ch, const ScenarioOptions& o) {
  CorrelationTraffic traffic(s, ch, o);
  traffic.pump(scaled(o, 1200ms), "CONF-01", false);
  s.sleep(400ms);
  return Ok{};
}

Status run_auto(Session& s, Channel& ch, const ScenarioOptions& o) {
  CorrelationTraffic traffic(s, ch, o);
  if (!ch.wait_for_storage(1500ms)) return Ok{};  // no socket in auto mode: the judge says auto is not implemented
  s.wait_for_records(1500ms);
  traffic.pump(scaled(o, 800ms), "CONF-02", false);
  ch.register_profiler(registration(elastic_v1::spec::kMsgRegistrationMinor, scenario::kFirstDelayMs,
                                   unique_host_id("tracecorr-host-auto")),
                      "CONF-02");
  traffic.pump_until_exported(scaled(o, 900ms), "CONF-02");
  drain(s, ch, 1500ms);
  return Ok{};
}

Status run_small_queue(Session& s, Channel& ch, const ScenarioOptions& o) {
  s.wait_for_records(1500ms);
  // Minor 2 with trailing bytes, as the first registration this agent sees (MSG-02).
  ch.register_profiler(registration(elastic_v1::spec::kMsgRegistrationMinor, scenario::kLongDelayMs,
                                   unique_host_id("tracecorr-host-queue"), 6),
                      "DEFER-06");
  sleep_until_exported(s, ch, scaled(o, 1500ms));
  return Ok{};
}

// When the latest registration was read, waiting up to `patience` for it;
// nullopt when it was not read by then (the judges leave its effect out).
std::optional<std::chrono::system_clock::time_point> latest_taken_up(Session& s, Channel& ch, Millis patience) {
  auto give_up = Clock::now() + patience;
  for (;;) {
    auto regs = ch.registrations();
    if (regs.empty() || !regs.back().sent()) return std::nullopt;
    if (regs.back().taken_up_at) return regs.back().taken_up_at;
    if (Clock::now() >= give_up || launched_target_died(s)) return std::nullopt;
    s.sleep(10ms);
  }
}

// Whether a transaction that ended after `after` has been exported: with the
// freeze's delay in force, it passed a full queue. A transaction is a span the
// records named as one (a child's parent may still be held, so "its parent
// was not exported" would take children for transactions), or a root span.
bool transaction_exported_after(Session& s, std::chrono::system_clock::time_point after) {
  std::set<SpanId> transactions;
  if (const auto* records = s.records())
    for (const auto& t : records->contexts()) transactions.insert(t.context_id);
  auto after_ns = static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(after.time_since_epoch()).count());
  return s.receiver().wait_for(
      [&](const std::vector<otlp::ReceivedSpan>& spans) {
        return std::any_of(spans.begin(), spans.end(), [&](const otlp::ReceivedSpan& sp) {
          return sp.end_unix_nano > after_ns && (!sp.parent_span_id || transactions.count(sp.span_id));
        });
      },
      Millis(0));
}

// DEFER-05's unsampled half, alike in the unsampled and all-sampled sessions
// (they differ only in the sampler): a short delay empties the queue, then a
// delay longer than the session freezes it. It fills, from empty, with the
// transactions that end next, and nothing leaves it until the agent stops;
// the judge counts the sampled transactions it held in each launch.
Status run_queue_freeze(Session& s, Channel& ch, const ScenarioOptions& o) {
  s.wait_for_records(1500ms);
  if (!ch.can_send()) return Ok{};
  ch.register_profiler(registration(elastic_v1::spec::kMsgRegistrationMinor, scenario::kFlushDelayMs,
                                            unique_host_id("tracecorr-host-flush")),
                               "DEFER-05");
  // Whatever the default delay (1 s) queued has left by then, whether the
  // agent applies a new delay to queued transactions or only to later ones.
  auto flushed = latest_taken_up(s, ch, 3000ms);
  auto flush_until = (flushed ? *flushed : std::chrono::system_clock::now()) + scaled(o, scenario::kFlushWait);
  s.sleep(std::max(Millis(0), std::chrono::duration_cast<Millis>(flush_until - std::chrono::system_clock::now())));
  ch.register_profiler(registration(elastic_v1::spec::kMsgRegistrationMinor, scenario::kFreezeDelayMs,
                                            unique_host_id("tracecorr-host-freeze")),
                               "DEFER-05");
  auto frozen = latest_taken_up(s, ch, 3000ms);
  if (!frozen) return Ok{};
  // The queue is full once a transaction that ended under the freeze was
  // exported; everything it holds ended before that one. They are held on
  // for kFreezeWitnessed more, so that spans ending meanwhile witness each
  // hold (the judge's export-order measure), then await_next_export brings
  // those spans in. A starved or slow target fills it late: the patience
  // bounds the wait, and the judge says what it could not tell.
  auto give_up = Clock::now() + scaled(o, scenario::kFreezeFillPatience);
  auto full_after = *frozen + scenario::kFreezeMargin;
  while (!transaction_exported_after(s, full_after) && Clock::now() < give_up && !launched_target_died(s))
    s.sleep(20ms);
  s.sleep(scaled(o, scenario::kFreezeWitnessed));
  return Ok{};
}

Status run_own_host_id(Session& s, Channel& ch, const ScenarioOptions& o) {
  s.sleep(scaled(o, 900ms));  // before registration: does the default defer? (CONF-03)
  if (ch.can_send()) {
    ch.register_profiler(registration(elastic_v1::spec::kMsgRegistrationMinor, scenario::kFirstDelayMs, "tracecorr-other-host"),
                        "HOST-02");
    sleep_until_exported(s, ch, scaled(o, 900ms));
  }
  s.sleep(600ms);
  return Ok{};
}

}  // namespace

bool judged_by_messages(std::string_view id) {
  const Requirement* r = elastic_v1::spec::find_requirement(id);  // the registry says (judged_by_sending)
  return r && r->judged_by_sending;
}

bool sends_messages(const ScenarioOptions& o) {
  if (o.observe_only) return false;
  if (o.judged.empty()) return true;
  return std::any_of(o.judged.begin(), o.judged.end(), [](const std::string& id) { return judged_by_messages(id); });
}

std::vector<std::string> all_session_names() {
  return {kEnabledSession,    kDisabledSession,  kAutoSession,      kSmallQueueSession,
          kOwnHostIdSession, kUnsampledSession, kAllSampledSession};
}

SessionSettings session_settings(const std::string& name, const ScenarioOptions& options) {
  SessionSettings s;
  s.name = name;
  s.discovery = discovery_options();
  s.record_layout = tls_record_layout();
  s.active_trace = active_trace();
  std::string enabled(elastic_v1::spec::kEnvEnabled);
  if (name == kDisabledSession) s.env[enabled] = "false";
  // The slot watch holds the opening until the agent's threads published: only worth it for TLS-01.
  s.watch_tls_slots = name == kEnabledSession && options.judges("TLS-01");
  if (name == kAutoSession) s.env[enabled] = "auto";
  if (name == kSmallQueueSession) s.env[std::string(elastic_v1::spec::kEnvBufferSize)] = std::to_string(scenario::kSmallQueueSize);
  if (name == kUnsampledSession || name == kAllSampledSession) {
    s.env[enabled] = "true";
    s.env[std::string(elastic_v1::spec::kEnvBufferSize)] = std::to_string(scenario::kFreezeQueueSize);
    // The two launches differ only here. One in four sampled: unsampled
    // transactions end between the sampled ones that fill the queue, so an
    // agent that lets them in has one there when it freezes.
    if (name == kUnsampledSession) {
      s.env["OTEL_TRACES_SAMPLER"] = "traceidratio";
      s.env["OTEL_TRACES_SAMPLER_ARG"] = scenario::kUnsampledRatio;
    } else {
      s.env["OTEL_TRACES_SAMPLER"] = "always_on";
      s.unset_env.push_back("OTEL_TRACES_SAMPLER_ARG");
    }
  }
  if (name == kOwnHostIdSession) {
    s.unset_env.push_back(enabled);
    s.env["OTEL_RESOURCE_ATTRIBUTES"] = std::string("host.id=") + scenario::kOwnHostId;
  }
  return s;
}

Millis storage_wait(const std::string& name) {
  // A disabled agent need not publish anything.
  return name == kDisabledSession ? Millis(500) : Millis(5000);
}

namespace {
// Before the session stops the agent, one more export must arrive: an
// exporter that batches (the OTel SDK's default is every 5 s) then delivers
// what the agent handed over during the scenario, instead of it all arriving
// in the shutdown's flush, where judges cannot tell it from what the agent
// still held.
void await_next_export(Session& s) {
  if (launched_target_died(s)) return;
  auto after = std::chrono::steady_clock::now();
  s.receiver().wait_for(
      [&](const std::vector<otlp::ReceivedSpan>& spans) {
        return std::any_of(spans.rbegin(), spans.rend(), [&](const otlp::ReceivedSpan& sp) { return sp.received_at > after; });
      },
      scenario::kBatchPatience);
  // Judges leave out what arrives within their margin of the stop.
  std::this_thread::sleep_for(200ms);
}
}  // namespace

Status run_scenario(Session& session, const ScenarioOptions& options) {
  const auto& name = session.settings().name;
  Channel& ch = channel(session);
  Status st = make_error("no scenario for session '" + name + "'");
  if (name == kEnabledSession) st = run_enabled(session, ch, options);
  if (name == kDisabledSession) st = run_disabled(session, ch, options);
  if (name == kAutoSession) st = run_auto(session, ch, options);
  if (name == kSmallQueueSession) st = run_small_queue(session, ch, options);
  if (name == kOwnHostIdSession) st = run_own_host_id(session, ch, options);
  if (name == kUnsampledSession || name == kAllSampledSession) st = run_queue_freeze(session, ch, options);
  if (name == kEnabledSession && !session.launched() && !ch.registrations().empty() && ch.can_send()) {
    // A live service: whatever the scenario registered, leave the user's values in force.
    auto settings = settings_of(options);
    ch.register_profiler(registration(elastic_v1::spec::kMsgRegistrationMinor, settings.restore_samples_delay_ms,
                                                    settings.restore_host_id),
                              kRestoreLabel, /*judged=*/false);
  }
  if (st) await_next_export(session);
  return st;
}

std::vector<std::string> registered_host_ids(const Session& session) {
  std::vector<std::string> ids;
  for (const auto& r : channel(session).registrations())
    if (r.judged) ids.push_back(r.message.host_id);
  return ids;
}

}  // namespace tracecorr::elastic_v1

#include "figures.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>

#include "evidence.hpp"
#include "judging.hpp"
#include "scenarios.hpp"
#include "elastic_v1/library.hpp"
#include "tracecorr/report/flames.hpp"

namespace tracecorr::elastic_v1 {

using namespace tracecorr::conform;
namespace {

using namespace std::chrono_literals;

// The margin the defer probe leaves around registrations: a span ending that
// close to one is drawn as "delay unclear", as the probe does not judge it.
constexpr auto kDeferralMargin = 150ms;

// Converts a session's clocks to "ms since the session opened".
class SessionClock {
 public:
  explicit SessionClock(const SessionEvidence& s)
      : opened_(s.opened_at),
        opened_system_(std::chrono::system_clock::now() -
                       std::chrono::duration_cast<std::chrono::system_clock::duration>(Clock::now() - s.opened_at)) {}
  double ms(Clock::time_point t) const { return std::chrono::duration<double, std::milli>(t - opened_).count(); }
  double ms(std::chrono::system_clock::time_point t) const {
    return std::chrono::duration<double, std::milli>(t - opened_system_).count();
  }
  double ms_monotonic_ns(std::uint64_t ns) const {
    return ms(Clock::time_point(std::chrono::duration_cast<Clock::duration>(std::chrono::nanoseconds(ns))));
  }

 private:
  Clock::time_point opened_;
  std::chrono::system_clock::time_point opened_system_;
};

ScatterFigure deferral_figure(const std::string& name, const SessionEvidence& s) {
  SessionClock clock(s);
  SpanIndex spans(s);
  ScatterFigure out = deferral_scatter();
  for (const auto& sp : spans.spans()) {
    if (out.points.size() >= kMaxScatterPoints) break;
    auto end = SpanIndex::end_time(sp);
    std::optional<double> in_force;
    if (auto d = delay_in_force(s, end, kDeferralMargin)) in_force = *d;
    out.points.push_back(deferral_point(name, to_hex(sp.trace_id), to_hex(sp.span_id), spans.is_transaction(sp),
                                        clock.ms(end), SpanIndex::export_delay_ms(sp), in_force));
  }
  return out;
}

std::string changed_fields(std::span<const std::uint8_t> before, std::span<const std::uint8_t> after) {
  std::string out;
  for (const auto& f : decode_record_fields(after)) {
    bool changed = false;
    for (std::size_t i = f.offset; i < f.offset + f.size && i < before.size(); ++i) changed |= before[i] != after[i];
    if (changed) out += (out.empty() ? "" : ", ") + f.name;
  }
  return out;
}

std::vector<RecordStore> record_stores(const std::string& name, const SessionEvidence& s) {
  std::vector<RecordStore> out;
  for (const auto& report : s.update_order_reports) {
    if (!report) continue;
    const auto& states = report->states;
    for (std::size_t i = 0; i < states.size() && out.size() < kMaxRecordStores; ++i) {
      RecordStore r;
      r.session = name;
      r.tid = report->tid;
      r.record_address = report->record_address;
      r.index = i;
      r.at_ms = std::chrono::duration<double, std::milli>(states[i].at - states.front().at).count();
      r.valid = states[i].valid_byte;
      r.pc_after_store = states[i].pc_after_store;
      if (i > 0) r.changed = changed_fields(states[i - 1].bytes, states[i].bytes);
      for (const auto& v : report->violations)
        if (v.after.at == states[i].at && v.after.bytes == states[i].bytes) r.violation = true;
      out.push_back(std::move(r));
    }
  }
  return out;
}

SessionTimeline timeline(const std::string& name, const SessionEvidence& s) {
  SessionClock clock(s);
  SessionTimeline t;
  t.session = name;
  auto add = [&](double at, std::string kind, std::string text) { t.events.push_back({at, std::move(kind), std::move(text)}); };
  for (const auto& r : facts(s).registrations)
    add(clock.ms(r.at), "registration",
        std::string(r.sent() ? "" : "(not sent) ") + "registration minor " + std::to_string(r.message.minor) +
            ", samples-delay-ms " + std::to_string(r.message.samples_delay_ms) + ", host-id \"" + r.message.host_id +
            "\"" + (r.judged ? "" : " (boundary value, not judged)"));
  // Messages come in bursts (the battery sends ~150): one event per burst of
  // the same requirement.
  auto sent = facts(s).sent_messages;
  for (std::size_t i = 0; i < sent.size();) {
    std::size_t j = i + 1;
    while (j < sent.size() && sent[j].requirement == sent[i].requirement && sent[j].at - sent[j - 1].at < 20ms) ++j;
    std::string text = sent[i].requirement + ": " + (j - i == 1 ? sent[i].label : std::to_string(j - i) + " messages, first: " + sent[i].label);
    add(clock.ms(sent[i].at), "message", text);
    i = j;
  }
  std::map<std::size_t, std::pair<double, std::size_t>> exports;  // request index -> (arrival, spans)
  for (const auto& sp : s.spans) {
    auto& e = exports[sp.request_index];
    e.first = clock.ms(sp.received_at);
    ++e.second;
  }
  for (const auto& [index, e] : exports)
    add(e.first, "export", "OTLP export #" + std::to_string(index) + ": " + std::to_string(e.second) + " spans");
  for (const auto& report : s.update_order_reports)
    if (report) {
      add(clock.ms(report->initial.at), "watch",
          "TLS-04 watch of thread " + std::to_string(report->tid) + " began");
      add(clock.ms(report->last.at), "watch",
          "TLS-04 watch of thread " + std::to_string(report->tid) + ": " + std::to_string(report->stores_seen) +
              " stores, " + std::to_string(report->violations_seen) + " violations (" + report->ended_because + ")");
    }
  if (auto samples = s.stack_samples; samples && !samples->samples.empty()) {
    add(clock.ms_monotonic_ns(samples->samples.front().time_ns), "sampling",
        "stack sampling began (" + std::to_string(samples->samples.size()) + " samples)");
    add(clock.ms_monotonic_ns(samples->samples.back().time_ns), "sampling", "stack sampling ended");
  }
  if (auto b = s.timing_boundary) add(clock.ms(*b), "boundary", "timing boundary: deferral not judged after this");
  if (auto stop = s.stop_requested_at) add(clock.ms(*stop), "stop", "tracecorr asked the target to stop");
  std::stable_sort(t.events.begin(), t.events.end(), [](const auto& a, const auto& b) { return a.at_ms < b.at_ms; });
  if (t.events.size() > kMaxTimelineEvents) t.events.resize(kMaxTimelineEvents);
  for (const auto& e : t.events) t.duration_ms = std::max(t.duration_ms, e.at_ms);
  return t;
}

// A number of ms as the page shows it (no decimals).
std::string whole_ms(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.0f", std::isfinite(v) ? v : 0.0);
  return buf;
}

}  // namespace

ScatterFigure deferral_scatter() {
  ScatterFigure f;
  f.caption.id = "deferral";
  f.caption.title = "Deferral timing";
  f.caption.empty = "No span of the enabled session was exported: nothing to draw.";
  f.caption.description = "export delay of each span against the delay in force";
  f.caption.x_axis = "span ended (s since the session opened)";
  f.caption.y_axis = "export delay (ms)";
  f.caption.y_quantity = "export delay";
  f.caption.primary = "transactions";
  f.caption.baseline = "child spans";
  f.caption.baseline_note = "baseline, never deferred";
  f.caption.reference = "delay in force";
  f.caption.unclear = "delay unclear: not judged";
  return f;
}

ScatterPoint deferral_point(const std::string& session, const std::string& trace_id, const std::string& span_id,
                            bool transaction, double ended_ms, double export_delay_ms, std::optional<double> in_force) {
  std::string label = std::string(transaction ? "transaction " : "child span ") + span_id + " of trace " + trace_id +
                      ": ended at " + whole_ms(ended_ms) + " ms, exported " + whole_ms(export_delay_ms) + " ms later" +
                      (in_force ? ", delay in force " + whole_ms(*in_force) + " ms"
                                : ", delay in force unclear (registration close by)");
  return {session, std::move(label), transaction, ended_ms, export_delay_ms, in_force};
}

RecordStoresCaption record_stores_caption() {
  return {"tls04", "TLS-04", "valid-byte update timeline",
          "No record store was watched (TLS-04 not run, or the watch failed: see its evidence).",
          "Each column is one observed state of the record, in store order (hardware watchpoints stop the writing "
          "thread after every store). Green: valid set; grey: valid clear; red: a field changed while valid stayed "
          "set. Under each, the fields that store changed."};
}

Figures collect_figures(const SessionSet& sessions) {
  Figures f;
  for (const auto& name : all_session_names()) {
    const SessionEvidence* s = sessions.find(name);
    if (!s) continue;
    f.timelines.push_back(timeline(name, *s));
    if (name == kEnabledSession) {
      f.scatters.push_back(deferral_figure(name, *s));
      f.record_stores = RecordStoresFigure{record_stores_caption(), record_stores(name, *s)};
      if (auto samples = s->stack_samples) f.stacks = report::stacks_figure_of(*samples, stacks_caption());
    }
  }
  // The pictures a run draws whatever its sessions saw (an empty one says why).
  if (f.scatters.empty()) f.scatters.push_back(deferral_scatter());
  if (!f.record_stores) f.record_stores = RecordStoresFigure{record_stores_caption(), {}};
  return f;
}

}  // namespace tracecorr::elastic_v1

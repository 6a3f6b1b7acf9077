// TLS: the per-thread records, read from outside while the agent works, and
// the update order, watched with hardware watchpoints on the writing thread.
#include <map>
#include <set>

#include "judging.hpp"
#include "probes.hpp"
#include "scenarios.hpp"
#include "tracecorr/memory.hpp"
#include "elastic_v1/registry.hpp"

namespace tracecorr::elastic_v1 {

using namespace tracecorr::conform;
namespace {

// Observations this close to the end of the session may belong to
// transactions the agent has not exported yet (deferral, batching).
constexpr auto kExportHorizon = std::chrono::milliseconds(1500);
// TLS-05: the least number of distinct (span, transaction) pairs a pass needs.
constexpr std::size_t kTls05MinimumPairs = 20;
// TLS-05: how far outside a span's start..end a record may name it (clock
// conversion between steady and system time, and the writer's own ordering of
// "publish" and "take the end timestamp").
constexpr auto kContextTolerance = std::chrono::milliseconds(5);

Finding judge_descriptor(const SessionEvidence& s) {
  const auto& d = s.tls_descriptor;
  if (!d) return not_applicable("TLS-07", s.tls_error ? s.tls_error->message() : "no TLS descriptor (see ELF-04)");
  switch (d->model) {
    case TlsModel::StaticOffset:
      return met("TLS-07", 1, "static TLS: thread pointer offset " + std::to_string(d->tp_offset));
    case TlsModel::Dynamic:
      return violated("TLS-07", d->explanation,
                      {text_evidence("TLS descriptor", "resolver returns a thread-pointer offset", d->explanation)});
    case TlsModel::Unresolved:
      return violated("TLS-07", "the TLS descriptor was never resolved by the loader during the session");
  }
  return kit_error("TLS-07", "unknown TLS model");
}

// Half the updates the watch waits for (scenarios.cpp, kWantedUpdates).
constexpr std::size_t kTls04MinimumUpdates = 5;

class TlsProbe final : public Probe {
 public:
  std::string name() const override { return "tls"; }
  std::vector<std::string> requirements() const override {
    return {"TLS-01", "TLS-02", "TLS-03", "TLS-04", "TLS-05", "TLS-06", "TLS-07"};
  }
  std::vector<std::string> sessions() const override { return {kEnabledSession}; }
  // TLS-05 judges by time: a stale or early record shows only in the gaps
  // between transactions, so a pass needs many transactions read, not a few.
  // TLS-04: an agent that orders one update right by luck must not pass on it.
  std::size_t minimum_evidence(const std::string& requirement) const override {
    if (requirement == "TLS-05") return kTls05MinimumPairs;
    if (requirement == "TLS-04") return kTls04MinimumUpdates;
    return 1;
  }

  std::vector<Finding> judge(const SessionSet& sessions) const override {
    const SessionEvidence* s = sessions.find(kEnabledSession);
    if (!s) return not_run(requirements());
    std::vector<Finding> out;
    const RecordEvidence* records = s->records ? &*s->records : nullptr;
    auto tls06 = not_applicable("TLS-06", "a MAY: the agent may wait for a registration before populating records");
    if (!records) {
      std::string why = "records could not be read: " +
                        (s->tls_error ? s->tls_error->message()
                                        : s->tls_descriptor ? s->tls_descriptor->explanation
                                                              : std::string("no TLS descriptor"));
      auto rest = not_run({"TLS-01", "TLS-02", "TLS-03", "TLS-04", "TLS-05"}, why);
      rest.push_back(tls06);
      rest.push_back(judge_descriptor(*s));
      return rest;
    }
    auto observations = records->observations;
    out.push_back(judge_initialised(*s, observations));
    out.push_back(judge_minor(observations));
    out.push_back(judge_sharing(*records));
    out.push_back(judge_update_order(*s));
    out.push_back(judge_ids(*s, observations));
    out.push_back(tls06);
    out.push_back(judge_descriptor(*s));
    return out;
  }

 private:
  // TLS-01, two witnesses. The slot watch stops each thread at the store that
  // publishes its pointer and reads the record there: deterministic. The
  // record watcher's polls catch what the watch could not see (threads that
  // published before it could arm them, attach mode, qemu-user): per thread,
  // a record seen with minor 0 before it is ever seen with a real minor was
  // visible before it was initialised. A poll only vouches for a thread it
  // saw before the publication (its pointer still null): a first look after
  // the record was filled in says nothing about the window before, so
  // without such threads (or the watch) a pass has no evidence.
  static Finding judge_initialised(const SessionEvidence& s, const std::vector<RecordObservation>& obs) {
    std::size_t complete_at_store = 0;
    std::set<pid_t> watched_threads;
    if (const auto& watch = s.slot_watch) {
      for (const auto& p : watch->publications) {
        std::string who = "thread " + std::to_string(p.tid);
        if (!p.bytes)
          return violated("TLS-01", who + "'s TLS pointer was set to " + hex_address(p.record_pointer) +
                                        ", which could not be read at that store: " + p.read_error->message(),
                          {text_evidence("the store publishing " + who + "'s pointer (hardware watchpoint)",
                                         "a complete record", "unreadable memory")});
        if (decoded_record(*p.bytes).minor == 0)
          return violated("TLS-01", who + "'s TLS pointer was set before its record was initialised (seen at the store "
                                        "that set it, by a hardware watchpoint)",
                          {record_evidence("record of " + who + " at the store that published its pointer", *p.bytes,
                                           "a complete record (minor 1)", "uninitialised")});
        ++complete_at_store;
        watched_threads.insert(p.tid);
      }
    }
    std::map<pid_t, const RecordObservation*> uninitialised;
    std::set<pid_t> initialised;
    for (const auto& o : obs) {
      const auto minor = decoded_record(o.bytes).minor;
      if (minor == 0 && !initialised.count(o.tid)) uninitialised.try_emplace(o.tid, &o);
      if (minor != 0) {
        initialised.insert(o.tid);
        if (auto it = uninitialised.find(o.tid); it != uninitialised.end())
          return violated("TLS-01", "thread " + std::to_string(o.tid) + "'s record pointer was set before its record was initialised",
                          {record_evidence("record of thread " + std::to_string(o.tid) + " when first visible",
                                           it->second->bytes, "a complete record (minor 1)", "uninitialised"),
                           record_evidence("the same record later", o.bytes, "", "initialised")});
      }
    }
    std::string watch_said = s.slot_watch ? "slot watch: " + s.slot_watch->describe()
                                            : "no slot watch: " + (s.slot_watch_unavailable.empty()
                                                                       ? std::string("not requested")
                                                                       : s.slot_watch_unavailable);
    if (initialised.empty() && watched_threads.empty())
      return not_applicable("TLS-01", "no initialised record was ever seen (" + watch_said + ")");
    const std::set<pid_t> none;
    const auto& seen_unpublished = s.records ? s.records->seen_before_publication : none;
    std::size_t polled_through_publication = 0, polled_after_publication = 0;
    std::set<pid_t> threads = watched_threads;
    for (pid_t tid : initialised) {
      if (watched_threads.count(tid)) continue;
      if (seen_unpublished.count(tid)) {
        ++polled_through_publication;
        threads.insert(tid);
      } else {
        ++polled_after_publication;
      }
    }
    const std::string polled_late = std::to_string(polled_after_publication) +
                                    " threads' records were first polled after their publication";
    if (threads.empty() && !s.launched)
      return not_applicable("TLS-01", "attached to a running target: " + polled_late +
                                          " (before tracecorr looked); judging needs threads that start while watched (" +
                                          watch_said + ")");
    // Records in dynamic TLS: the slot watch cannot arm a slot whose block a
    // thread allocates only at its first use, so only polls could witness.
    if (threads.empty() && s.tls_access && s.tls_access->dynamic())
      return not_applicable("TLS-01", "the records are in dynamic TLS (" + std::string(to_string(s.tls_access->model)) +
                                          "), where a thread's slot exists only from its first use, so no store "
                                          "could be watched; " + polled_late + " (" + watch_said + ")");
    if (threads.empty())
      return kit_error("TLS-01", "inconclusive: " + polled_late +
                                     ", which proves nothing about the moment before; no thread was seen before it (" +
                                     watch_said + ")");
    return met("TLS-01", threads.size(),
               std::to_string(complete_at_store) + " pointer publications by " + std::to_string(watched_threads.size()) +
                   " threads each found a complete record at the store itself; " +
                   std::to_string(polled_through_publication) +
                   " threads' records complete whenever polled from before their publication (" + polled_late +
                   ", which proves nothing; " + watch_said + ")");
  }

  static Finding judge_minor(const std::vector<RecordObservation>& obs) {
    std::size_t valid = 0;
    for (const auto& o : obs) {
      const auto record = decoded_record(o.bytes);
      if (!record.valid) continue;
      ++valid;
      if (record.minor == 0)
        return violated("TLS-02", "a valid record has layout-minor-version 0",
                        {record_evidence("record of thread " + std::to_string(o.tid), o.bytes, "layout_minor_version 1", "0")});
    }
    if (!valid) return not_applicable("TLS-02", "no valid record was seen");
    return met("TLS-02", valid, std::to_string(valid) + " valid record states, all with minor >= 1");
  }

  static Finding judge_sharing(const RecordEvidence& records) {
    std::map<std::uint64_t, pid_t> owner;
    for (const auto& [tid, pointer] : records.record_pointers) {
      if (!pointer) continue;
      auto [it, inserted] = owner.try_emplace(pointer, tid);
      if (!inserted) {
        const std::string address = hex_address(pointer);
        return violated("TLS-03", "threads " + std::to_string(it->second) + " and " + std::to_string(tid) + " share the record at " + address,
                        {text_evidence("record pointers", "one record per thread",
                                       address + " for threads " + std::to_string(it->second) + " and " + std::to_string(tid))});
      }
    }
    if (owner.size() < 2) return not_applicable("TLS-03", "fewer than two threads had records");
    return met("TLS-03", owner.size(), std::to_string(owner.size()) + " threads, " + std::to_string(owner.size()) + " distinct records");
  }

  static Finding judge_update_order(const SessionEvidence& s) {
    std::size_t updates = 0;
    std::string errors;
    for (const auto& report : s.update_order_reports) {
      if (!report) {
        errors += (errors.empty() ? "" : "; ") + report.error().message();
        continue;
      }
      if (!report->conforms()) {
        const auto& v = report->violations.front();
        std::string limits = report->limits.empty() ? "" : " (" + report->limits + ")";
        return violated("TLS-04",
                        std::to_string(report->violations_seen) + " store(s) by thread " + std::to_string(report->tid) +
                            " changed the record while valid was set" + limits,
                        {record_evidence("record before the store", v.before.bytes, "valid = 0 before other fields change",
                                         "valid = " + std::to_string(v.before.valid_byte)),
                         record_evidence("record after the store", v.after.bytes, "", describe(v, report->layout))});
      }
      updates += report->updates_seen;
    }
    if (updates > 0) return met("TLS-04", updates, std::to_string(updates) + " updates watched store by store, all through valid = 0");
    if (!errors.empty()) return kit_error("TLS-04", "the update order could not be watched: " + errors);
    return not_applicable("TLS-04", "no record update happened while the writing threads were watched");
  }

  // TLS-05: every id read from a record belongs to what the agent exported.
  static Finding judge_ids(const SessionEvidence& s, const std::vector<RecordObservation>& obs) {
    SpanIndex spans(s.spans);
    if (spans.spans().empty()) return not_applicable("TLS-05", "no spans were received, so ids cannot be matched");
    auto last_arrival = spans.spans().front().received_at;
    // Judged: states seen long enough before the last export for their spans
    // to have been exported too, by the lag this agent showed in this session
    // (a starved or batching agent exports seconds after a span ends).
    double longest_lag_ms = 0;
    for (const auto& sp : spans.spans()) {
      last_arrival = std::max(last_arrival, sp.received_at);
      longest_lag_ms = std::max(longest_lag_ms, SpanIndex::export_delay_ms(sp));
    }
    const auto horizon = kExportHorizon + std::chrono::milliseconds(static_cast<long long>(longest_lag_ms));
    std::size_t checked = 0;
    std::vector<Evidence> examples;
    std::size_t bad = 0;
    std::set<std::pair<SpanId, SpanId>> judged;
    // By time: a record names a span only between its start and its end. The
    // watcher's read times bound when a state was visible (read_by: no later
    // than; last_seen: no earlier than), so a late poll never convicts.
    const auto system_minus_steady = std::chrono::system_clock::now().time_since_epoch() -
                                     std::chrono::steady_clock::now().time_since_epoch();
    auto unix_ns = [&](std::chrono::steady_clock::time_point t) {
      return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch() + system_minus_steady).count();
    };
    const auto tolerance_ns = std::chrono::nanoseconds(kContextTolerance).count();
    std::size_t timed = 0, stale = 0, early = 0;
    std::vector<Evidence> time_examples;
    for (const auto& o : obs) {
      const auto r = decoded_record(o.bytes);
      if (!r.valid || !r.trace_present || !(r.trace_flags & 0x01)) continue;  // TLS-08/09; unsampled are not exported
      if (o.at + horizon > last_arrival) continue;
      if (const auto* named = spans.find(r.span_id); named && named->trace_id == r.trace_id) {
        ++timed;
        auto start = static_cast<long long>(named->start_unix_nano), end = static_cast<long long>(named->end_unix_nano);
        long long seen_last = unix_ns(o.last_seen), seen_by = unix_ns(o.read_by);
        std::string problem;
        if (seen_last > end + tolerance_ns) {
          ++stale;
          problem = "still named span " + to_hex(r.span_id) + " " + ms(static_cast<double>(seen_last - end) / 1e6) +
                    " after it ended (trace-present not cleared)";
        } else if (seen_by < start - tolerance_ns) {
          ++early;
          problem = "named span " + to_hex(r.span_id) + " " + ms(static_cast<double>(start - seen_by) / 1e6) +
                    " before it started";
        }
        if (!problem.empty() && time_examples.size() < kMaxExamples)
          time_examples.push_back(record_evidence("record of thread " + std::to_string(o.tid), o.bytes,
                                                  "ids only while that span is active (tolerance " +
                                                      ms(static_cast<double>(kContextTolerance.count())) + ")",
                                                  problem));
      }
      if (!judged.insert({r.span_id, r.transaction_id}).second) continue;
      ++checked;
      std::string problem;
      const auto* span = spans.find(r.span_id);
      const auto* txn = spans.find(r.transaction_id);
      if (!span || span->trace_id != r.trace_id)
        problem = "span-id " + to_hex(r.span_id) + " is not a span the agent exported in trace " + to_hex(r.trace_id);
      else if (!txn || txn->trace_id != r.trace_id)
        problem = "transaction-id " + to_hex(r.transaction_id) + " is not a span the agent exported";
      else if (!spans.is_transaction(*txn))
        problem = "transaction-id " + to_hex(r.transaction_id) + " names a child span (parent " +
                  to_hex(*txn->parent_span_id) + "), not the local root";
      if (problem.empty()) continue;
      ++bad;
      if (examples.size() < kMaxExamples)
        examples.push_back(record_evidence("record of thread " + std::to_string(o.tid), o.bytes,
                                           "ids of an exported span and its transaction", problem));
    }
    if (stale || early)
      return violated("TLS-05", std::to_string(stale) + " stale and " + std::to_string(early) + " early of " +
                                    std::to_string(timed) + " record states judged by time name a span outside its "
                                    "start and end",
                      time_examples);
    if (bad) return violated("TLS-05", std::to_string(bad) + " of " + std::to_string(checked) + " records name ids the agent did not export as such", examples);
    if (!checked) return not_applicable("TLS-05", "no sampled record was seen early enough to be matched with exports");
    return met("TLS-05", checked, std::to_string(checked) + " distinct (span, transaction) pairs read, all exported as such; " +
                                      std::to_string(timed) + " record states each seen only between its span's start "
                                      "and end (tolerance " + ms(static_cast<double>(kContextTolerance.count())) + ")");
  }
};

}  // namespace

std::unique_ptr<Probe> make_tls_probe() { return std::make_unique<TlsProbe>(); }

}  // namespace tracecorr::elastic_v1

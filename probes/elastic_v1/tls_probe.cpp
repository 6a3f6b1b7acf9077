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

// TLS-05 over the record states judged: each names its span only between the
// span's start and end (by time), and ids the agent exported as a span and
// its local root (by ids).
//
// What arrived stands for what was exported only where the receiver can
// vouch for it: ids missing from it are a violation unless the receiver shows
// an export lost after the record was last seen (an exporter interrupted, or
// giving up on a busy receiver, drops its batch; otlp::ExportLosses), which
// may have carried them. Those pairs are counted, not judged; when they
// outnumber the judged ones the answer is inconclusive.
class Tls05Judge {
 public:
  Tls05Judge(const SpanIndex& spans, const otlp::ExportLosses& losses,
             const std::map<pid_t, std::vector<RunQueueMark>>& run_queue_marks)
      : spans_(spans), losses_(losses), run_queue_marks_(run_queue_marks) {}

  // By time: the watcher's read times bound when a state was visible
  // (read_by: no later than; last_seen: no earlier than), so a late poll
  // never convicts; and the agent is late only by its own time beyond the
  // tolerance, its thread's waits for a CPU taken out (a thread preempted
  // between taking a span's end time and clearing its record is not).
  void by_time(const watch::RecordObservation& o, const TlsRecord& r) {
    const auto* named = spans_.find(r.span_id);
    if (!named || named->trace_id != r.trace_id) return;
    ++timed_;
    const auto tolerance_ns = std::chrono::nanoseconds(kContextTolerance).count();
    auto start = static_cast<long long>(named->start_unix_nano), end = static_cast<long long>(named->end_unix_nano);
    long long seen_last = unix_ns(o.last_seen), seen_by = unix_ns(o.read_by);
    std::string problem;
    if (seen_last > end + tolerance_ns) {
      if (auto own = own_time_beyond(o.tid, end + tolerance_ns, seen_last))
        problem = "still named span " + to_hex(r.span_id) + " " + ms(static_cast<double>(seen_last - end) / 1e6) +
                  " after it ended (trace-present not cleared; " + ms(static_cast<double>(*own) / 1e6) +
                  " of them at least the agent's own time)";
      ++(problem.empty() ? untold_ : stale_);
    } else if (seen_by < start - tolerance_ns) {
      if (auto own = own_time_beyond(o.tid, seen_by, start - tolerance_ns))
        problem = "named span " + to_hex(r.span_id) + " " + ms(static_cast<double>(start - seen_by) / 1e6) +
                  " before it started (" + ms(static_cast<double>(*own) / 1e6) + " of them at least the agent's own time)";
      ++(problem.empty() ? untold_ : early_);
    }
    if (!problem.empty() && time_examples_.size() < kMaxExamples)
      time_examples_.push_back(record_evidence("record of thread " + std::to_string(o.tid), o.bytes,
                                               "ids only while that span is active (tolerance " + tolerance() + ")",
                                               problem));
  }

  // By ids, once per distinct (span, transaction) pair judged.
  void by_ids(const watch::RecordObservation& o, const TlsRecord& r) {
    const std::pair<SpanId, SpanId> pair{r.span_id, r.transaction_id};
    if (judged_.count(pair)) return;
    const auto* span = spans_.find(r.span_id);
    const auto* txn = spans_.find(r.transaction_id);
    const bool span_missing = !span || span->trace_id != r.trace_id, txn_missing = !txn || txn->trace_id != r.trace_id;
    // Its parent never arrived and may be in a lost export: a root or not, unknown.
    const bool txn_role_unknown = !txn_missing && !spans_.is_transaction(*txn) && !spans_.is_child(*txn);
    // The span may have ended up to the tolerance before the record was last
    // seen naming it (by_time allows that much), and been exported from then on.
    if ((span_missing || txn_missing || txn_role_unknown) && losses_.lost_after(o.last_seen - kContextTolerance)) {
      unjudged_.insert(pair);
      return;
    }
    judged_.insert(pair);
    std::string problem;
    if (span_missing)
      problem = "span-id " + to_hex(r.span_id) + " is not a span the agent exported in trace " + to_hex(r.trace_id);
    else if (txn_missing)
      problem = "transaction-id " + to_hex(r.transaction_id) + " is not a span the agent exported";
    else if (spans_.is_child(*txn))
      problem = "transaction-id " + to_hex(r.transaction_id) + " names a child span (parent " +
                to_hex(*txn->parent_span_id) + "), not the local root";
    if (problem.empty()) return;
    ++bad_;
    if (examples_.size() < kMaxExamples)
      examples_.push_back(record_evidence("record of thread " + std::to_string(o.tid), o.bytes,
                                          "ids of an exported span and its transaction", problem));
  }

  Finding finding() const {
    const std::size_t checked = judged_.size();
    if (stale_ || early_)
      return violated("TLS-05", std::to_string(stale_) + " stale and " + std::to_string(early_) + " early of " +
                                    std::to_string(timed_) + " record states judged by time name a span outside its "
                                    "start and end",
                      time_examples_);
    if (bad_)
      return violated("TLS-05", std::to_string(bad_) + " of " + std::to_string(checked) +
                                    " records name ids the agent did not export as such", examples_);
    std::size_t not_judged = 0;
    for (const auto& pair : unjudged_) not_judged += !judged_.count(pair);
    const std::string lost = not_judged ? "; " + std::to_string(not_judged) + " pairs not judged: their ids never "
                                          "arrived, and the receiver shows exports lost after the records were seen (" +
                                          losses_.describe() + ")"
                                        : std::string();
    if (not_judged > checked)
      return kit_error("TLS-05", "inconclusive: " + std::to_string(checked) + " distinct (span, transaction) pairs "
                                 "judged, fewer than those that could not be" + lost);
    if (!checked) return not_applicable("TLS-05", "no sampled record was seen early enough to be matched with exports");
    const std::string untold = untold_ ? "; " + std::to_string(untold_) + " seen outside by less than the tolerance in "
                                         "the agent's own time (its thread waited for a CPU), or by a time no reading of "
                                         "its waits bounds"
                                       : std::string();
    return met("TLS-05", checked, std::to_string(checked) + " distinct (span, transaction) pairs read, all exported as such; " +
                                      std::to_string(timed_ - untold_) + " record states each seen only between its span's "
                                      "start and end (tolerance " + tolerance() + ")" + untold + lost);
  }

 private:
  static std::string tolerance() { return ms(static_cast<double>(kContextTolerance.count())); }
  // The agent's own time from `from` to `to` (unix ns) when it exceeds the
  // tolerance; nullopt when it does not, or no reading bounds the waits.
  std::optional<long long> own_time_beyond(pid_t tid, long long from, long long to) const {
    auto marks = run_queue_marks_.find(tid);
    if (marks == run_queue_marks_.end()) return std::nullopt;
    const long long steady_minus_unix = -system_minus_steady_.count();
    auto own = least_own_time(marks->second, from + steady_minus_unix, to + steady_minus_unix);
    if (!own || *own <= std::chrono::nanoseconds(kContextTolerance).count()) return std::nullopt;
    return *own;
  }
  long long unix_ns(std::chrono::steady_clock::time_point t) const {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch() + system_minus_steady_).count();
  }

  const SpanIndex& spans_;
  const otlp::ExportLosses& losses_;
  const std::map<pid_t, std::vector<RunQueueMark>>& run_queue_marks_;  // CLOCK_MONOTONIC
  const std::chrono::nanoseconds system_minus_steady_ =
      std::chrono::system_clock::now().time_since_epoch() - std::chrono::steady_clock::now().time_since_epoch();
  std::size_t timed_ = 0, stale_ = 0, early_ = 0, untold_ = 0, bad_ = 0;
  std::vector<Evidence> time_examples_, examples_;
  std::set<std::pair<SpanId, SpanId>> judged_, unjudged_;  // unjudged: ids missing, maybe in a lost export
};

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
  static Finding judge_initialised(const SessionEvidence& s, const std::vector<watch::RecordObservation>& obs) {
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
    std::map<pid_t, const watch::RecordObservation*> uninitialised;
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

  static Finding judge_minor(const std::vector<watch::RecordObservation>& obs) {
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

  // TLS-05: every id read from a record belongs to what the agent exported
  // (Tls05Judge), judged on record states seen long enough before the last
  // export for their spans to have been exported too, by the lag this agent
  // showed in this session (a starved or batching agent exports seconds after
  // a span ends).
  static Finding judge_ids(const SessionEvidence& s, const std::vector<watch::RecordObservation>& obs) {
    SpanIndex spans(s);
    if (spans.spans().empty()) return not_applicable("TLS-05", "no spans were received, so ids cannot be matched");
    auto last_arrival = spans.spans().front().received_at;
    double longest_lag_ms = 0;
    for (const auto& sp : spans.spans()) {
      last_arrival = std::max(last_arrival, sp.received_at);
      longest_lag_ms = std::max(longest_lag_ms, SpanIndex::export_delay_ms(sp));
    }
    const auto horizon = kExportHorizon + std::chrono::milliseconds(static_cast<long long>(longest_lag_ms));
    Tls05Judge judge(spans, s.export_losses, s.records->run_queue_marks);
    for (const auto& o : obs) {
      const auto r = decoded_record(o.bytes);
      if (!r.valid || !r.trace_present || !(r.trace_flags & 0x01)) continue;  // TLS-08/09; unsampled are not exported
      if (o.at + horizon > last_arrival) continue;
      judge.by_time(o, r);
      judge.by_ids(o, r);
    }
    return judge.finding();
  }
};

}  // namespace

std::unique_ptr<Probe> make_tls_probe() { return std::make_unique<TlsProbe>(); }

}  // namespace tracecorr::elastic_v1

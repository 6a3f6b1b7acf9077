// seqlock (PCTX-07..10): the timestamp written last, zeroed before an update
// and moving forward (the mapping watch's stores), and no torn read (every
// session's seqlock reads).
#include "probes.hpp"

#include "judges.hpp"
#include "judging.hpp"

namespace tracecorr::otel_process_context {

Finding judge_timestamp_written_last(const ContextFacts& f) {
  const std::string id = "PCTX-07";
  if (auto why = watch_missing(f)) return not_applicable(id, *why);
  const auto h = history_of(f);
  if (!h.address) return not_applicable(id, "the watch never saw the mapping appear (" + watch_said(f) + ")");
  if (!h.armed_before_publication)
    return not_applicable(id, "the mapping " + h.mapping_name + " already had a timestamp when the watch could arm it (" +
                                  watch_said(f) + ")");
  if (h.publications.empty()) return not_applicable(id, "the timestamp was never set while watched (" + watch_said(f) + ")");
  const auto& first = h.publications.front();
  if (!first.complete())
    return violated(id, "the timestamp was set before the rest of the header was written (the store that set it, seen by a "
                        "hardware watchpoint)",
                    {header_evidence("header right after the store that set the timestamp", first.header,
                                     "signature, version, payload_size and payload written first", describe(first.header))});
  const auto published = first_complete_publication(h);
  for (const auto& c : h.changes_while_set)
    if (!published || c.event < *published || c.event == first.event)
      return violated(id, joined(c.fields) + " changed while the timestamp of the publication was set",
                      {header_evidence("header before the store", c.before, "", describe(c.before)),
                       header_evidence("header after it", c.after, "no change while the timestamp is set", describe(c.after))});
  return met(id, 1,
             "the first publication set the timestamp last: at that store the header was complete (" + describe(first.header) +
                 "); " + std::to_string(h.stores) + " stores watched (" + watch_said(f) + ")");
}

Finding judge_zeroed_before_update(const ContextFacts& f) {
  const std::string id = "PCTX-08";
  if (auto why = watch_missing(f)) return not_applicable(id, *why);
  const auto h = history_of(f);
  const auto published = first_complete_publication(h);
  if (!published) return not_applicable(id, "no complete publication was watched (" + watch_said(f) + ")");
  for (const auto& c : h.changes_while_set)
    if (c.event > *published)
      return violated(id, joined(c.fields) + " changed while the timestamp was still set (an update that did not zero it first)",
                      {header_evidence("header before the store", c.before, "", describe(c.before)),
                       header_evidence("header after it", c.after, "published_at 0 before the payload fields change",
                                       describe(c.after))});
  const auto updates = updates_of(h);
  for (const auto* u : updates)
    if (!u->from_zero)
      return violated(id, "the timestamp went from " + std::to_string(u->previous_timestamp.value_or(0)) + " to " +
                              std::to_string(u->header.published_at_ns) + " without passing through 0",
                      {header_evidence("header after the store", u->header, "published_at 0 first", describe(u->header))});
  if (updates.empty())
    return not_applicable(id, "the target did not update its context while watched (" + watch_said(f) + ")");
  return met(id, updates.size(),
             std::to_string(updates.size()) + " updates each zeroed the timestamp before changing the payload fields (" +
                 watch_said(f) + ")");
}

Finding judge_timestamp_moves_forward(const ContextFacts& f) {
  const std::string id = "PCTX-09";
  if (auto why = watch_missing(f)) return not_applicable(id, *why);
  const auto h = history_of(f);
  const auto updates = updates_of(h);
  for (const auto* u : updates) {
    const std::uint64_t before = u->previous_timestamp.value_or(0);
    if (u->header.published_at_ns <= before)
      return violated(id,
                      "an update set the timestamp to " + std::to_string(u->header.published_at_ns) +
                          (u->header.published_at_ns == before ? ", the value it had before the update"
                                                               : ", earlier than the " + std::to_string(before) + " before it"),
                      {header_evidence("header after the update", u->header, "published_at > " + std::to_string(before),
                                       describe(u->header))});
  }
  if (updates.empty())
    return not_applicable(id, "the target did not update its context while watched (" + watch_said(f) + ")");
  return met(id, updates.size(),
             std::to_string(updates.size()) + " updates each set a timestamp later than the one before (" + watch_said(f) + ")");
}

Finding judge_no_torn_read(const std::vector<const ContextFacts*>& sessions) {
  const std::string id = "PCTX-10";
  // No context in any session: nothing was read, nothing to be inconclusive about (PCTX-01 says why).
  const ContextFacts* found = nullptr;
  const ContextFacts* missing = nullptr;
  for (const auto* f : sessions)
    if (f) (f->not_found ? missing : found) = f;
  if (!found && missing) return not_applicable(id, "no process context was found: " + missing->not_found->message());
  ReadTally all;
  std::string where;
  for (const auto* f : sessions) {
    if (!f) continue;
    const auto& r = f->reads;
    all.attempts += r.attempts;
    all.consistent += r.consistent;
    all.retries_zero += r.retries_zero;
    all.retries_changed += r.retries_changed;
    all.gave_up += r.gave_up;
    all.timestamps_seen += r.timestamps_seen;
    all.torn += r.torn;
    where += (where.empty() ? "" : ", ") + f->session + ": " + std::to_string(r.consistent) + " reads in " +
             std::to_string(r.window.count()) + " ms";
    if (!r.torn_reads.empty()) {
      const auto& t = r.torn_reads.front();
      Evidence first = text_evidence("payload read first under timestamp " + std::to_string(t.timestamp),
                                     "the same bytes on every read under this timestamp",
                                     std::to_string(t.first_size) + " bytes");
      first.bytes = t.first;
      Evidence second = text_evidence("payload read later under the same timestamp",
                                      "", std::to_string(t.second_size) + " bytes, first difference at byte " +
                                              std::to_string(t.first_difference));
      second.bytes = t.second;
      return violated(id,
                      std::to_string(r.torn) + " consistent reads (timestamp unchanged around the copy) returned a payload "
                                               "other than an earlier read under the same timestamp: the payload changed "
                                               "while published",
                      {first, second});
    }
  }
  const std::string counts = std::to_string(all.consistent) + " consistent reads of " + std::to_string(all.attempts) + " (" +
                             std::to_string(all.timestamps_seen) + " timestamps; retries: " +
                             std::to_string(all.retries_zero) + " mid-update, " + std::to_string(all.retries_changed) +
                             " changed during the copy; " + std::to_string(all.gave_up) + " gave up; " + where + ")";
  if (all.consistent < kMinimumConsistentReads)
    return kit_error(id, "inconclusive: " + counts + ", fewer than the " + std::to_string(kMinimumConsistentReads) +
                             " a pass needs");
  return met(id, all.consistent, counts + ", none torn");
}

namespace {

using conform::SessionSet;

class SeqlockProbe final : public conform::Probe {
 public:
  std::string name() const override { return "seqlock"; }
  std::vector<std::string> requirements() const override { return {"PCTX-07", "PCTX-08", "PCTX-09", "PCTX-10"}; }
  std::vector<std::string> sessions() const override { return {kWatchedSession, kReadSession}; }
  // Only the torn-read count (PCTX-10) reads both: the stores are the watched session's.
  std::vector<std::string> sessions_for(const std::string& requirement) const override {
    if (requirement == "PCTX-10") return sessions();
    return {kWatchedSession};
  }
  std::vector<Finding> judge(const SessionSet& sessions) const override {
    std::vector<Finding> out;
    if (const auto* watched = facts(sessions, kWatchedSession)) {
      out.push_back(judge_timestamp_written_last(*watched));
      out.push_back(judge_zeroed_before_update(*watched));
      out.push_back(judge_timestamp_moves_forward(*watched));
    } else {
      out = needs_watched_session({"PCTX-07", "PCTX-08", "PCTX-09"});
    }
    out.push_back(judge_no_torn_read(sessions_run(sessions)));
    return out;
  }
  std::size_t minimum_evidence(const std::string& requirement) const override {
    return requirement == "PCTX-10" ? kMinimumConsistentReads : 1;
  }
};

}  // namespace

std::unique_ptr<conform::Probe> make_seqlock_probe() { return std::make_unique<SeqlockProbe>(); }

}  // namespace tracecorr::otel_process_context

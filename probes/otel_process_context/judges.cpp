// The judges of the seqlock, naming and fork rules; see judges.hpp. Each
// states what it saw, with counts; a rule whose moment was not observed is not
// applicable (with why), never a pass.
#include "judges.hpp"

#include <algorithm>

#include "header_history.hpp"

namespace tracecorr::otel_process_context {
namespace {

using process_context::Header;

// Why the watch cannot judge this session, or nullopt when it can.
std::optional<std::string> watch_missing(const ContextFacts& f) {
  if (!f.watch) return "no mapping watch: " + (f.watch_unavailable.empty() ? std::string("not run") : f.watch_unavailable);
  if (f.not_found) return "no process context was found: " + f.not_found->message();
  return std::nullopt;
}

std::string watch_said(const ContextFacts& f) { return "mapping watch: " + f.watch->describe(); }

HeaderHistory history_of(const ContextFacts& f) { return header_history(*f.watch, f.judged_pid); }

Evidence header_evidence(std::string label, const Header& header, std::string expected, std::string actual) {
  Evidence e = text_evidence(std::move(label), std::move(expected), std::move(actual));
  e.fields.push_back(DecodedField{0, process_context::kHeaderSize, "header", describe(header)});
  return e;
}

std::string joined(const std::vector<std::string>& words) {
  std::string out;
  for (const auto& w : words) out += (out.empty() ? "" : ", ") + w;
  return out;
}

// Why the naming calls cannot be seen, or nullopt when they can: qemu-user
// (7.2) answers a guest's prctl(PR_SET_VMA) itself, with EINVAL, and never
// calls the host's, so the watch (which sees the host's system calls) cannot
// tell a guest that names from one that does not. A qemu that passes the call
// on shows it, and is judged.
std::optional<std::string> naming_unseen(const ContextFacts& f, const HeaderHistory& h) {
  if (!f.under_qemu_user || h.naming_calls > 0) return std::nullopt;
  return "the target runs under qemu-user, which does not pass prctl(PR_SET_VMA) on to the host: the watch saw no naming "
         "call, and cannot tell whether the guest made one (" + watch_said(f) + ")";
}

// The publications after the first complete one: the updates.
std::vector<const Publication*> updates_of(const HeaderHistory& h) {
  std::vector<const Publication*> out;
  bool published = false;
  for (const auto& p : h.publications) {
    if (published) out.push_back(&p);
    published = published || p.complete();
  }
  return out;
}

// The event index of the first complete publication (events after it are updates).
std::optional<std::size_t> first_complete_publication(const HeaderHistory& h) {
  for (const auto& p : h.publications)
    if (p.complete()) return p.event;
  return std::nullopt;
}

}  // namespace

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

Finding judge_named_on_publish(const ContextFacts& f) {
  const std::string id = "PCTX-13";
  if (auto why = watch_missing(f)) return not_applicable(id, *why);
  const auto h = history_of(f);
  if (!h.address || !h.armed_before_publication || h.publications.empty())
    return not_applicable(id, "the publication was not watched from its start (" + watch_said(f) + ")");
  if (auto why = naming_unseen(f, h)) return not_applicable(id, *why);
  const auto& first = h.publications.front();
  if (first.naming_calls_after > 0)
    return met(id, first.naming_calls_after,
               "prctl(PR_SET_VMA, PR_SET_VMA_ANON_NAME) named the mapping after the timestamp was set (" +
                   std::to_string(first.naming_calls_after) + " calls; seen at the system call's return)");
  if (!first.settled())
    return not_applicable(id, "the watch ended before the publication's naming call could follow it (" + watch_said(f) + ")");
  if (h.naming_calls_before_first_publication > 0)
    return violated(id, "the mapping was named by prctl before its timestamp was set, and not after",
                    {text_evidence("naming calls before the timestamp", "after it",
                                   std::to_string(h.naming_calls_before_first_publication))});
  return violated(id, "no prctl(PR_SET_VMA, PR_SET_VMA_ANON_NAME) call named the mapping after its publication (" +
                          std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(first.watched_after).count()) +
                          " ms watched after it; " + watch_said(f) + ")");
}

Finding judge_named_on_update(const ContextFacts& f) {
  const std::string id = "PCTX-14";
  if (auto why = watch_missing(f)) return not_applicable(id, *why);
  const auto h = history_of(f);
  if (auto why = naming_unseen(f, h); why && !updates_of(h).empty()) return not_applicable(id, *why);
  std::size_t named = 0, unfinished = 0;
  for (const auto* u : updates_of(h)) {
    if (u->naming_calls_after > 0) {
      ++named;
    } else if (!u->settled()) {
      ++unfinished;  // the watch ended right after it
    } else {
      return violated(id, "an update (timestamp " + std::to_string(u->header.published_at_ns) +
                              ") was not followed by a prctl naming call before the next change",
                      {header_evidence("header after the update", u->header, "prctl(PR_SET_VMA) after this store", "none")});
    }
  }
  if (named == 0)
    return not_applicable(id, unfinished ? "the watch ended before the only update's naming call could follow it"
                                         : "the target did not update its context while watched (" + watch_said(f) + ")");
  return met(id, named,
             std::to_string(named) + " updates each re-issued the naming prctl after the new timestamp" +
                 (unfinished ? " (" + std::to_string(unfinished) + " more ended with the watch)" : std::string()));
}

Finding judge_not_inherited(const ContextFacts& f) {
  const std::string id = "PCTX-11";
  if (f.not_found) return not_applicable(id, "no process context was found: " + f.not_found->message());
  if (f.under_qemu_user)
    return not_applicable(id, "the target runs under qemu-user, which ignores madvise(MADV_DONTFORK): neither the flag nor "
                              "a fork can show what the guest asked for");
  const auto& snapshot = f.last ? f.last : f.first;
  if (!snapshot || snapshot->mappings.empty()) return not_applicable(id, "no snapshot of the mapping was taken");
  const auto& mapping = snapshot->mappings.front().mapping;
  std::size_t evidence = 0;
  if (f.watch)
    for (const auto& e : f.watch->events) {
      // A fork before the mapping existed, or a child in the parent's own
      // address space until its exec (vfork, posix_spawn), can inherit nothing.
      if (e.kind != conform::MappingWatchEvent::Kind::kFork || e.pid != f.judged_pid || !e.address || e.child_shares_memory)
        continue;
      if (e.child_has_mapping)
        return violated(id, "a child forked by pid " + std::to_string(e.pid) + " (pid " + std::to_string(e.child) +
                                ") inherited the mapping " + e.child_mapping_name,
                        {text_evidence("the child's mapping at " + hex_address(e.address), "none (MADV_DONTFORK)",
                                       e.child_mapping_name)});
      ++evidence;
    }
  if (!mapping.dont_fork)
    return not_applicable(id, "/proc/" + std::to_string(snapshot->pid) + "/smaps did not show the mapping's VmFlags");
  if (!*mapping.dont_fork)
    return violated(id, "the mapping " + mapping.mapping.path + " is not marked MADV_DONTFORK (no \"dc\" in its smaps VmFlags)",
                    {text_evidence("VmFlags of " + hex_address(mapping.mapping.start), "dc", "no dc")});
  return met(id, evidence + 1,
             "the mapping carries \"dc\" (MADV_DONTFORK) in smaps" +
                 (evidence ? "; " + std::to_string(evidence) + " forks seen, no child inherited it" : std::string("; no fork seen")));
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

}  // namespace tracecorr::otel_process_context

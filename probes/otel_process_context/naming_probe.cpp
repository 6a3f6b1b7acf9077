// naming (PCTX-13, 14): the mapping named by prctl after each publication and
// update, as the mapping watch saw the system calls.
#include "probes.hpp"

#include <chrono>

#include "judges.hpp"
#include "judging.hpp"

namespace tracecorr::otel_process_context {

namespace {

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

}  // namespace

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

namespace {

using conform::SessionSet;

class NamingProbe final : public conform::Probe {
 public:
  std::string name() const override { return "naming"; }
  std::vector<std::string> requirements() const override { return {"PCTX-13", "PCTX-14"}; }
  std::vector<std::string> sessions() const override { return {kWatchedSession}; }
  std::vector<Finding> judge(const SessionSet& sessions) const override {
    const auto* watched = facts(sessions, kWatchedSession);
    if (!watched) return needs_watched_session(requirements());
    return {judge_named_on_publish(*watched), judge_named_on_update(*watched)};
  }
};

}  // namespace

std::unique_ptr<conform::Probe> make_naming_probe() { return std::make_unique<NamingProbe>(); }

}  // namespace tracecorr::otel_process_context

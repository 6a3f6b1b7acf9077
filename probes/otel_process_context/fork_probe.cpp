// fork (PCTX-11): the mapping not inherited by a forked child: its smaps
// flags (MADV_DONTFORK) and the forks the watch saw.
#include "probes.hpp"

#include "judges.hpp"

namespace tracecorr::otel_process_context {

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
      if (e.kind != watch::MappingWatchEvent::Kind::kFork || e.pid != f.judged_pid || !e.address || e.child_shares_memory)
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

namespace {

using conform::SessionSet;

class ForkProbe final : public conform::Probe {
 public:
  std::string name() const override { return "fork"; }
  std::vector<std::string> requirements() const override { return {"PCTX-11"}; }
  std::vector<std::string> sessions() const override { return {kWatchedSession, kReadSession}; }
  // The read session only stands in when no watched session ran (attach mode).
  std::vector<std::string> sessions_for(const std::string&) const override { return {kWatchedSession}; }
  std::vector<Finding> judge(const SessionSet& sessions) const override {
    // The watched session also sees forks; without it, the flag alone.
    if (const auto* watched = facts(sessions, kWatchedSession)) return {judge_not_inherited(*watched)};
    if (const auto* read = facts(sessions, kReadSession)) return {judge_not_inherited(*read)};
    return none_ran(requirements());
  }
};

}  // namespace

std::unique_ptr<conform::Probe> make_fork_probe() { return std::make_unique<ForkProbe>(); }

}  // namespace tracecorr::otel_process_context

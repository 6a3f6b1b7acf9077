// Only the target's spans count (issue 29). Any local user can connect to a
// session's OTLP receiver on 127.0.0.1; forged spans posted there used to
// change verdicts. The receiver asks this, once per connection, whether the
// process at the other end belongs to the judged process tree: the peer's
// socket found by sock_diag (tracecorr/tcp_peer.hpp), held by one of the
// tree's processes (/proc/PID/fd). Connections from anything else are the
// receiver's "foreign" ones: refused, counted and named in the report.
#pragma once

#include <sys/socket.h>
#include <sys/types.h>

#include <chrono>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "tracecorr/fd.hpp"
#include "tracecorr/otlp.hpp"

namespace tracecorr::conform {

class Target;

class ExportAdmission {
 public:
  // `network_namespace_of`: the process whose network namespace the
  // receiver listens in (0: tracecorr's own); peers are looked up there.
  // `attached`: attach mode's process, known before the receiver listens (an
  // attached agent exports from the first moment): it and its descendants
  // are the tree.
  explicit ExportAdmission(pid_t network_namespace_of = 0, std::optional<pid_t> attached = std::nullopt);

  // Launch mode: the tree to admit from now on is `target`'s launched tree.
  // nullptr: none (before the launch, every peer is foreign; the agent's
  // session token still admits its exports). Waits for a check in progress,
  // so a Target may be destroyed once follow(nullptr) has returned.
  void follow(const Target* target);

  // The receiver's PeerCheck: runs on its thread. An admitted peer's
  // verdict carries its pid, which the receiver stamps on its spans
  // (ReceivedSpan::exporter_pid), and its ancestors are remembered.
  otlp::PeerVerdict check(const sockaddr_storage& local, const sockaddr_storage& peer);

  // The process judged, once known (its executable read now).
  void judged(pid_t pid);
  // Whether spans stamped `exporter` are the judged process's: it, or a
  // process whose parent chain, when its connection was admitted, reached the
  // judged pid running the judged program. A launched tree holds more than
  // the agent that stays: a run of the same program before it (`timeout 3
  // AGENT --check; exec AGENT`) exports with the agent's settings, as a child
  // of the shell whose pid the agent later takes by exec. 0 (unknown: the
  // session token from outside the tree), or no process judged yet: counts.
  bool exported_by_judged(pid_t exporter) const;

 private:
  std::vector<pid_t> tree(bool fresh);  // fresh: listed now, whatever the age of the last listing
  bool may_list_again();                 // a miss may list the tree now (a bucket of listings)
  std::string name_owner(std::uint64_t socket_inode, uid_t socket_uid);
  void remember_lineage(pid_t exporter);

  // Distinct exporting processes whose ancestors are kept: beyond, an
  // exporter not remembered counts (no evidence against it).
  static constexpr std::size_t kMaxExportersRemembered = 4096;

  mutable std::mutex mutex_;
  const Target* target_ = nullptr;
  std::optional<pid_t> attached_;
  pid_t network_namespace_of_;
  std::optional<UniqueFd> diag_;  // opened at the first check
  std::string diag_error_;
  std::vector<pid_t> tree_;
  std::chrono::steady_clock::time_point tree_read_at_{};
  double miss_listings_ = 16;  // the bucket (export_admission.cpp: kMissListingsBurst)
  std::chrono::steady_clock::time_point miss_listings_refilled_at_ = std::chrono::steady_clock::now();
  struct Ancestor {
    pid_t pid = 0;
    std::string executable;  // /proc/PID/exe then
  };
  std::map<pid_t, std::vector<Ancestor>> lineage_;  // exporter -> itself, its parent, ... when admitted
  std::optional<Ancestor> judged_;
  std::size_t owners_named_ = 0;  // a bounded /proc scan each: a few per session
};

// 32 hex digits from the kernel's random source: a launch's session token.
std::string random_session_token();

}  // namespace tracecorr::conform

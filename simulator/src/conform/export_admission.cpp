#include "tracecorr/conform/export_admission.hpp"

#include <sys/random.h>
#include <sys/stat.h>

#include <algorithm>
#include <map>

#include "tracecorr/text.hpp"
#include "tracecorr/conform/target.hpp"
#include "tracecorr/procfs.hpp"
#include "tracecorr/tcp_peer.hpp"

namespace tracecorr::conform {
namespace {

using Clock = std::chrono::steady_clock;

// The tree is listed again when older than this, and at once when a peer is
// not in it: a process forked since the last listing exports too (a second
// worker forked right after the first, a restarted agent). Each listing reads
// every member's /proc/PID/stat (the fallback hold: every process's): a flood
// of foreign connections must not make the receiver's thread do it more than
// a few times a second. So misses re-list from a bucket: kMissListingsBurst at
// once (a burst of new exporters), refilled at kMissListingsPerSecond.
constexpr auto kTreeInterval = std::chrono::milliseconds(500);
constexpr double kMissListingsBurst = 16;
constexpr double kMissListingsPerSecond = 10;
constexpr int kMaxDepth = 64;
// Naming a foreign peer's process looks through every process's descriptors:
// on the receiver's thread, so bounded (a few per session, this many
// descriptors each: tens of milliseconds of readlink). A bound of work, not of
// wall time: 50 ms of wall time named no one on a loaded CI machine, so a
// forger was reported by its uid alone.
constexpr std::size_t kNamingFds = 50'000;

// `root` and every live process whose parent chain reaches it.
std::vector<pid_t> root_and_descendants(pid_t root) {
  std::map<pid_t, pid_t> parent;
  for (int pid : numbered_entries("/proc"))
    if (auto st = read_process_stat(pid); st && st->state != 'Z' && st->state != 'X') parent.emplace(pid, st->ppid);
  std::vector<pid_t> out;
  for (const auto& [pid, ppid] : parent) {
    pid_t at = pid;
    for (int depth = 0; depth <= kMaxDepth && at > 1; ++depth) {
      if (at == root) {
        out.push_back(pid);
        break;
      }
      auto it = parent.find(at);
      if (it == parent.end()) break;
      at = it->second;
    }
  }
  return out;
}

std::string describe_process(pid_t pid) {
  auto st = read_process_stat(pid);
  struct stat dir {};
  std::string text = "pid " + std::to_string(pid);
  if (st) text += " (" + printable_text(st->comm) + ")";
  if (::stat(("/proc/" + std::to_string(pid)).c_str(), &dir) == 0) text += " uid " + std::to_string(dir.st_uid);
  return text;
}

}  // namespace

ExportAdmission::ExportAdmission(pid_t network_namespace_of, std::optional<pid_t> attached)
    : attached_(attached), network_namespace_of_(network_namespace_of) {}

void ExportAdmission::follow(const Target* target) {
  std::lock_guard lock(mutex_);
  target_ = target;
  tree_.clear();
  tree_read_at_ = {};
}

bool ExportAdmission::may_list_again() {
  const auto now = Clock::now();
  const double refill = std::chrono::duration<double>(now - miss_listings_refilled_at_).count() * kMissListingsPerSecond;
  miss_listings_ = std::min(kMissListingsBurst, miss_listings_ + refill);
  miss_listings_refilled_at_ = now;
  if (miss_listings_ < 1) return false;
  miss_listings_ -= 1;
  return true;
}

std::vector<pid_t> ExportAdmission::tree(bool fresh) {
  if (!fresh && Clock::now() - tree_read_at_ < kTreeInterval) return tree_;
  tree_.clear();
  if (attached_) tree_ = root_and_descendants(*attached_);
  else if (target_)
    for (const auto& p : target_->processes()) tree_.push_back(p.pid);
  tree_read_at_ = Clock::now();
  return tree_;
}

void ExportAdmission::remember_lineage(pid_t exporter) {
  if (lineage_.count(exporter) || lineage_.size() >= kMaxExportersRemembered) return;
  std::vector<Ancestor> chain{{exporter, executable_of(exporter)}};
  pid_t at = exporter;
  for (int depth = 0; depth < kMaxDepth && at > 1; ++depth) {
    auto st = read_process_stat(at);
    if (!st) break;
    at = st->ppid;
    chain.push_back({at, executable_of(at)});
  }
  lineage_.emplace(exporter, std::move(chain));
}

void ExportAdmission::judged(pid_t pid) {
  std::lock_guard lock(mutex_);
  judged_ = Ancestor{pid, executable_of(pid)};
}

bool ExportAdmission::exported_by_judged(pid_t exporter) const {
  std::lock_guard lock(mutex_);
  if (exporter == 0 || !judged_) return true;
  auto it = lineage_.find(exporter);
  if (it == lineage_.end()) return exporter == judged_->pid || lineage_.size() >= kMaxExportersRemembered;
  // The judged pid in the exporter's chain, running the judged program then:
  // the same pid before its exec (a shell running `AGENT --check` before it
  // execs AGENT) is another program, and its children are not the agent's.
  return std::any_of(it->second.begin(), it->second.end(), [&](const Ancestor& a) {
    return a.pid == judged_->pid && (a.executable.empty() || judged_->executable.empty() || a.executable == judged_->executable);
  });
}

std::string ExportAdmission::name_owner(std::uint64_t socket_inode, uid_t socket_uid) {
  const std::string whose = "a process of uid " + std::to_string(socket_uid) + " outside the judged tree";
  if (owners_named_ >= otlp::ReceiverCounters::kForeignPeersNamed) return whose;
  ++owners_named_;
  if (auto holder = host_holder_of_socket(socket_inode, kNamingFds)) return describe_process(*holder);
  return whose;
}

otlp::PeerVerdict ExportAdmission::check(const sockaddr_storage& local, const sockaddr_storage& peer) {
  std::lock_guard lock(mutex_);
  if (!diag_) {
    auto diag = open_sock_diag(network_namespace_of_);
    if (!diag) return {false, false, "a peer tracecorr cannot identify (" + diag.error().message() + ")"};
    diag_ = std::move(*diag);
  }
  auto socket = tcp_peer_socket(diag_->get(), local, peer, network_namespace_of_);
  if (!socket && socket.error().kind == ErrorKind::kNotFound) return {false, true, "a peer whose socket is gone"};
  if (!socket) return {false, false, "a peer tracecorr cannot identify (" + socket.error().message() + ")"};
  // Closed by its process before we accepted (an exporter that gave up waiting, its thread interrupted).
  if (socket->inode == 0) return {false, true, "a peer whose socket no process holds (" + tcp_state_name(socket->state) + ")"};
  if (attached_ || target_) {
    auto holder = holder_of_socket(socket->inode, tree(false));
    if (!holder && may_list_again()) holder = holder_of_socket(socket->inode, tree(true));
    if (holder) {
      remember_lineage(*holder);
      return {true, false, "", *holder};
    }
  }
  // Closed while it was being looked for (an exporter giving up, or
  // interrupted mid-request, as the tree's own do): its holder is nobody
  // now, and it was no attack. Asked again, the socket is gone or held by
  // no descriptor.
  auto again = tcp_peer_socket(diag_->get(), local, peer);
  if ((!again && again.error().kind == ErrorKind::kNotFound) || (again && again->inode != socket->inode))
    return {false, true, "a peer whose socket closed while it was identified"};
  return {false, false, name_owner(socket->inode, socket->uid)};
}

std::string random_session_token() {
  unsigned char bytes[16];
  std::size_t got = 0;
  while (got < sizeof bytes) {
    ssize_t n = ::getrandom(bytes + got, sizeof bytes - got, 0);
    if (n > 0) got += static_cast<std::size_t>(n);
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string token;
  for (unsigned char b : bytes) token += {kHex[b >> 4], kHex[b & 15]};
  return token;
}

}  // namespace tracecorr::conform

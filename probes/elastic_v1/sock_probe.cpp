// SOCK: the agent's socket, examined through the target's root while it ran.
#include "judging.hpp"
#include "probes.hpp"
#include "scenarios.hpp"

namespace tracecorr::elastic_v1 {

using namespace tracecorr::conform;
namespace {

std::string mode_string(unsigned mode) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "%04o", mode & 07777);
  return buf;
}

class SockProbe final : public Probe {
 public:
  std::string name() const override { return "sock"; }
  std::vector<std::string> requirements() const override { return {"SOCK-01", "SOCK-02", "SOCK-03", "SOCK-04"}; }
  std::vector<std::string> sessions() const override { return {kEnabledSession}; }

  std::vector<Finding> judge(const SessionSet& sessions) const override {
    const SessionEvidence* s = sessions.find(kEnabledSession);
    if (!s) return not_run(requirements());
    auto storage = facts(*s).storage();
    if (!storage) return not_run(requirements(), "no process storage, so no socket path (see PROC)");
    const auto& path = storage->socket_file_path;
    const auto& socket = facts(*s).socket_facts;
    if (!socket) {
      std::string why = facts(*s).socket_error ? facts(*s).socket_error->message() : "could not be examined";
      return {not_applicable("SOCK-01", "no socket at " + path),
              violated("SOCK-02", "socket-file-path \"" + path + "\" does not lead to a socket: " + why,
                       {text_evidence("socket-file-path", "a bound datagram socket", why)}),
              not_applicable("SOCK-03", "no socket at " + path), not_applicable("SOCK-04", "no socket at " + path)};
    }
    std::vector<Finding> out;
    if (!socket->is_socket) {
      out.push_back(not_applicable("SOCK-01", path + " is " + describe_file_type(socket->file_type) + ", not a socket"));
    } else if (!socket->bound_by_target) {
      // Someone else's socket: its type says nothing about the agent's (SOCK-02 fails).
      out.push_back(not_applicable("SOCK-01", "the target holds no descriptor for the socket at " + path + " (see SOCK-02)"));
    } else if (socket->datagram) {
      out.push_back(met("SOCK-01", 1, "AF_UNIX SOCK_DGRAM (the target's fd " + std::to_string(socket->target_fd) +
                                       ", bound to that file; sock_diag type 2)"));
    } else {
      out.push_back(violated("SOCK-01", "the socket is not a datagram socket",
                             {text_evidence("type of the target's socket bound there (sock_diag)", "2 (SOCK_DGRAM)",
                                            std::to_string(socket->socket_type) +
                                                (socket->socket_type == 1 ? " (SOCK_STREAM)" : ""))}));
    }
    bool reachable = socket->is_socket && socket->bound_by_target && facts(*s).could_send;
    if (reachable)
      out.push_back(met("SOCK-02", 1, path + " resolves inside the target's root to a socket it holds, and accepts a connection"));
    else
      out.push_back(violated(
          "SOCK-02", "socket-file-path \"" + path + "\" does not name a socket the agent holds",
          {text_evidence("socket-file-path", "a socket bound by the target, reachable through /proc/PID/root",
                         std::string(socket->is_socket ? "a socket" : "not a socket") +
                             (socket->bound_by_target ? ", held by the target" : ", not held by the target") +
                             (facts(*s).socket_error ? "; connect: " + facts(*s).socket_error->message() : ""))}));
    if (!socket->bound_by_target)
      out.push_back(not_applicable("SOCK-03", "the target holds no descriptor for the socket"));
    else if (socket->target_nonblocking)
      out.push_back(met("SOCK-03", 1, "the target's descriptor has O_NONBLOCK"));
    else
      out.push_back(violated("SOCK-03", "the agent's socket descriptor is blocking",
                             {text_evidence("/proc/PID/fdinfo/" + std::to_string(socket->target_fd) + " flags",
                                            "O_NONBLOCK (04000) set", "not set")}));
    bool private_socket = socket->owner == socket->target_uid && (socket->mode & 0022) == 0;
    std::string actual = "owner uid " + std::to_string(socket->owner) + " (target uid " +
                         std::to_string(socket->target_uid) + "), mode " + mode_string(socket->mode);
    if (private_socket)
      out.push_back(met("SOCK-04", 1, actual));
    else
      out.push_back(violated("SOCK-04", "other users can write to the socket: " + actual,
                             {text_evidence(path, "owned by the agent's user, no group/other write bits", actual)}));
    return out;
  }
};

}  // namespace

std::unique_ptr<Probe> make_sock_probe() { return std::make_unique<SockProbe>(); }

}  // namespace tracecorr::elastic_v1

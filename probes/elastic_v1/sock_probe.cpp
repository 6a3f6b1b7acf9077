// SOCK: the agent's socket, examined through the target's root while it ran.
#include "elastic_v1/checks.hpp"
#include "judging.hpp"
#include "probes.hpp"
#include "scenarios.hpp"

namespace tracecorr::elastic_v1 {

using namespace tracecorr::conform;
namespace {

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
    // Reachable: the session connected (the channel refuses a socket the
    // target does not hold, so a connection proves it).
    return check_socket(path, facts(*s).socket_facts, facts(*s).socket_error, facts(*s).could_send);
  }
};

}  // namespace

std::unique_ptr<Probe> make_sock_probe() { return std::make_unique<SockProbe>(); }

}  // namespace tracecorr::elastic_v1

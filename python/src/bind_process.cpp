// Processes: inspection, the agent's socket, and launching/attaching targets.
#include <pybind11/chrono.h>
#include <pybind11/stl.h>

#include <optional>

#include "common.hpp"
#include "tracecorr/conform/target.hpp"
#include "tracecorr/inspector.hpp"
#include "tracecorr/socket.hpp"

namespace tracecorr::python {

namespace {

// AgentSocket with an explicit close(), so Python can scope it (context manager).
struct PySocket {
  std::optional<AgentSocket> socket;
  AgentSocket& get() {
    if (!socket) throw py::value_error("the socket is closed");
    return *socket;
  }
};

// conform::Target behind a unique_ptr so it can be stopped and released explicitly.
struct PyTarget {
  std::unique_ptr<conform::Target> target;
  conform::Target& get() {
    if (!target) throw py::value_error("the target was released");
    return *target;
  }
};

}  // namespace

void bind_process(py::module_& m) {
  m.def(
      "inspect_process",
      [](pid_t pid, bool read_threads, bool check_socket_reachable, const std::string& protocol) {
        InspectRequest o;
        o.read_threads = read_threads;
        o.check_socket_reachable = check_socket_reachable;
        o.want_text = false;
        // As `tracecorr inspect --json`: one protocol's document, or one member per protocol.
        nlohmann::json by_protocol = nlohmann::json::object();
        for (const auto* inspector : inspectors()) {
          if (!protocol.empty() && inspector->protocol() != protocol) continue;
          std::optional<Expected<InspectReport>> report;
          {
            py::gil_scoped_release nogil;
            report.emplace(inspector->inspect(pid, o));
          }
          by_protocol[std::string(inspector->protocol())] = unwrap(std::move(*report)).json;
        }
        if (by_protocol.empty()) throw py::value_error("no inspector for protocol '" + protocol + "'");
        return json_to_py(by_protocol.size() == 1 ? by_protocol.begin().value() : by_protocol);
      },
      py::arg("pid"), py::arg("read_threads") = true, py::arg("check_socket_reachable") = true,
      py::arg("protocol") = "",
      "Everything one agent process exposes (the `tracecorr inspect --json` document) as a dict: of `protocol` "
      "only when given (ValueError when no inspector has that id). TracecorrError when the process cannot be "
      "examined.");

  py::enum_<SendOutcome>(m, "SendOutcome", "What a non-blocking send did.")
      .value("SENT", SendOutcome::Sent)
      .value("WOULD_BLOCK", SendOutcome::WouldBlock)
      .value("REFUSED", SendOutcome::Refused);

  py::class_<PySocket>(m, "AgentSocket",
                       "The agent's datagram socket, resolved inside /proc/PID/root; sends never block.")
      .def_static(
          "connect",
          [](pid_t pid, const std::string& path) {
            std::optional<Expected<AgentSocket>> s;
            {
              py::gil_scoped_release nogil;
              s.emplace(AgentSocket::connect(pid, path));
            }
            auto out = std::make_unique<PySocket>();
            out->socket.emplace(unwrap(std::move(*s)));
            return out;
          },
          py::arg("pid"), py::arg("path"), "Connects to `path` as seen by `pid`; refuses anything but a datagram socket `pid` itself holds.")
      .def(
          "send", [](PySocket& s, const py::bytes& b) {
            std::string_view v = b;
            return s.get().send({reinterpret_cast<const std::uint8_t*>(v.data()), v.size()});
          },
          py::arg("datagram"), "MSG_DONTWAIT send: SENT, WOULD_BLOCK (queue full, EAGAIN) or REFUSED.")
      .def_property_readonly("last_errno", [](PySocket& s) { return s.get().last_errno(); })
      .def_property_readonly("fd", [](PySocket& s) { return s.socket ? s.socket->fd() : -1; })
      .def_property_readonly("closed", [](const PySocket& s) { return !s.socket.has_value(); })
      .def("close", [](PySocket& s) { s.socket.reset(); }, "Closes the descriptor (idempotent).")
      .def("__enter__", [](py::object self) { return self; })
      .def("__exit__", [](PySocket& s, py::args) { s.socket.reset(); });

  py::class_<PyTarget>(m, "Target",
                       "A process under test: launched (stdout/stderr captured; stopped when released) or attached.")
      .def_static(
          "launch",
          [](std::vector<std::string> argv, std::map<std::string, std::string> env,
             std::vector<std::string> unset_env) {
            conform::LaunchSpec spec{std::move(argv), std::move(env), std::move(unset_env)};
            auto out = std::make_unique<PyTarget>();
            out->target = unwrap(conform::Target::launch(spec));
            return out;
          },
          py::arg("argv"), py::arg("env") = std::map<std::string, std::string>{},
          py::arg("unset_env") = std::vector<std::string>{},
          "Starts argv (argv[0] looked up in PATH) with env added to the inherited environment.")
      .def_static(
          "attach",
          [](pid_t pid) {
            auto out = std::make_unique<PyTarget>();
            out->target = unwrap(conform::Target::attach(pid));
            return out;
          },
          py::arg("pid"), "Attaches to a running process (left alone when released).")
      .def_property_readonly("pid", [](PyTarget& t) { return t.get().pid(); })
      .def_property_readonly("launched", [](PyTarget& t) { return t.get().launched(); })
      .def("alive", [](PyTarget& t) { return t.get().alive(); })
      .def("exit_description", [](PyTarget& t) { return t.get().exit_description(); },
           "How the process ended ('exited with 0', 'killed by SIGKILL'), or None while it runs.")
      .def(
          "stop",
          [](PyTarget& t, double grace_s) {
            auto& target = t.get();
            py::gil_scoped_release nogil;
            return target.stop(std::chrono::milliseconds(static_cast<long long>(grace_s * 1000)));
          },
          py::arg("grace") = 2.0, "SIGTERM, then SIGKILL after `grace` seconds. Returns how it ended.")
      .def("output", [](PyTarget& t) { return py::bytes(t.get().output()); },
           "stdout and stderr captured so far (launched targets), as bytes.")
      .def("description", [](PyTarget& t) { return t.get().description(); })
      .def(
          "processes",
          [](PyTarget& t) {
            py::list out;
            for (const auto& p : t.get().processes())
              out.append(py::module_::import("types").attr("SimpleNamespace")(
                  py::arg("pid") = p.pid, py::arg("ppid") = p.ppid, py::arg("depth") = p.depth,
                  py::arg("comm") = p.comm, py::arg("in_group") = p.in_group));
            return out;
          },
          "The launched process and its live descendants, parents first (pid, ppid, depth, comm, in_group).")
      .def(
          "release",
          [](PyTarget& t) {
            py::gil_scoped_release nogil;
            t.target.reset();
          },
          "Releases the target: a launched one is stopped, an attached one left alone.");
}

}  // namespace tracecorr::python

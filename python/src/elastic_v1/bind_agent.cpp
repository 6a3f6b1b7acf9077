// The engine's host agent with Elastic v1's part (over an engine sampler), and its stack trace ids.
#include <pybind11/stl.h>

#include <atomic>

#include "common.hpp"
#include "elastic_v1/agent/correlation.hpp"
#include "elastic_v1/agent/hook.hpp"
#include "elastic_v1/bindings.hpp"
#include "tracecorr/host_agent.hpp"
#include "tracecorr/sampler.hpp"

namespace tracecorr::python {

namespace agent = tracecorr::elastic_v1::agent;

namespace {

// The engine's HostAgent with Elastic's part, plus its stop flag; keeps its
// sampler alive through keep_alive.
struct PyHostAgent {
  std::atomic<bool> stop{false};
  std::unique_ptr<HostAgent> agent;
};

}  // namespace

void bind_elastic_v1_agent(py::module_& m) {
  m.def(
      "stack_trace_id",
      [](const std::vector<std::uint64_t>& frames) { return to_bytes(agent::stack_trace_id(frames)); },
      py::arg("frames"), "The 16-byte stack trace id the host agent gives these frames (XXH3-128).");

  py::class_<PyHostAgent>(m, "HostAgent",
                          "The reference host agent: registers, samples and reports correlations to agent processes.")
      .def(py::init([](Sampler& sampler, std::vector<pid_t> pids, bool all, std::uint32_t samples_delay_ms,
                       std::string host_id, const std::string& personality, unsigned frequency_hz,
                       double flush_interval_s, double duration_s) {
             auto h = std::make_unique<PyHostAgent>();
             agent::AgentOptions elastic;
             elastic.samples_delay_ms = samples_delay_ms;
             elastic.host_id = std::move(host_id);
             if (!agent::parse_personality(personality, elastic.personality))
               throw py::value_error("unknown personality '" + personality + "' (spec, ebpf-profiler)");
             elastic.flush_interval = std::chrono::milliseconds(static_cast<long long>(flush_interval_s * 1000));
             HostAgentOptions o;
             o.pids = std::move(pids);
             o.all = all;
             o.frequency_hz = frequency_hz;
             if (duration_s > 0) o.duration = std::chrono::milliseconds(static_cast<long long>(duration_s * 1000));
             o.log = nullptr;
             h->agent = std::make_unique<HostAgent>(o, sampler);
             auto run = h->agent->make_run();  // the first part's: always a slot
             if (!run) throw py::value_error(run.error().message());
             h->agent->add_part(agent::make_agent_part(elastic, std::move(*run)));
             return h;
           }),
           py::arg("sampler"), py::arg("pids") = std::vector<pid_t>{}, py::arg("all") = false,
           py::arg("samples_delay_ms") = 1000u, py::arg("host_id") = "", py::arg("personality") = "spec",
           py::arg("frequency_hz") = 99u, py::arg("flush_interval") = 0.0, py::arg("duration") = 0.0,
           py::keep_alive<1, 2>(),
           "duration 0: run() returns only after stop(). personality: 'spec' or 'ebpf-profiler'.")
      .def(
          "run",
          [](PyHostAgent& h) {
            std::optional<Status> st;
            {
              py::gil_scoped_release nogil;
              st.emplace(h.agent->run(h.stop));
            }
            check(*st);
          },
          "Runs (GIL released) until the duration ends or stop() is called from another thread.")
      .def("stop", [](PyHostAgent& h) { h.stop.store(true); }, "Asks run() to return.")
      .def("summary", [](const PyHostAgent& h) { return json_to_py(h.agent->summary()); },
           "What the agent read and sent, per process and transaction (the `tracecorr agent --json` document).");
}

}  // namespace tracecorr::python

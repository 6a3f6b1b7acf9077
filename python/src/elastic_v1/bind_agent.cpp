// Samplers (ptrace always, BPF when tracecorr_bpf is built) and the reference host agent.
#include <pybind11/stl.h>

#include <atomic>

#include "common.hpp"
#include "elastic_v1/agent/correlation.hpp"
#include "elastic_v1/agent/host_agent.hpp"
#include "tracecorr/sampler.hpp"
#if defined(TRACECORR_HAVE_BPF)
#include "bpf_sampler.hpp"
#endif

namespace tracecorr::python {

namespace agent = tracecorr::elastic_v1::agent;

namespace {

// HostAgent plus its stop flag; keeps its sampler alive through keep_alive.
struct PyHostAgent {
  agent::AgentOptions options;
  std::atomic<bool> stop{false};
  std::unique_ptr<agent::HostAgent> agent;
};

py::dict sample_to_py(const Sample& s) {
  py::dict d;
  d["pid"] = s.pid;
  d["tid"] = s.tid;
  d["cpu"] = s.cpu;
  d["time_ns"] = s.time_ns;
  d["thread_pointer"] = s.thread_pointer;
  d["record_pointer"] = s.record_pointer;
  d["error"] = to_string(s.error);
  d["record"] = s.record ? py::object(to_bytes(*s.record)) : py::none();
  d["record_declared_length"] = s.record_declared_length;
  d["frames"] = s.frames;
  d["stack_errno"] = s.stack_errno;
  return d;
}

}  // namespace

void bind_agent(py::module_& m) {
  py::class_<Sampler>(m, "Sampler", "Interrupts tracked processes' threads and reads their records and stacks.")
      .def_property_readonly("name", &Sampler::name, "'bpf' or 'ptrace'")
      .def(
          "track",
          [](Sampler& s, pid_t pid, const RecordLayout& layout, std::optional<std::int64_t> tls_offset,
             std::optional<std::uint64_t> area_address) {
            // The site must be the one the layout's indirection needs.
            if (uses_thread_pointer(layout) ? !tls_offset || area_address : !area_address || tls_offset)
              throw py::value_error(uses_thread_pointer(layout)
                                        ? "layout " + layout.name + " reads a TLS slot: give tls_offset only"
                                        : "layout " + layout.name + " reads a memory area: give area_address only");
            check(s.track(pid, layout,
                          tls_offset ? PointerSite::tls_offset(*tls_offset) : PointerSite::area(*area_address)));
          },
          py::arg("pid"), py::arg("layout"), py::kw_only(), py::arg("tls_offset") = py::none(),
          py::arg("area_address") = py::none(),
          "Starts sampling pid's threads, reading records by `layout` (tracecorr.tls_record_layout() for Elastic v1) "
          "through the pointer at thread pointer + tls_offset, or in the memory area at area_address.")
      .def(
          "untrack", [](Sampler& s, pid_t pid) { check(s.untrack(pid)); }, py::arg("pid"))
      .def(
          "poll",
          [](Sampler& s, double timeout_s) {
            std::vector<Sample> samples;
            std::optional<Expected<std::size_t>> r;
            {
              py::gil_scoped_release nogil;
              r.emplace(s.poll([&](const Sample& x) { samples.push_back(x); },
                               std::chrono::milliseconds(static_cast<long long>(timeout_s * 1000))));
            }
            unwrap(std::move(*r));
            py::list out;
            for (const auto& x : samples) out.append(sample_to_py(x));
            return out;
          },
          py::arg("timeout"),
          "Samples taken so far as dicts (record: the bytes the layout read, or None), waiting up to `timeout` s.")
      .def(
          "counters",
          [](const Sampler& s) {
            py::dict d;
            for (const auto& [k, v] : s.counters().named()) d[py::str(k)] = v;
            return d;
          },
          "The sampler's counters as a dict.");

  m.def(
      "make_ptrace_sampler",
      [](unsigned frequency_hz) {
        PtraceSamplerOptions o;
        o.frequency_hz = frequency_hz;
        return make_ptrace_sampler(o);
      },
      py::arg("frequency_hz") = 99, "PTRACE_SEIZE/INTERRUPT sampler (wall clock; needs no BPF).");
#if defined(TRACECORR_HAVE_BPF)
  m.def(
      "make_bpf_sampler",
      [](unsigned frequency_hz, std::size_t ringbuf_bytes) {
        bpf::BpfSamplerOptions o;
        o.frequency_hz = frequency_hz;
        o.ringbuf_bytes = ringbuf_bytes;
        std::optional<Expected<std::unique_ptr<Sampler>>> r;
        {
          py::gil_scoped_release nogil;
          r.emplace(bpf::make_bpf_sampler(o));
        }
        return unwrap(std::move(*r));
      },
      py::arg("frequency_hz") = 99, py::arg("ringbuf_bytes") = std::size_t{8u << 20},
      "perf_event + BPF sampler on every online CPU; TracecorrError says why when it cannot load.");
#endif

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
             auto& o = h->options;
             o.pids = std::move(pids);
             o.all = all;
             o.samples_delay_ms = samples_delay_ms;
             o.host_id = std::move(host_id);
             if (!agent::parse_personality(personality, o.personality))
               throw py::value_error("unknown personality '" + personality + "' (spec, ebpf-profiler)");
             o.frequency_hz = frequency_hz;
             o.flush_interval = std::chrono::milliseconds(static_cast<long long>(flush_interval_s * 1000));
             if (duration_s > 0) o.duration = std::chrono::milliseconds(static_cast<long long>(duration_s * 1000));
             o.log = nullptr;
             h->agent = std::make_unique<agent::HostAgent>(o, sampler);
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

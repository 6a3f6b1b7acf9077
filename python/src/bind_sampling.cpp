// Record layouts (what a sampler reads, as data) and the samplers: ptrace
// always, BPF when tracecorr_bpf is built.
#include <pybind11/stl.h>

#include <atomic>

#include "common.hpp"
#include "tracecorr/discovery.hpp"
#include "tracecorr/memory.hpp"
#include "tracecorr/record_layout.hpp"
#include "tracecorr/sampled_processes.hpp"
#include "tracecorr/sampler.hpp"
#include "tracecorr/tls.hpp"
#if defined(TRACECORR_HAVE_BPF)
#include "bpf_sampler.hpp"
#endif

namespace tracecorr::python {

namespace {

py::dict sample_to_py(const Sample& s) {
  py::dict d;
  d["pid"] = s.pid;
  d["tid"] = s.tid;
  d["slot"] = s.slot;
  d["cpu"] = s.cpu;
  d["time_ns"] = s.time_ns;
  d["thread_pointer"] = s.thread_pointer;
  d["record_pointer"] = s.record_pointer;
  d["error"] = to_string(s.error);
  d["record"] = s.record ? py::object(to_bytes(*s.record)) : py::none();
  d["record_declared_length"] = s.record_declared_length;
  d["frames"] = s.frames;
  d["stack_errno"] = s.stack_errno;
  d["context_published_at"] = s.context_published_at ? py::object(py::int_(*s.context_published_at)) : py::none();
  return d;
}

}  // namespace

void bind_sampling(py::module_& m) {
  // ---- record layouts: what samplers read, as data -------------------------------------
  m.attr("RECORD_MAX_BYTES") = kRecordMaxBytes;
  m.attr("LAYOUTS_PER_PROCESS") = kLayoutsPerProcess;
  py::class_<RecordLayout>(m, "RecordLayout",
                           "A published record as data: its length (fixed, or a size field), valid byte, fields and "
                           "how it is reached (a pointer in a TLS slot, or in a memory area). Samplers read through one.")
      .def(py::init([](std::string name, std::optional<std::size_t> fixed_size,
                       std::optional<std::tuple<std::size_t, std::size_t, std::size_t>> size_field, std::size_t max_size,
                       std::size_t valid_offset, std::optional<std::vector<std::uint8_t>> valid_values,
                       std::optional<std::size_t> presence_offset,
                       std::vector<std::tuple<std::string, std::size_t, std::size_t>> fields,
                       std::optional<std::size_t> memory_area_pointer_offset) {
             if (fixed_size.has_value() == size_field.has_value())
               throw py::value_error("give exactly one of fixed_size and size_field=(offset, width, header_length)");
             RecordLayout l;
             l.name = std::move(name);
             if (fixed_size) l.length = FixedSize{*fixed_size};
             else l.length = SizeField{std::get<0>(*size_field), std::get<1>(*size_field), std::get<2>(*size_field)};
             l.max_size = max_size;
             l.valid_offset = valid_offset;
             if (valid_values) l.valid_values = ByteValues::of(*valid_values);
             l.presence_offset = presence_offset;
             for (auto& [n, o, sz] : fields) l.fields.push_back({n, o, sz});
             if (memory_area_pointer_offset) l.indirection = PointerInMemoryArea{*memory_area_pointer_offset};
             check(l.check());
             return l;
           }),
           py::arg("name"), py::kw_only(), py::arg("fixed_size") = py::none(), py::arg("size_field") = py::none(),
           py::arg("max_size") = kRecordMaxBytes, py::arg("valid_offset"), py::arg("valid_values") = py::none(),
           py::arg("presence_offset") = py::none(),
           py::arg("fields") = std::vector<std::tuple<std::string, std::size_t, std::size_t>>{},
           py::arg("memory_area_pointer_offset") = py::none(),
           "valid_values None: any non-zero value; memory_area_pointer_offset None: the pointer is in a TLS slot. "
           "TracecorrError when the layout cannot be read as declared.")
      .def_readonly("name", &RecordLayout::name)
      .def_readonly("max_size", &RecordLayout::max_size)
      .def_readonly("valid_offset", &RecordLayout::valid_offset)
      .def_property_readonly("fixed_part", &RecordLayout::fixed_part, "bytes read before the length is known")
      .def_property_readonly("in_tls_slot", [](const RecordLayout& l) { return uses_thread_pointer(l); })
      .def(
          "record_length",
          [](const RecordLayout& l, const py::bytes& b) {
            std::string s = b;
            return unwrap(record_length(l, view(s)));
          },
          py::arg("first_bytes"), "Total length from the first bytes; TracecorrError when truncated or over max_size.")
      .def("__repr__", [](const RecordLayout& l) { return "<RecordLayout " + l.name + ">"; });

  // ---- a TLS variable in any access model: what a sampler is given to reach it ------------
  py::class_<TlsVariableAccess>(m, "TlsVariable",
                                "How a process's threads reach a TLS variable (resolve_tls_variable): a thread-pointer "
                                "offset, or a module's block through each thread's DTV.")
      .def_property_readonly("model", [](const TlsVariableAccess& a) { return std::string(to_string(a.model)); },
                             "'tlsdesc-static', 'tlsdesc-dynamic', 'general-dynamic', 'initial-exec', ...")
      .def_property_readonly("dynamic", &TlsVariableAccess::dynamic, "reached through each thread's DTV")
      .def_property_readonly("c_library", [](const TlsVariableAccess& a) { return std::string(to_string(a.c_library)); })
      .def_property_readonly("module_id",
                             [](const TlsVariableAccess& a) -> std::optional<std::uint64_t> {
                               if (!a.site.module) return std::nullopt;
                               return a.site.module->module_id;
                             })
      .def_property_readonly("offset", [](const TlsVariableAccess& a) { return a.site.value; },
                             "from the thread pointer (two's complement), or from the module's block")
      .def_readonly("explanation", &TlsVariableAccess::explanation)
      .def("__repr__", [](const TlsVariableAccess& a) { return "<TlsVariable " + std::string(to_string(a.model)) + ">"; });
  m.def(
      "resolve_tls_variable",
      [](pid_t pid, const std::string& library_regex, const std::string& tls_symbol, bool look_in_executables) {
        DiscoveryOptions options;
        options.name_regex = library_regex;
        options.tls_symbol = tls_symbol;
        options.look_in_executables = look_in_executables;
        LibraryCache cache;
        auto found = unwrap(discover_process(pid, options, cache));
        if (!found)
          raise_error(make_error(ErrorKind::kNotFound, "no module defines " + tls_symbol, "pid " + std::to_string(pid)));
        const CLibrary c_library = unwrap(detect_c_library(pid, found->elf.machine));
        return unwrap(resolve_tls_access(LiveProcessMemory(pid), *found, c_library));
      },
      py::arg("pid"), py::kw_only(), py::arg("library_regex"), py::arg("tls_symbol"),
      py::arg("look_in_executables") = false,
      "Finds the module of pid defining tls_symbol (a library matching library_regex, or with look_in_executables "
      "a program) and how its threads reach the variable, in whichever TLS access model it was built and loaded with. "
      "TracecorrError (with its kind) when it cannot be read.");

  py::class_<Sampler>(m, "Sampler", "Interrupts tracked processes' threads and reads their records and stacks.")
      .def_property_readonly("name", &Sampler::name, "'bpf' or 'ptrace'")
      .def(
          "track",
          [](Sampler& s, pid_t pid, const RecordLayout& layout, std::optional<std::int64_t> tls_offset,
             std::optional<std::uint64_t> area_address, std::optional<TlsVariableAccess> tls_variable,
             LayoutSlot slot) {
            // The site must be the one the layout's indirection needs.
            const int sites = tls_offset.has_value() + area_address.has_value() + tls_variable.has_value();
            if (uses_thread_pointer(layout) ? sites != 1 || area_address : sites != 1 || !area_address)
              throw py::value_error(uses_thread_pointer(layout)
                                        ? "layout " + layout.name + " reads a TLS slot: give tls_offset or tls_variable only"
                                        : "layout " + layout.name + " reads a memory area: give area_address only");
            check(s.track(pid, slot, layout,
                          tls_variable ? tls_variable->site
                          : tls_offset ? PointerSite::tls_offset(*tls_offset)
                                       : PointerSite::area(*area_address)));
          },
          py::arg("pid"), py::arg("layout"), py::kw_only(), py::arg("tls_offset") = py::none(),
          py::arg("area_address") = py::none(), py::arg("tls_variable") = py::none(), py::arg("slot") = 0,
          "Starts sampling pid's threads, reading records by `layout` (a protocol package supplies its own) "
          "through the pointer at thread pointer + tls_offset, in the TLS variable resolve_tls_variable found (any "
          "access model, dynamic TLS included), or in the memory area at area_address. `slot` (< "
          "LAYOUTS_PER_PROCESS): one process may be tracked with that many layouts at once; each sample says its "
          "'slot'.")
      .def(
          "track_process_context",
          [](Sampler& s, pid_t pid, std::optional<std::uint64_t> header_address) {
            check(s.track_process_context(pid, header_address));
          },
          py::arg("pid"), py::arg("header_address"),
          "Also reads, with each of pid's samples (pid tracked), the OTel process context header at header_address "
          "(None: no longer): samples then carry its timestamp in 'context_published_at' (0: being written).")
      .def(
          "untrack",
          [](Sampler& s, pid_t pid, std::optional<LayoutSlot> slot) {
            check(slot ? s.untrack(pid, *slot) : s.untrack(pid));
          },
          py::arg("pid"), py::arg("slot") = py::none(), "Forgets slot's layout (None: every slot) of pid.")
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
      "sample_records",
      [](Sampler& sampler, const std::vector<pid_t>& pids, double duration_s) {
        const std::atomic<bool> never{false};
        std::optional<Expected<nlohmann::json>> r;
        {
          py::gil_scoped_release nogil;
          r.emplace(sample_records(sampler, pids, std::chrono::milliseconds(static_cast<long long>(duration_s * 1000)),
                                   never));
        }
        return json_to_py(unwrap(std::move(*r)));
      },
      py::arg("sampler"), py::arg("pids"), py::arg("duration"),
      "Samples the threads' records of processes that publish a sampled protocol (the host agent's part that "
      "knows no protocol) for `duration` seconds: {reader, elapsed_s, sampler, processes: [per process its "
      "protocol, where the records are, and per thread the records read with their counts and statuses]}.");
}

}  // namespace tracecorr::python

#include "elastic_v1/inspect/inspect.hpp"

#include <elf.h>
#include <sys/stat.h>

#include <cstdarg>
#include <cstdio>
#include <map>

#include "elastic_v1/checks.hpp"
#include "elastic_v1/registry.hpp"
#include "tracecorr/text.hpp"
#include "tracecorr/memory.hpp"

namespace tracecorr::elastic_v1 {
namespace {

std::string octal(unsigned v) {
  char b[16];
  std::snprintf(b, sizeof b, "0%o", v);
  return b;
}

const char* binding_name(unsigned b) {
  switch (b) {
    case STB_LOCAL: return "LOCAL";
    case STB_GLOBAL: return "GLOBAL";
    case STB_WEAK: return "WEAK";
    case STB_GNU_UNIQUE: return "UNIQUE";
  }
  return "other";
}

const char* visibility_name(unsigned v) {
  switch (v) {
    case STV_DEFAULT: return "DEFAULT";
    case STV_INTERNAL: return "INTERNAL";
    case STV_HIDDEN: return "HIDDEN";
    case STV_PROTECTED: return "PROTECTED";
  }
  return "other";
}

// ELF-02 / ELF-03: global, default visibility, pointer sized, of the right type.
// A reader's error as a finding, when it says the target broke a rule: the
// requirement the error carries (codecs name theirs), or the one its kind
// means here.
void finding_from_error(const Error& e, std::vector<Finding>& findings) {
  std::string id = e.requirement.empty() ? requirement_of_socket_error(e) : e.requirement;
  if (id.empty() || !find_requirement(id)) return;
  findings.push_back(violated(id, e.message()));
}

void inspect_storage(const ProcessMemory& mem, Inspection& out) {
  const auto& lib = *out.library;
  if (!lib.process_pointer_addr) return;
  StorageInspection s;
  s.pointer_address = *lib.process_pointer_addr;
  auto pointer = mem.read_u64(s.pointer_address);
  if (!pointer) {
    s.error = pointer.error().within("process storage pointer (" + std::string(elastic_v1::spec::kProcessStorageSymbol) + ")").message();
    out.storage = std::move(s);
    return;
  }
  s.pointer = *pointer;
  if (*pointer != 0) {
    auto decoded = decode_process_storage(mem.source_at(*pointer));
    if (decoded) {
      if (decoded->minor == 0)
        out.findings.push_back(violated("PROC-02", "process storage at " + hex_address(*pointer) +
                                                           " has layout-minor-version 0; it must be " +
                                                           std::to_string(elastic_v1::spec::kProcessStorageMinor)));
      s.fields = std::move(*decoded);
    } else {
      Error e = decoded.error().within("process storage at " + hex_address(*pointer));
      // Unreadable memory behind a published pointer breaks PROC-01.
      if (e.requirement.empty() && e.kind == ErrorKind::kUnmapped) e.requirement = "PROC-01";
      s.error = e.message();
      finding_from_error(e, out.findings);
    }
  }
  out.storage = std::move(s);
}

void inspect_socket(pid_t pid, const InspectOptions& o, Inspection& out) {
  if (!out.storage || !out.storage->fields) return;
  SocketInspection s;
  s.path = out.storage->fields->socket_file_path;
  auto facts = examine_socket(pid, s.path);
  std::optional<Error> error;
  std::optional<bool> connected;
  if (!facts) {
    s.error = facts.error().message();
    error = facts.error();
  } else {
    s.facts = *facts;
    if (!facts->is_socket) {
      s.reach_error = "not a socket: " + describe_file_type(facts->file_type) + "; nothing is sent there";
    } else if (o.check_socket_reachable) {
      // AgentSocket::connect refuses what the target does not hold before anything is sent.
      auto attempt = AgentSocket::connect(pid, s.path);
      s.reachable = attempt.ok();
      connected = attempt.ok();
      if (!attempt) {
        s.reach_error = attempt.error().message();
        error = attempt.error();
      }
    }
  }
  // The same rules as `tracecorr conform`'s SOCK probe (checks.hpp).
  for (auto& f : check_socket(s.path, s.facts, error, connected))
    if (f.outcome == Finding::Outcome::Violated) out.findings.push_back(std::move(f));
  out.socket = std::move(s);
}

void inspect_threads(const ProcessMemory& mem, ThreadPointerSource& source, Inspection& out) {
  auto tids = source.threads();
  if (!tids) {
    out.threads_error = tids.error().message();
    return;
  }
  // Every thread's pointer, the threads stopped together with one deadline
  // for them all; the records are read once they run again.
  std::vector<std::uint64_t> pointers(tids->size());
  std::map<pid_t, std::size_t> index_of;
  for (std::size_t i = 0; i < tids->size(); ++i) index_of[(*tids)[i]] = i;
  auto stopped = source.read_each_stopped(*tids, [&](pid_t tid, std::uint64_t tp) { pointers[index_of.at(tid)] = tp; },
                                          kStopAllDeadline);
  std::map<std::uint64_t, pid_t> owner_of_record;
  for (std::size_t i = 0; i < tids->size(); ++i) {
    const pid_t tid = (*tids)[i];
    ThreadInspection t;
    t.tid = tid;
    if (!stopped[i]) {
      t.error = stopped[i].error().message();
      out.threads.push_back(std::move(t));
      continue;
    }
    const std::uint64_t* tp = &pointers[i];
    t.thread_pointer = *tp;
    if (!out.tls_access) {
      t.error = "the TLS variable cannot be reached: " + out.tls_access_error;
    } else if (*tp == 0) {
      t.error = "the thread pointer is 0 (the thread has not set up TLS yet)";
    } else {
      auto read = read_thread_record(mem, elastic_v1::tls_record_layout(), *tp, out.tls_access->site);
      if (!read && read.error().kind == ErrorKind::kNotAllocated) {
        t.error = read.error().message();  // dynamic TLS the thread has not touched: nothing published
      } else if (!read) {
        t.error = read.error().message();
        // A published pointer that leads to unreadable memory breaks TLS-01
        // (the record must be complete before the pointer is set).
        Error e = read.error();
        if (e.requirement.empty() && e.kind == ErrorKind::kUnmapped) e.requirement = "TLS-01";
        finding_from_error(e, out.findings);
      } else {
        t.record_pointer = read->record_pointer;
        if (read->bytes) {
          auto rec = decode_tls_record(*read->bytes);
          if (rec) {
            if (rec->minor == 0)
              out.findings.push_back(violated("TLS-02", "thread " + std::to_string(tid) + ": record at " +
                                                                hex_address(read->record_pointer) + " has layout-minor-version 0"));
            t.record = *rec;
          } else {
            t.error = rec.error().message();
          }
          auto [it, fresh] = owner_of_record.emplace(read->record_pointer, tid);
          if (!fresh)
            out.findings.push_back(violated("TLS-03", "threads " + std::to_string(it->second) + " and " +
                                                              std::to_string(tid) + " share the record at " +
                                                              hex_address(read->record_pointer)));
        }
      }
    }
    out.threads.push_back(std::move(t));
  }
}

nlohmann::json symbol_json(const std::optional<elf::Symbol>& s) {
  if (!s) return nullptr;
  return {{"name", s->name},           {"value", hex_address(s->value)},
          {"size", s->size},           {"type", elf::describe_type(s->type)},
          {"binding", binding_name(s->binding)}, {"visibility", visibility_name(s->visibility)},
          {"defined", s->defined()}};
}

nlohmann::json optional_hex(const std::optional<std::uint64_t>& v) { return v ? nlohmann::json(hex_address(*v)) : nlohmann::json(nullptr); }

}  // namespace

Expected<Inspection> inspect_process(pid_t pid, const InspectOptions& o) {
  Inspection out;
  out.pid = pid;
  LibraryCache cache;
  auto found = discover_process(pid, o.discovery, cache, &out.passed_over);
  if (!found) return found.error();
  if (!*found) return out;
  out.library = std::move(**found);
  auto& lib = *out.library;

  // The ELF could not be analysed: say so, and go no further.
  if (!lib.analysis_error.empty()) {
    out.library_error = lib.analysis_error;
    return out;
  }

  // The same rules as `tracecorr conform`'s ELF probe (checks.hpp).
  for (auto& f : check_library(lib))
    if (f.outcome == Finding::Outcome::Violated) out.findings.push_back(std::move(f));

  LiveProcessMemory mem(pid);
  if (lib.tls_descriptor_addr) {
    auto d = read_tls_descriptor(mem, *lib.tls_descriptor_addr, lib.elf.machine);
    if (d) {
      if (d->model == TlsModel::Dynamic) out.findings.push_back(violated("TLS-07", d->explanation));
      out.tls = *d;
    } else {
      out.tls_error = d.error().message();
    }
  }
  if (lib.elf.tls && lib.elf.tls->thread_local_storage()) {
    auto c_library = detect_c_library(pid, lib.elf.machine);
    auto access = resolve_tls_access(mem, lib, c_library ? *c_library : CLibrary::Unknown);
    if (access) out.tls_access = *access;
    else out.tls_access_error = access.error().message();
  } else {
    out.tls_access_error = "the library defines no TLS variable";
  }

  inspect_storage(mem, out);
  inspect_socket(pid, o, out);

  if (o.read_threads) {
    std::unique_ptr<ThreadPointerSource> own;
    ThreadPointerSource* source = o.thread_pointers;
    if (!source) {
      own = make_ptrace_source(pid);
      source = own.get();
    }
    out.thread_pointer_source = source->describe();
    inspect_threads(mem, *source, out);
    if (auto st = source->resume(); !st && out.threads_error.empty()) out.threads_error = st.error().message();
  }
  return out;
}

nlohmann::json to_json(const Inspection& in) {
  nlohmann::json j;
  j["pid"] = in.pid;
  j["thread_pointer_source"] = in.thread_pointer_source;
  if (!in.library) {
    j["library"] = nullptr;
    return j;
  }
  const auto& lib = *in.library;
  j["library"] = {{"path", lib.path},
                  {"deleted", lib.deleted},
                  {"name_matches", lib.name_matches},
                  {"name_suffix", lib.name_suffix},
                  {"machine", elf::to_string(lib.elf.machine)},
                  {"load_bias", hex_address(lib.load_bias)},
                  {"error", in.library_error.empty() ? nlohmann::json(nullptr) : nlohmann::json(in.library_error)},
                  // Set when the file's section headers disagree with its dynamic segment (ELF analysis).
                  {"loader_view_note", lib.elf.loader_view_note.empty() ? nlohmann::json(nullptr)
                                                                        : nlohmann::json(lib.elf.loader_view_note)}};
  j["symbols"] = {{"process_storage", symbol_json(lib.elf.process_symbol)}, {"tls", symbol_json(lib.elf.tls)}};
  j["tls"] = {{"dialect", elf::to_string(lib.elf.tls_access.dialect)},
              {"relocations", lib.elf.tls_access.relocations},
              {"descriptor_address", optional_hex(lib.tls_descriptor_addr)},
              {"model", in.tls ? nlohmann::json(to_string(in.tls->model)) : nlohmann::json(nullptr)},
              {"resolver", in.tls ? nlohmann::json(hex_address(in.tls->resolver)) : nlohmann::json(nullptr)},
              {"argument", in.tls ? nlohmann::json(hex_address(in.tls->argument)) : nlohmann::json(nullptr)},
              {"tp_offset", in.tls && in.tls->model == TlsModel::StaticOffset ? nlohmann::json(in.tls->tp_offset) : nlohmann::json(nullptr)},
              {"explanation", in.tls ? nlohmann::json(in.tls->explanation) : nlohmann::json(nullptr)},
              {"error", in.tls_error.empty() ? nlohmann::json(nullptr) : nlohmann::json(in.tls_error)},
              // How the records are read: the access model, whatever the descriptor says.
              {"access_model", in.tls_access ? nlohmann::json(to_string(in.tls_access->model)) : nlohmann::json(nullptr)},
              {"access", in.tls_access ? nlohmann::json(in.tls_access->explanation) : nlohmann::json(in.tls_access_error)}};
  if (in.storage) {
    const auto& s = *in.storage;
    nlohmann::json st = {{"pointer_address", hex_address(s.pointer_address)},
                         {"pointer", optional_hex(s.pointer)},
                         {"published", s.pointer && *s.pointer != 0},
                         {"error", s.error.empty() ? nlohmann::json(nullptr) : nlohmann::json(s.error)}};
    if (s.fields) {
      st["minor"] = s.fields->minor;
      st["service_name"] = s.fields->service_name;
      st["service_environment"] = s.fields->service_environment;
      st["socket_file_path"] = s.fields->socket_file_path;
      st["encoded_size"] = s.fields->encoded_size;
    }
    j["storage"] = st;
  } else {
    j["storage"] = nullptr;
  }
  if (in.socket) {
    const auto& s = *in.socket;
    nlohmann::json so = {{"path", s.path},
                         {"error", s.error.empty() ? nlohmann::json(nullptr) : nlohmann::json(s.error)},
                         {"reachable", s.reachable},
                         {"reach_error", s.reach_error.empty() ? nlohmann::json(nullptr) : nlohmann::json(s.reach_error)}};
    if (s.facts) {
      const auto& f = *s.facts;
      so["is_socket"] = f.is_socket;
      so["datagram"] = f.datagram;
      so["bound_by_target"] = f.bound_by_target;
      so["target_fd"] = f.target_fd;
      so["target_nonblocking"] = f.target_nonblocking;
      so["owner"] = f.owner;
      so["target_uid"] = f.target_uid;
      so["mode"] = octal(f.mode);
    }
    j["socket"] = so;
  } else {
    j["socket"] = nullptr;
  }
  j["threads"] = nlohmann::json::array();
  for (const auto& t : in.threads) {
    nlohmann::json tj = {{"tid", t.tid},
                         {"thread_pointer", optional_hex(t.thread_pointer)},
                         {"record_pointer", optional_hex(t.record_pointer)},
                         {"error", t.error.empty() ? nlohmann::json(nullptr) : nlohmann::json(t.error)}};
    if (t.record) {
      const auto& r = *t.record;
      tj["record"] = {{"minor", r.minor},
                      {"valid", r.valid},
                      {"trace_present", r.trace_present},
                      {"trace_flags", r.trace_flags},
                      {"trace_id", to_hex(r.trace_id)},
                      {"span_id", to_hex(r.span_id)},
                      {"transaction_id", to_hex(r.transaction_id)}};
    } else {
      tj["record"] = nullptr;
    }
    j["threads"].push_back(std::move(tj));
  }
  j["threads_error"] = in.threads_error.empty() ? nlohmann::json(nullptr) : nlohmann::json(in.threads_error);
  j["findings"] = nlohmann::json::array();
  for (const auto& f : in.findings)
    j["findings"].push_back({{"requirement", f.requirement}, {"level", level_of(f)}, {"message", finding_message(f)}});
  return j;
}

namespace {

void appendf(std::string& out, const char* format, ...) __attribute__((format(printf, 2, 3)));
void appendf(std::string& out, const char* format, ...) {
  char buf[1024];
  va_list args;
  va_start(args, format);
  int n = std::vsnprintf(buf, sizeof buf, format, args);
  va_end(args);
  if (n < 0) return;
  if (static_cast<std::size_t>(n) < sizeof buf) {
    out.append(buf, static_cast<std::size_t>(n));
    return;
  }
  std::string big(static_cast<std::size_t>(n) + 1, '\0');
  va_start(args, format);
  std::vsnprintf(big.data(), big.size(), format, args);
  va_end(args);
  big.resize(static_cast<std::size_t>(n));
  out += big;
}

void print_symbol(std::string& out, const char* label, const std::optional<elf::Symbol>& s) {
  if (!s) {
    appendf(out, "  %-16s missing\n", label);
    return;
  }
  appendf(out, "  %-16s %s %s size %llu%s value %s\n", label, elf::describe_type(s->type).c_str(),
              s->binding == 1 ? "GLOBAL" : s->binding == 2 ? "WEAK" : s->binding == 0 ? "LOCAL" : "other-binding",
              static_cast<unsigned long long>(s->size), s->defined() ? "" : " (undefined)", hex_address(s->value).c_str());
}

// Target-controlled text (paths, service names, errors quoting them) is
// escaped: control characters could clear the screen or fake lines.
std::string safe(std::string_view text) { return tracecorr::printable_text(text); }

void print_human(std::string& out, const Inspection& in) {
  const auto& lib = *in.library;
  appendf(out, "pid %d\n", in.pid);
  appendf(out, "library          %s%s\n", safe(lib.path).c_str(), lib.deleted ? " (deleted)" : "");
  appendf(out, "  name           %s\n", lib.name_matches ? ("matches, suffix \"" + safe(lib.name_suffix) + "\"").c_str()
                                                          : "does NOT match the registry's regex");
  if (!in.library_error.empty()) {
    appendf(out, "  error          %s\n", safe(in.library_error).c_str());
  } else {
    appendf(out, "  machine        %s, load bias %s\n", elf::to_string(lib.elf.machine), hex_address(lib.load_bias).c_str());
    if (!lib.elf.loader_view_note.empty()) appendf(out, "  note           %s\n", safe(lib.elf.loader_view_note).c_str());
    appendf(out, "symbols\n");
    print_symbol(out, "process storage", lib.elf.process_symbol);
    print_symbol(out, "tls", lib.elf.tls);
    appendf(out, "tls\n  dialect        %s", elf::to_string(lib.elf.tls_access.dialect));
    for (const auto& r : lib.elf.tls_access.relocations) appendf(out, " %s", r.c_str());
    appendf(out, "\n");
    if (in.tls) {
      appendf(out, "  descriptor     %s: resolver %s argument %s\n", hex_address(in.tls->address).c_str(),
                  hex_address(in.tls->resolver).c_str(), hex_address(in.tls->argument).c_str());
      appendf(out, "  model          %s", to_string(in.tls->model));
      if (in.tls->model == TlsModel::StaticOffset) appendf(out, ", thread-pointer offset %lld", static_cast<long long>(in.tls->tp_offset));
      appendf(out, "\n                 %s\n", safe(in.tls->explanation).c_str());
    } else if (!in.tls_error.empty()) {
      appendf(out, "  descriptor     unreadable: %s\n", safe(in.tls_error).c_str());
    }
    if (in.tls_access)
      appendf(out, "  records        read by %s: %s\n", to_string(in.tls_access->model),
              safe(in.tls_access->explanation).c_str());
    else
      appendf(out, "  records        unreadable: %s\n", safe(in.tls_access_error).c_str());
  }
  appendf(out, "storage\n");
  if (!in.storage) {
    appendf(out, "  (no process storage symbol)\n");
  } else if (!in.storage->pointer) {
    appendf(out, "  unreadable: %s\n", safe(in.storage->error).c_str());
  } else if (*in.storage->pointer == 0) {
    appendf(out, "  not published yet (%s at %s is 0)\n", std::string(elastic_v1::spec::kProcessStorageSymbol).c_str(),
                hex_address(in.storage->pointer_address).c_str());
  } else if (!in.storage->fields) {
    appendf(out, "  at %s, undecodable: %s\n", hex_address(*in.storage->pointer).c_str(), safe(in.storage->error).c_str());
  } else {
    const auto& f = *in.storage->fields;
    appendf(out, "  at %s: minor %u, service_name \"%s\", service_environment \"%s\", socket_file_path \"%s\"\n",
                hex_address(*in.storage->pointer).c_str(), f.minor, safe(f.service_name).c_str(), safe(f.service_environment).c_str(),
                safe(f.socket_file_path).c_str());
  }
  if (in.socket) {
    const auto& s = *in.socket;
    appendf(out, "socket           %s\n", safe(s.path).c_str());
    if (!s.error.empty()) {
      appendf(out, "  error          %s\n", safe(s.error).c_str());
    } else if (s.facts) {
      const auto& f = *s.facts;
      appendf(out, "  %s, %s, %s, owner uid %u mode %04o, %s\n", f.is_socket ? "socket" : "NOT a socket",
                  f.datagram ? "datagram" : "not datagram",
                  f.bound_by_target ? (f.target_nonblocking ? "held by the process (non-blocking)" : "held by the process (blocking)")
                                    : "not held by the process",
                  f.owner, f.mode, s.reachable ? "reachable" : ("unreachable: " + safe(s.reach_error)).c_str());
    }
  }
  appendf(out, "threads (%s)\n", in.thread_pointer_source.c_str());
  if (!in.threads_error.empty()) appendf(out, "  error: %s\n", safe(in.threads_error).c_str());
  for (const auto& t : in.threads) {
    appendf(out, "  %-8d tp %-16s", t.tid, t.thread_pointer ? hex_address(*t.thread_pointer).c_str() : "?");
    if (t.record_pointer) appendf(out, " record %-16s", hex_address(*t.record_pointer).c_str());
    if (t.record) {
      const auto& r = *t.record;
      appendf(out, " minor %u valid %u", r.minor, r.valid);
      if (r.trace_present)
        appendf(out, " trace %s span %s transaction %s flags %02x", to_hex(r.trace_id).c_str(), to_hex(r.span_id).c_str(),
                    to_hex(r.transaction_id).c_str(), r.trace_flags);
      else
        appendf(out, " no trace");
    } else if (t.record_pointer && *t.record_pointer == 0) {
      appendf(out, " no record");
    }
    if (!t.error.empty()) appendf(out, " error: %s", safe(t.error).c_str());
    appendf(out, "\n");
  }
  out += findings_text(in.findings);
}

}  // namespace

std::string render_text(const Inspection& in) {
  std::string out;
  if (in.library) print_human(out, in);
  return out;
}

namespace {

class ElasticInspector final : public Inspector {
 public:
  std::string_view protocol() const override { return elastic_v1::spec::kProtocol.id; }

  Expected<InspectReport> inspect(pid_t pid, const InspectRequest& request) const override {
    InspectOptions o;
    o.thread_pointers = request.thread_pointers;
    o.read_threads = request.read_threads;
    o.check_socket_reachable = request.check_socket_reachable;
    auto in = inspect_process(pid, o);
    if (!in) return in.error();
    InspectReport report;
    report.found = in->library.has_value();
    if (!report.found)
      report.not_found = "no mapped file matches " + std::string(elastic_v1::spec::kLibraryNameRegex) + " or defines " +
                         std::string(elastic_v1::spec::kProcessStorageSymbol) + " / " + std::string(elastic_v1::spec::kTlsSymbol) +
                         (in->passed_over.empty() ? std::string() : " (passed over: " + describe(in->passed_over) + ")");
    if (request.want_json) report.json = to_json(*in);
    if (request.want_text) report.text = render_text(*in);
    report.findings = in->findings;
    return report;
  }

  bool published(pid_t pid) const override {
    LibraryCache cache;
    auto found = discover_process(pid, discovery_options(), cache);
    if (!found || !*found || !(*found)->process_pointer_addr) return false;
    auto pointer = LiveProcessMemory(pid).read_u64(*(*found)->process_pointer_addr);
    return pointer && *pointer != 0;
  }
};

}  // namespace

const Inspector& inspector() {
  static const ElasticInspector i;
  return i;
}

}  // namespace tracecorr::elastic_v1

#include "tracecorr/inspect.hpp"

#include <elf.h>
#include <sys/stat.h>

#include <cstdio>
#include <map>

#include "tracecorr/memory.hpp"

namespace tracecorr {
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
void check_symbol(const std::optional<elf::Symbol>& sym, const std::string& name, unsigned want_type, RequirementId id,
                  std::vector<Finding>& findings) {
  const std::string what = "symbol " + name;
  if (!sym) {
    findings.push_back(make_finding(id, what + " is not in the library's dynamic symbol table"));
    return;
  }
  if (!sym->defined()) {
    findings.push_back(make_finding(id, what + " is only referenced (undefined), not defined by the library"));
    return;
  }
  if (sym->type != want_type)
    findings.push_back(make_finding(id, what + " has type " + elf::describe_type(sym->type) + ", expected " +
                                            elf::describe_type(want_type)));
  if (sym->binding != STB_GLOBAL)
    findings.push_back(make_finding(id, what + " has binding " + binding_name(sym->binding) + ", expected GLOBAL"));
  if (sym->visibility != STV_DEFAULT)
    findings.push_back(make_finding(id, what + " has visibility " + visibility_name(sym->visibility) + ", expected DEFAULT"));
  if (sym->size != spec::kPointerSize)
    findings.push_back(make_finding(id, what + " is " + std::to_string(sym->size) + " bytes, expected " +
                                            std::to_string(spec::kPointerSize) + " (a pointer)"));
}

// Turns an Error whose requirement is the target's fault into a finding.
void finding_from_error(const Error& e, std::vector<Finding>& findings) {
  if (e.requirement.empty()) return;
  const auto* r = spec::find_requirement(e.requirement);
  if (!r) return;
  findings.push_back(Finding{std::string(r->id), r->level, e.message()});
}

void inspect_storage(const ProcessMemory& mem, Inspection& out) {
  const auto& lib = *out.library;
  if (!lib.storage_pointer_addr) return;
  StorageInspection s;
  s.pointer_address = *lib.storage_pointer_addr;
  auto pointer = mem.read_u64(s.pointer_address);
  if (!pointer) {
    s.error = pointer.error().within("process storage pointer (" + std::string(spec::kProcessStorageSymbol) + ")").message();
    out.storage = std::move(s);
    return;
  }
  s.pointer = *pointer;
  if (*pointer != 0) {
    auto decoded = wire::decode_process_storage(mem.source_at(*pointer));
    if (decoded) {
      if (decoded->minor == 0)
        out.findings.push_back(make_finding("PROC-02", "process storage at " + hex_address(*pointer) +
                                                           " has layout-minor-version 0; it must be " +
                                                           std::to_string(spec::kProcessStorageMinor)));
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
  if (!facts) {
    s.error = facts.error().message();
    finding_from_error(facts.error(), out.findings);
    out.socket = std::move(s);
    return;
  }
  const auto& f = *facts;
  if (!f.is_socket) {
    s.reach_error = "not a socket: " + describe_file_type(f.file_type) + "; nothing is sent there";
    out.findings.push_back(make_finding("SOCK-01", "socket_file_path \"" + s.path + "\" is " +
                                                       describe_file_type(f.file_type) + " in the target's root, not a socket"));
  } else {
    if (f.bound_by_target && !f.datagram)
      out.findings.push_back(make_finding("SOCK-01", "the socket at \"" + s.path + "\" has type " +
                                                         std::to_string(f.socket_type) + ", not SOCK_DGRAM (2)"));
    if (!f.bound_by_target)
      out.findings.push_back(make_finding("SOCK-02", "the process holds no socket bound to \"" + s.path +
                                                         "\": the path names a file that is not its socket (nothing is sent there)"));
    if (f.bound_by_target && !f.target_nonblocking)
      out.findings.push_back(make_finding("SOCK-03", "the process's socket (fd " + std::to_string(f.target_fd) +
                                                         ") is blocking: O_NONBLOCK is not set"));
    if (f.owner != f.target_uid)
      out.findings.push_back(make_finding("SOCK-04", "the socket file is owned by uid " + std::to_string(f.owner) +
                                                         ", the process runs as uid " + std::to_string(f.target_uid)));
    if (f.mode & S_IWOTH)
      out.findings.push_back(make_finding("SOCK-04", "the socket file (mode " + octal(f.mode) +
                                                         ") is writable by other users"));
    if (o.check_socket_reachable) {
      auto connected = AgentSocket::connect(pid, s.path);
      s.reachable = connected.ok();
      if (!connected) s.reach_error = connected.error().message();
    }
  }
  s.facts = f;
  out.socket = std::move(s);
}

void inspect_threads(const ProcessMemory& mem, ThreadPointerSource& source, Inspection& out) {
  auto tids = source.threads();
  if (!tids) {
    out.threads_error = tids.error().message();
    return;
  }
  const bool readable = out.tls && out.tls->model == TlsModel::StaticOffset;
  std::map<std::uint64_t, pid_t> owner_of_record;
  for (pid_t tid : *tids) {
    ThreadInspection t;
    t.tid = tid;
    auto tp = source.thread_pointer(tid);
    if (!tp) {
      t.error = tp.error().message();
      out.threads.push_back(std::move(t));
      continue;
    }
    t.thread_pointer = *tp;
    if (!readable) {
      t.error = out.tls ? std::string("the TLS model is ") + to_string(out.tls->model) + ": no thread-pointer offset to read"
                        : "no TLS descriptor: no thread-pointer offset to read";
    } else if (*tp == 0) {
      t.error = "the thread pointer is 0 (the thread has not set up TLS yet)";
    } else {
      auto read = read_thread_record(mem, wire::tls_record_layout(), *tp, PointerSite::tls_offset(out.tls->tp_offset));
      if (!read) {
        t.error = read.error().message();
        finding_from_error(read.error(), out.findings);
      } else {
        t.record_pointer = read->record_pointer;
        if (read->bytes) {
          auto rec = wire::decode_tls_record(*read->bytes);
          if (rec) {
            if (rec->minor == 0)
              out.findings.push_back(make_finding("TLS-02", "thread " + std::to_string(tid) + ": record at " +
                                                                hex_address(read->record_pointer) + " has layout-minor-version 0"));
            t.record = *rec;
          } else {
            t.error = rec.error().message();
          }
          auto [it, fresh] = owner_of_record.emplace(read->record_pointer, tid);
          if (!fresh)
            out.findings.push_back(make_finding("TLS-03", "threads " + std::to_string(it->second) + " and " +
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

Finding make_finding(RequirementId id, std::string message) {
  return Finding{std::string(id.id), id.level, std::move(message)};
}

Expected<Inspection> inspect_process(pid_t pid, const InspectOptions& o) {
  Inspection out;
  out.pid = pid;
  LibraryCache cache;
  auto found = discover_process(pid, o.discovery, cache);
  if (!found) return found.error();
  if (!*found) return out;
  out.library = std::move(**found);
  auto& lib = *out.library;

  // The ELF could not be analysed: say so, and go no further.
  if (!lib.analysis_error.empty()) {
    out.library_error = lib.analysis_error;
    return out;
  }

  if (!lib.name_matches)
    out.findings.push_back(make_finding("ELF-01", "library " + lib.path + " defines the agent symbols but its name "
                                                  "does not match " + o.discovery.name_regex +
                                                  ": profilers will not pick it up"));
  check_symbol(lib.elf.process_storage, o.discovery.storage_symbol, STT_OBJECT, "ELF-02", out.findings);
  check_symbol(lib.elf.tls, o.discovery.tls_symbol, STT_TLS, "ELF-03", out.findings);
  const auto& access = lib.elf.tls_access;
  if (lib.elf.tls && lib.elf.tls->defined()) {
    if (access.dialect == elf::TlsDialect::Traditional)
      out.findings.push_back(make_finding("ELF-04", "the TLS variable is accessed with the traditional dialect (" +
                                                        nlohmann::json(access.relocations).dump() +
                                                        "), not TLSDESC: profilers cannot find its offset"));
    else if (access.dialect == elf::TlsDialect::None)
      out.findings.push_back(make_finding("ELF-04", "no TLSDESC relocation refers to the TLS variable"));
    else if (access.mixed)
      out.findings.push_back(make_finding("ELF-04", "the TLS variable has both a TLSDESC relocation and traditional ones (" +
                                                        nlohmann::json(access.relocations).dump() + ")"));
  }

  LiveProcessMemory mem(pid);
  if (lib.tls_descriptor_addr) {
    auto d = read_tls_descriptor(mem, *lib.tls_descriptor_addr, lib.elf.machine);
    if (d) {
      if (d->model == TlsModel::Dynamic) out.findings.push_back(make_finding("TLS-07", d->explanation));
      out.tls = *d;
    } else {
      out.tls_error = d.error().message();
    }
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
  j["symbols"] = {{"process_storage", symbol_json(lib.elf.process_storage)}, {"tls", symbol_json(lib.elf.tls)}};
  j["tls"] = {{"dialect", elf::to_string(lib.elf.tls_access.dialect)},
              {"relocations", lib.elf.tls_access.relocations},
              {"descriptor_address", optional_hex(lib.tls_descriptor_addr)},
              {"model", in.tls ? nlohmann::json(to_string(in.tls->model)) : nlohmann::json(nullptr)},
              {"resolver", in.tls ? nlohmann::json(hex_address(in.tls->resolver)) : nlohmann::json(nullptr)},
              {"argument", in.tls ? nlohmann::json(hex_address(in.tls->argument)) : nlohmann::json(nullptr)},
              {"tp_offset", in.tls && in.tls->model == TlsModel::StaticOffset ? nlohmann::json(in.tls->tp_offset) : nlohmann::json(nullptr)},
              {"explanation", in.tls ? nlohmann::json(in.tls->explanation) : nlohmann::json(nullptr)},
              {"error", in.tls_error.empty() ? nlohmann::json(nullptr) : nlohmann::json(in.tls_error)}};
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
    j["threads"].push_back(tj);
  }
  j["threads_error"] = in.threads_error.empty() ? nlohmann::json(nullptr) : nlohmann::json(in.threads_error);
  j["findings"] = nlohmann::json::array();
  for (const auto& f : in.findings)
    j["findings"].push_back({{"requirement", f.requirement}, {"level", to_string(f.level)}, {"message", f.message}});
  return j;
}

}  // namespace tracecorr

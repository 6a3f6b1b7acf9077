// tracecorr inspect PID: what one agent process exposes (library, symbols, TLS
// dialect and model, process storage, socket, every thread's record) and the
// requirements it breaks.
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <thread>

#include "elastic_v1/library.hpp"
#include "command.hpp"
#include "tracecorr/conform/report.hpp"
#include "tracecorr/inspect.hpp"
#include "tracecorr/memory.hpp"

namespace tracecorr::cli {
namespace {

struct InspectArgs {
  int pid = 0;
  bool json = false;
  std::string gdbstub;
  bool resume_until_enter = false;
  double wait_seconds = 0;
  bool no_threads = false;
};

bool process_gone(pid_t pid) { return ::kill(pid, 0) != 0 && errno == ESRCH; }

// Polls until the agent library is mapped and its storage published, for
// guests that only start once we are attached. Returns false on timeout.
bool wait_for_agent(pid_t pid, double seconds) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  LibraryCache cache;
  auto options = elastic_v1::discovery_options();
  for (;;) {
    auto found = discover_process(pid, options, cache);
    if (!found) return false;
    if (*found && (*found)->process_pointer_addr) {
      LiveProcessMemory mem(pid);
      auto pointer = mem.read_u64(*(*found)->process_pointer_addr);
      if (pointer && *pointer != 0) return true;
    }
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

void print_symbol(const char* label, const std::optional<elf::Symbol>& s) {
  if (!s) {
    std::printf("  %-16s missing\n", label);
    return;
  }
  std::printf("  %-16s %s %s size %llu%s value %s\n", label, elf::describe_type(s->type).c_str(),
              s->binding == 1 ? "GLOBAL" : s->binding == 2 ? "WEAK" : s->binding == 0 ? "LOCAL" : "other-binding",
              static_cast<unsigned long long>(s->size), s->defined() ? "" : " (undefined)", hex_address(s->value).c_str());
}

// Target-controlled text (paths, service names, errors quoting them) is
// escaped: control characters could clear the screen or fake lines.
std::string safe(std::string_view text) { return conform::printable_text(text); }

void print_human(const Inspection& in) {
  const auto& lib = *in.library;
  std::printf("pid %d\n", in.pid);
  std::printf("library          %s%s\n", safe(lib.path).c_str(), lib.deleted ? " (deleted)" : "");
  std::printf("  name           %s\n", lib.name_matches ? ("matches, suffix \"" + safe(lib.name_suffix) + "\"").c_str()
                                                          : "does NOT match the registry's regex");
  if (!in.library_error.empty()) {
    std::printf("  error          %s\n", safe(in.library_error).c_str());
  } else {
    std::printf("  machine        %s, load bias %s\n", elf::to_string(lib.elf.machine), hex_address(lib.load_bias).c_str());
    if (!lib.elf.loader_view_note.empty()) std::printf("  note           %s\n", safe(lib.elf.loader_view_note).c_str());
    std::printf("symbols\n");
    print_symbol("process storage", lib.elf.process_symbol);
    print_symbol("tls", lib.elf.tls);
    std::printf("tls\n  dialect        %s", elf::to_string(lib.elf.tls_access.dialect));
    for (const auto& r : lib.elf.tls_access.relocations) std::printf(" %s", r.c_str());
    std::printf("\n");
    if (in.tls) {
      std::printf("  descriptor     %s: resolver %s argument %s\n", hex_address(in.tls->address).c_str(),
                  hex_address(in.tls->resolver).c_str(), hex_address(in.tls->argument).c_str());
      std::printf("  model          %s", to_string(in.tls->model));
      if (in.tls->model == TlsModel::StaticOffset) std::printf(", thread-pointer offset %lld", static_cast<long long>(in.tls->tp_offset));
      std::printf("\n                 %s\n", safe(in.tls->explanation).c_str());
    } else if (!in.tls_error.empty()) {
      std::printf("  descriptor     unreadable: %s\n", safe(in.tls_error).c_str());
    }
  }
  std::printf("storage\n");
  if (!in.storage) {
    std::printf("  (no process storage symbol)\n");
  } else if (!in.storage->pointer) {
    std::printf("  unreadable: %s\n", safe(in.storage->error).c_str());
  } else if (*in.storage->pointer == 0) {
    std::printf("  not published yet (%s at %s is 0)\n", std::string(elastic_v1::spec::kProcessStorageSymbol).c_str(),
                hex_address(in.storage->pointer_address).c_str());
  } else if (!in.storage->fields) {
    std::printf("  at %s, undecodable: %s\n", hex_address(*in.storage->pointer).c_str(), safe(in.storage->error).c_str());
  } else {
    const auto& f = *in.storage->fields;
    std::printf("  at %s: minor %u, service_name \"%s\", service_environment \"%s\", socket_file_path \"%s\"\n",
                hex_address(*in.storage->pointer).c_str(), f.minor, safe(f.service_name).c_str(), safe(f.service_environment).c_str(),
                safe(f.socket_file_path).c_str());
  }
  if (in.socket) {
    const auto& s = *in.socket;
    std::printf("socket           %s\n", safe(s.path).c_str());
    if (!s.error.empty()) {
      std::printf("  error          %s\n", safe(s.error).c_str());
    } else if (s.facts) {
      const auto& f = *s.facts;
      std::printf("  %s, %s, %s, owner uid %u mode %04o, %s\n", f.is_socket ? "socket" : "NOT a socket",
                  f.datagram ? "datagram" : "not datagram",
                  f.bound_by_target ? (f.target_nonblocking ? "held by the process (non-blocking)" : "held by the process (blocking)")
                                    : "not held by the process",
                  f.owner, f.mode, s.reachable ? "reachable" : ("unreachable: " + safe(s.reach_error)).c_str());
    }
  }
  std::printf("threads (%s)\n", in.thread_pointer_source.c_str());
  if (!in.threads_error.empty()) std::printf("  error: %s\n", safe(in.threads_error).c_str());
  for (const auto& t : in.threads) {
    std::printf("  %-8d tp %-16s", t.tid, t.thread_pointer ? hex_address(*t.thread_pointer).c_str() : "?");
    if (t.record_pointer) std::printf(" record %-16s", hex_address(*t.record_pointer).c_str());
    if (t.record) {
      const auto& r = *t.record;
      std::printf(" minor %u valid %u", r.minor, r.valid);
      if (r.trace_present)
        std::printf(" trace %s span %s transaction %s flags %02x", to_hex(r.trace_id).c_str(), to_hex(r.span_id).c_str(),
                    to_hex(r.transaction_id).c_str(), r.trace_flags);
      else
        std::printf(" no trace");
    } else if (t.record_pointer && *t.record_pointer == 0) {
      std::printf(" no record");
    }
    if (!t.error.empty()) std::printf(" error: %s", safe(t.error).c_str());
    std::printf("\n");
  }
  std::printf("findings\n");
  if (in.findings.empty()) std::printf("  none\n");
  for (const auto& f : in.findings)
    std::printf("  %-8s %-6s %s\n", f.requirement.c_str(), std::string(to_string(f.level)).c_str(), safe(f.message).c_str());
}

// Invalid UTF-8 from the target (a library path) is escaped, never an exception.
std::string json_text(const Inspection& in) {
  auto document = to_json(in);
  return conform::make_utf8(document).dump(2);
}

int run_inspect(const InspectArgs& a) {
  const pid_t pid = a.pid;
  InspectOptions options;
  options.read_threads = !a.no_threads;
  std::unique_ptr<ThreadPointerSource> gdb;
  if (!a.gdbstub.empty()) {
    auto hp = parse_host_port(a.gdbstub);
    if (!hp) {
      std::fprintf(stderr, "tracecorr inspect: --gdbstub %s\n", hp.error().message().c_str());
      return kExitUsage;
    }
    auto source = make_gdbstub_source(hp->first, hp->second, pid);
    if (!source) {
      std::fprintf(stderr, "tracecorr inspect: %s\n", source.error().message().c_str());
      return kExitEnvironment;
    }
    gdb = std::move(*source);
    options.thread_pointers = gdb.get();
    if (a.resume_until_enter || a.wait_seconds > 0) {
      // qemu -g holds the guest until a debugger attaches: let it run first.
      if (auto st = gdb->resume(); !st) {
        std::fprintf(stderr, "tracecorr inspect: %s\n", st.error().message().c_str());
        return kExitEnvironment;
      }
    }
  }
  if (a.resume_until_enter) {
    std::fprintf(stderr, "tracecorr inspect: the target runs; press Enter to inspect it\n");
    std::string line;
    std::getline(std::cin, line);
  }
  if (a.wait_seconds > 0 && !wait_for_agent(pid, a.wait_seconds))
    std::fprintf(stderr, "tracecorr inspect: no published agent library after %.1f s; inspecting anyway\n", a.wait_seconds);

  auto result = inspect_process(pid, options);
  if (!result) {
    std::fprintf(stderr, "tracecorr inspect: cannot read pid %d: %s\n", pid, safe(result.error().message()).c_str());
    return kExitEnvironment;
  }
  if (!result->library) {
    if (a.json) std::puts(json_text(*result).c_str());
    std::fprintf(stderr,
                 "tracecorr inspect: pid %d has no agent library: no mapped file matches %s or defines %s / %s\n", pid,
                 std::string(elastic_v1::spec::kLibraryNameRegex).c_str(), std::string(elastic_v1::spec::kProcessStorageSymbol).c_str(),
                 std::string(elastic_v1::spec::kTlsSymbol).c_str());
    return kExitFailure;
  }
  if (a.json)
    std::puts(json_text(*result).c_str());
  else
    print_human(*result);
  // A target that died mid-read leaves a partial picture: say so, and do not
  // pass it off as a complete inspection.
  if (process_gone(pid)) {
    std::fprintf(stderr, "tracecorr inspect: pid %d exited during the inspection; what was read before is shown\n", pid);
    return kExitEnvironment;
  }
  return kExitOk;
}

RegisterCommand inspect_command(
    "inspect", "Show what one agent process exposes (library, TLS, storage, socket, threads) and what it breaks",
    [](CLI::App& app) -> std::function<int()> {
      auto a = std::make_shared<InspectArgs>();
      app.add_option("pid", a->pid, "Process id (for a qemu-user guest: the qemu process)")->required()->check(CLI::PositiveNumber);
      app.add_flag("--json", a->json, "Print the inspection as JSON");
      app.add_option("--gdbstub", a->gdbstub,
                     "Read thread pointers from a qemu-user gdbstub at HOST:PORT (qemu-aarch64 -g PORT) instead of ptrace");
      app.add_flag("--resume-until-enter", a->resume_until_enter,
                   "With --gdbstub: let the waiting guest run, and inspect once a line arrives on stdin");
      app.add_option("--wait", a->wait_seconds,
                     "Wait up to SECONDS for the agent library to publish its process storage before inspecting")
          ->check(CLI::NonNegativeNumber);
      app.add_flag("--no-threads", a->no_threads, "Do not stop threads to read their thread pointers");
      app.footer(
          "Exit status: 0 inspected (findings do not change it), 1 no agent library in the process, "
          "3 the process cannot be read (gone, no permission).");
      return [a] { return run_inspect(*a); };
    });

}  // namespace
}  // namespace tracecorr::cli

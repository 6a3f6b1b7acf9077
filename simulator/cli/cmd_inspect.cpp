// tracecorr inspect PID: what one process publishes for each protocol (every
// registered Inspector reads what its package defines) and the requirements
// it breaks. --json: one member per protocol.
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <thread>

#include "command.hpp"
#include "tracecorr/report/report.hpp"
#include "tracecorr/inspector.hpp"
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

// Polls until some protocol's library is mapped and published, for guests
// that only start once we are attached. Returns false on timeout.
bool wait_for_agent(pid_t pid, double seconds) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  for (;;) {
    for (const auto* inspector : inspectors())
      if (inspector->published(pid)) return true;
    if (process_gone(pid) || std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

// Target-controlled text (errors quoting paths) is escaped: control
// characters could clear the screen or fake lines.
std::string safe(std::string_view text) { return tracecorr::printable_text(text); }

int run_inspect(const InspectArgs& a) {
  const pid_t pid = a.pid;
  InspectRequest options;
  options.read_threads = !a.no_threads;
  options.want_json = a.json;
  options.want_text = !a.json;
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

  // Every protocol's inspector; the ones that find their library report.
  std::vector<std::pair<const Inspector*, InspectReport>> found;
  std::vector<std::string> looked_for;
  nlohmann::json by_protocol = nlohmann::json::object();
  for (const auto* inspector : inspectors()) {
    auto report = inspector->inspect(pid, options);
    if (!report) {
      std::fprintf(stderr, "tracecorr inspect: cannot read pid %d: %s\n", pid, safe(report.error().message()).c_str());
      return kExitEnvironment;
    }
    // Moved, never copied: 2000 threads make megabytes of JSON.
    by_protocol[std::string(inspector->protocol())] = std::move(report->json);
    if (report->found) found.emplace_back(inspector, std::move(*report));
    else looked_for.push_back(std::string(inspector->protocol()) + ": " + report->not_found);
  }
  // One protocol: its inspection as the document (what tools read); several:
  // one member per protocol.
  nlohmann::json document = by_protocol.size() == 1 ? std::move(by_protocol.begin().value()) : std::move(by_protocol);
  if (a.json) std::puts(report::make_utf8(document).dump(2).c_str());
  if (found.empty()) {
    std::string what;
    for (const auto& l : looked_for) what += (what.empty() ? "" : "; ") + l;
    std::fprintf(stderr, "tracecorr inspect: pid %d publishes nothing of any protocol (%s)\n", pid, safe(what).c_str());
    return kExitFailure;
  }
  if (!a.json)
    for (const auto& [inspector, report] : found) {
      if (found.size() > 1) std::printf("== %s\n", std::string(inspector->protocol()).c_str());
      std::fputs(report.text.c_str(), stdout);
    }
  // A target that died mid-read leaves a partial picture: say so, and do not
  // pass it off as a complete inspection.
  if (process_gone(pid)) {
    std::fprintf(stderr, "tracecorr inspect: pid %d exited during the inspection; what was read before is shown\n", pid);
    return kExitEnvironment;
  }
  return kExitOk;
}

RegisterCommand inspect_command(
    "inspect", "Show what one process publishes for each protocol (every registered inspector) and what it breaks",
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
          "Exit status: 0 inspected (findings do not change it), 1 the process publishes nothing of any protocol, "
          "3 the process cannot be read (gone, no permission).");
      return [a] { return run_inspect(*a); };
    });

}  // namespace
}  // namespace tracecorr::cli

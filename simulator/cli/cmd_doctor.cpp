// tracecorr doctor: what this host allows, and so which readers will work.
#include <elf.h>
#include <linux/capability.h>
#include <linux/perf_event.h>
#include <signal.h>
#include <sys/ptrace.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/user.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "command.hpp"
#include "tracecorr/fd.hpp"
#if defined(TRACECORR_HAVE_BPF)
#include "sampler_loader.hpp"
#endif

namespace tracecorr::cli {
namespace {

using nlohmann::json;

std::optional<std::string> read_sysctl(const std::string& path) {
  std::ifstream in(path);
  std::string v;
  if (!in || !std::getline(in, v)) return std::nullopt;
  return v;
}

struct Check {
  std::string name;
  bool ok = false;
  std::string detail;
  bool info = false;  // reported, but not a requirement of any reader
};

struct Caps {
  bool root = false, sys_admin = false, bpf = false, perfmon = false, sys_ptrace = false;
};

Caps capabilities() {
  Caps c;
  c.root = geteuid() == 0;
  __user_cap_header_struct hdr{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2]{};
  if (syscall(SYS_capget, &hdr, data) != 0) return c;
  auto has = [&](int cap) { return ((data[cap / 32].effective >> (cap % 32)) & 1u) != 0; };
  c.sys_admin = has(21);
  c.sys_ptrace = has(19);
  c.perfmon = has(38);
  c.bpf = has(39);
  return c;
}

// A child that waits to be killed; used to try ptrace and process_vm_readv.
struct Child {
  pid_t pid = -1;
  Child() {
    pid = fork();
    if (pid == 0) {
      for (;;) pause();
    }
  }
  ~Child() {
    if (pid > 0) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
  }
};

Check try_ptrace() {
  Check c{"ptrace", false, ""};
  Child child;
  if (child.pid < 0) return {"ptrace", false, std::string("fork failed: ") + std::strerror(errno)};
  if (ptrace(PTRACE_SEIZE, child.pid, nullptr, nullptr) != 0) {
    c.detail = std::string("PTRACE_SEIZE of a child refused: ") + std::strerror(errno);
    return c;
  }
  ptrace(PTRACE_INTERRUPT, child.pid, nullptr, nullptr);
  int status = 0;
  if (waitpid(child.pid, &status, __WALL) != child.pid || !WIFSTOPPED(status)) {
    c.detail = "the interrupted child did not stop";
    return c;
  }
#if defined(__x86_64__)
  user_regs_struct regs{};
#else
  user_regs_struct regs{};
#endif
  iovec iov{&regs, sizeof(regs)};
  if (ptrace(PTRACE_GETREGSET, child.pid, reinterpret_cast<void*>(NT_PRSTATUS), &iov) != 0) {
    c.detail = std::string("PTRACE_GETREGSET refused: ") + std::strerror(errno);
    return c;
  }
  ptrace(PTRACE_DETACH, child.pid, nullptr, nullptr);
  c.ok = true;
  c.detail = "seized, interrupted and read the registers of a child process";
  return c;
}

Check try_process_vm_readv() {
  Check c{"process_vm_readv", false, ""};
  static volatile std::uint64_t marker = 0x7472616365636f72ull;
  Child child;  // the forked child has the same address space layout
  if (child.pid < 0) return {"process_vm_readv", false, "fork failed"};
  std::uint64_t out = 0;
  iovec local{&out, sizeof(out)};
  iovec remote{const_cast<std::uint64_t*>(&marker), sizeof(marker)};
  ssize_t n = process_vm_readv(child.pid, &local, 1, &remote, 1, 0);
  if (n != sizeof(out) || out != marker) {
    c.detail = std::string("process_vm_readv of a child failed: ") + std::strerror(errno);
    return c;
  }
  c.ok = true;
  c.detail = "read a child's memory";
  return c;
}

Check try_perf_event(const std::string& paranoid) {
  perf_event_attr attr{};
  attr.size = sizeof(attr);
  attr.type = PERF_TYPE_SOFTWARE;
  attr.config = PERF_COUNT_SW_CPU_CLOCK;
  attr.freq = 1;
  attr.sample_freq = 99;
  int fd = static_cast<int>(syscall(SYS_perf_event_open, &attr, -1, 0, -1, PERF_FLAG_FD_CLOEXEC));
  if (fd < 0)
    return {"perf_event", false,
            std::string("perf_event_open(cpu-clock, all tasks on CPU 0) failed: ") + std::strerror(errno) +
                " (kernel.perf_event_paranoid = " + paranoid + ")"};
  UniqueFd owner(fd);
  return {"perf_event", true, "opened a cpu-clock sampling event on CPU 0 (kernel.perf_event_paranoid = " + paranoid + ")"};
}

int run_doctor(bool as_json) {
  std::vector<Check> checks;
  Caps caps = capabilities();
  {
    std::string d = std::string("euid ") + std::to_string(geteuid()) + "; effective capabilities:" +
                    (caps.sys_admin ? " CAP_SYS_ADMIN" : "") + (caps.bpf ? " CAP_BPF" : "") +
                    (caps.perfmon ? " CAP_PERFMON" : "") + (caps.sys_ptrace ? " CAP_SYS_PTRACE" : "");
    bool ok = caps.root || caps.sys_admin || (caps.bpf && caps.perfmon);
    checks.push_back({"privilege", ok, d + (ok ? "" : " (BPF needs root, or CAP_BPF and CAP_PERFMON)")});
  }
  const bool btf = access("/sys/kernel/btf/vmlinux", R_OK) == 0;
  checks.push_back({"btf", btf, btf ? "/sys/kernel/btf/vmlinux is readable (CO-RE can relocate task_struct fields)"
                                    : "/sys/kernel/btf/vmlinux missing or unreadable: CO-RE programs cannot load"});
  std::string paranoid = read_sysctl("/proc/sys/kernel/perf_event_paranoid").value_or("?");
  Check perf = try_perf_event(paranoid);
  checks.push_back(perf);
  auto max_rate = read_sysctl("/proc/sys/kernel/perf_event_max_sample_rate");
  checks.push_back({"perf_event_max_sample_rate", max_rate.has_value(),
                    max_rate ? "kernel.perf_event_max_sample_rate = " + *max_rate + " (upper bound for --frequency)"
                             : "unreadable"});
  auto yama = read_sysctl("/proc/sys/kernel/yama/ptrace_scope");
  Check ptrace_check = try_ptrace();
  ptrace_check.detail += yama ? " (kernel.yama.ptrace_scope = " + *yama + (*yama == "3" ? ": ptrace disabled)" : ")")
                              : " (no Yama LSM: classic ptrace permission rules)";
  checks.push_back(ptrace_check);
  Check vmread = try_process_vm_readv();
  checks.push_back(vmread);
  auto stats = read_sysctl("/proc/sys/kernel/bpf_stats_enabled");
  checks.push_back({"bpf_stats", stats && *stats == "1",
                    stats ? "kernel.bpf_stats_enabled = " + *stats +
                                (*stats == "1" ? "" : " (the benchmark sets it to 1 while it measures run time)")
                          : "kernel.bpf_stats_enabled unreadable",
                    true});
  auto qlen = read_sysctl("/proc/sys/net/unix/max_dgram_qlen");
  checks.push_back({"max_dgram_qlen", qlen.has_value(),
                    qlen ? "net.unix.max_dgram_qlen = " + *qlen +
                               ": an agent that reads its socket slower than that many datagrams per poll loses "
                               "correlations (counted as lost sends)"
                         : "unreadable"});

  // The real test of the BPF path: load the sampler and attach it.
  Check bpf_load{"bpf_sampler_load", false, ""};
#if defined(TRACECORR_HAVE_BPF)
  {
    auto loader = bpf::SamplerLoader::open();
    if (!loader) {
      bpf_load.detail = loader.error().message();
    } else if (auto st = (*loader)->attach(1); !st) {
      bpf_load.detail = st.error().message();
    } else {
      bpf_load.ok = true;
      bpf_load.detail = "loaded sampler.bpf.c and attached it to " + std::to_string((*loader)->attached_cpus()) +
                        " CPU(s)";
    }
  }
#else
  bpf_load.detail = "this tracecorr was built without the BPF sampler";
#endif
  checks.push_back(bpf_load);

  auto verdict = [](bool ok, const std::string& what, const std::string& why_not) {
    return json{{"works", ok}, {"summary", ok ? what + ": will work" : what + ": will NOT work: " + why_not}};
  };
  std::string bpf_why;
  for (const auto& c : checks)
    if (!c.ok && (c.name == "privilege" || c.name == "btf" || c.name == "perf_event" || c.name == "bpf_sampler_load"))
      bpf_why += (bpf_why.empty() ? "" : "; ") + c.detail;
  json verdicts = {
      {"bpf_sampler", verdict(bpf_load.ok, "agent --reader bpf (BPF sampler)", bpf_why)},
      {"ptrace_reader", verdict(ptrace_check.ok && vmread.ok, "agent --reader ptrace (ptrace sampler)",
                                ptrace_check.ok ? vmread.detail : ptrace_check.detail)},
      {"inspect", verdict(vmread.ok, "inspect/conform (reading target memory)", vmread.detail)},
  };
  if (as_json) {
    json out;
    out["checks"] = json::array();
    for (const auto& c : checks)
      out["checks"].push_back({{"name", c.name}, {"ok", c.ok}, {"informational", c.info}, {"detail", c.detail}});
    out["verdicts"] = verdicts;
    std::puts(out.dump(2).c_str());
  } else {
    for (const auto& c : checks) std::printf("[%s] %-26s %s\n", c.ok ? " ok " : (c.info ? "info" : "FAIL"), c.name.c_str(), c.detail.c_str());
    std::printf("\n");
    for (const auto& [k, v] : verdicts.items()) std::printf("%s\n", v["summary"].get<std::string>().c_str());
  }
  return bpf_load.ok ? kExitOk : kExitEnvironment;
}

RegisterCommand doctor_command("doctor", "Check privileges, BTF, perf events and ptrace; say which readers will work",
                               [](CLI::App& app) -> std::function<int()> {
                                 auto json_out = std::make_shared<bool>(false);
                                 app.add_flag("--json", *json_out, "Machine-readable output");
                                 return [json_out] { return run_doctor(*json_out); };
                               });

}  // namespace
}  // namespace tracecorr::cli

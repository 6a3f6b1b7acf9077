// tracecorr_bpf_bench: numbers for BENCHMARKS.md, no assertions.
//
//   overhead  the sampler's kernel run time per sample (kernel.bpf_stats_enabled
//             run_time_ns / run_cnt) next to an empty perf_event program on the
//             same cpu-clock events, with the same workload: threads of this
//             process that publish a record through a thread-local pointer and
//             burn CPU at a given stack depth. --context adds a fourth
//             configuration: the same, with the bench's own OTel process
//             context header read at every sample. --floor adds the floor of
//             the records-only path (bpf/floor.bpf.c: the pid lookup and an
//             empty ring-buffer record), tracking the same threads, and prints
//             per round and overall the tracked configuration's cost above the
//             empty program next to the floor's, and their ratio.
//   lost      ring-buffer losses at HZ on every CPU while the reference fixture
//             runs N threads, consumed the way `tracecorr agent` consumes them.
#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "sampler_loader.hpp"
#include "elastic_v1/library.hpp"
#include "tracecorr/discovery.hpp"
#include "tracecorr/memory.hpp"
#include "tracecorr/process_context_header.h"
#include "tracecorr/tls.hpp"
#include "elastic_v1/wire.hpp"

using namespace tracecorr;
using namespace std::chrono;

namespace {

std::atomic<bool> g_stop{false};
thread_local std::uint8_t* t_record = nullptr;

std::int64_t own_tls_offset() {
  return reinterpret_cast<std::intptr_t>(&t_record) - reinterpret_cast<std::intptr_t>(__builtin_thread_pointer());
}

// Recursion gives the stack walker `depth` real frames.
__attribute__((noinline)) std::uint64_t burn(int depth, std::uint64_t x) {
  if (depth > 0) return burn(depth - 1, x * 31 + 7) + 1;
  while (!g_stop.load(std::memory_order_relaxed))
    for (int i = 0; i < 100000; ++i) x = x * 6364136223846793005ull + 1442695040888963407ull;
  return x;
}

void worker(int depth, std::uint8_t n) {
  elastic_v1::TlsRecord r;
  r.valid = 1;
  r.trace_present = 1;
  r.trace_id.fill(0xab);
  r.trace_id[15] = n;
  r.transaction_id.fill(0xcd);
  r.span_id.fill(0xef);
  static thread_local elastic_v1::TlsRecordBytes bytes;
  bytes = elastic_v1::encode_tls_record(r);
  t_record = bytes.data();
  volatile std::uint64_t sink = burn(depth, n);
  (void)sink;
}

std::string read_file(const char* path) {
  std::ifstream in(path);
  std::string s;
  std::getline(in, s);
  return s;
}

struct StatsToggle {  // kernel.bpf_stats_enabled=1 for the run, restored after
  std::string before;
  StatsToggle() {
    before = read_file("/proc/sys/kernel/bpf_stats_enabled");
    std::ofstream("/proc/sys/kernel/bpf_stats_enabled") << "1";
  }
  ~StatsToggle() {
    if (!before.empty()) std::ofstream("/proc/sys/kernel/bpf_stats_enabled") << before;
  }
};

// What the records cost in the ring buffer, from the kernel's consumer position.
void print_ring_bytes(const bpf::SamplerLoader& sampler, std::uint64_t records) {
  const std::uint64_t bytes = sampler.ring_bytes_consumed();
  std::printf("  ring buffer: %llu bytes consumed for %llu records = %.1f bytes per record (header and padding included)\n",
              (unsigned long long)bytes, (unsigned long long)records, records ? double(bytes) / double(records) : 0.0);
}

double ns_per_run(const bpf::ProgramStats& s) { return s.run_cnt ? double(s.run_time_ns) / double(s.run_cnt) : 0; }

// One configuration's runs and how many of them were on a tracked thread.
struct Runs {
  bpf::ProgramStats stats{};
  std::uint64_t tracked = 0;
  void add(const Runs& o) {
    stats.run_cnt += o.stats.run_cnt;
    stats.run_time_ns += o.stats.run_time_ns;
    tracked += o.tracked;
  }
  double tracked_share() const { return stats.run_cnt ? double(tracked) / double(stats.run_cnt) : 0; }
  // Time per tracked run: the runs on untracked threads (share 1 - f) are
  // taken to cost what the pid-map miss costs (`miss_ns`).
  double per_tracked(double miss_ns) const {
    const double f = tracked_share();
    return f > 0 ? (ns_per_run(stats) - (1 - f) * miss_ns) / f : 0;
  }
};

// A published process context header of this process (no payload: the
// sampler reads only the header), for --context.
alignas(8) std::uint8_t g_context_header[TC_PCTX_HEADER_SIZE];
std::uint64_t publish_own_context_header() {
  const std::uint64_t signature = TC_PCTX_SIGNATURE_LE, published_at = 1;
  const std::uint32_t version = TC_PCTX_VERSION_CURRENT;
  std::memcpy(g_context_header + TC_PCTX_SIGNATURE_OFFSET, &signature, 8);
  std::memcpy(g_context_header + TC_PCTX_VERSION_OFFSET, &version, 4);
  std::memcpy(g_context_header + TC_PCTX_PUBLISHED_AT_OFFSET, &published_at, 8);
  return reinterpret_cast<std::uintptr_t>(g_context_header);
}

int overhead(unsigned hz, int seconds, int threads, int depth, int rounds, bool no_stack, std::size_t ringbuf_bytes,
             bool context, bool with_floor) {
  StatsToggle toggle;
  if (read_file("/proc/sys/kernel/bpf_stats_enabled") != "1") {
    std::fprintf(stderr, "cannot enable kernel.bpf_stats_enabled\n");
    return 3;
  }
  std::vector<std::thread> pool;
  for (int i = 0; i < threads; ++i) pool.emplace_back(worker, depth, static_cast<std::uint8_t>(i + 1));
  auto sampler = bpf::SamplerLoader::open({.ringbuf_bytes = ringbuf_bytes});
  auto empty = bpf::EmptyLoader::open();
  auto floor = bpf::FloorLoader::open();
  if (!sampler || !empty || !floor) {
    std::fprintf(stderr, "load failed: %s\n",
                 (!sampler ? sampler.error() : !empty ? empty.error() : floor.error()).message().c_str());
    g_stop = true;
    for (auto& t : pool) t.join();
    return 3;
  }
  const std::uint32_t flags = no_stack ? TC_PROCESS_F_NO_STACK : 0;
  const RecordLayout& layout = elastic_v1::tls_record_layout();
  const pid_t nobody = 0x3ffffff0;  // above any pid_max: the map holds an entry, no sample matches it
  bpf::ProgramStats se{}, su{}, ss{}, sc{};
  std::uint64_t tracked_runs = 0, records = 0, frames = 0, ok = 0;
  // Per tracked configuration (without, with a context): records and ring bytes, and samples with a timestamp.
  std::uint64_t context_runs = 0, phase_records[2] = {0, 0}, phase_ring_bytes[2] = {0, 0}, timestamped = 0;
  const std::uint64_t header = publish_own_context_header();
  (void)(*floor)->track(getpid());
  std::uint64_t floor_records = 0;
  Runs floor_total, tracked_total;
  std::vector<std::array<double, 4>> per_round;  // empty, miss, tracked and floor ns per run
  auto phase = [&](auto& loader, bpf::ProgramStats& acc, bool consume) -> bool {
    auto before = *loader->stats();
    if (auto st = loader->attach(hz); !st) {
      std::fprintf(stderr, "%s\n", st.error().message().c_str());
      return false;
    }
    auto until = steady_clock::now() + seconds * 1000ms / rounds;
    while (steady_clock::now() < until) {
      if constexpr (std::is_same_v<std::decay_t<decltype(*loader)>, bpf::FloorLoader>) {
        if (auto n = loader->drain(100ms)) floor_records += *n;
        continue;
      }
      if (!consume) {
        std::this_thread::sleep_for(100ms);
        continue;
      }
      (void)(*sampler)->poll(100ms, [&](const bpf::SampleView& s) {
        ++records;
        ok += s.header.status == TC_SAMPLE_OK;
        frames += s.frame_count();
        timestamped += s.header.context == TC_CONTEXT_READ;
      });
    }
    loader->detach();
    if constexpr (std::is_same_v<std::decay_t<decltype(*loader)>, bpf::FloorLoader>) {
      if (auto n = loader->drain(0ms)) floor_records += *n;
    }
    auto after = *loader->stats();
    acc.run_cnt += after.run_cnt - before.run_cnt;
    acc.run_time_ns += after.run_time_ns - before.run_time_ns;
    return true;
  };
  bool fine = true;
  for (int round = 0; round < rounds && fine; ++round) {
    // Alternate the configurations so drift (other load, frequency) hits all alike.
    const auto se0 = se, su0 = su, ss0 = ss;
    const auto tracked_runs0 = tracked_runs;
    fine = phase(*empty, se, false);
    (void)(*sampler)->untrack(getpid());
    (void)(*sampler)->track(nobody, layout, PointerSite::tls_offset(own_tls_offset()), flags);
    fine = fine && phase(*sampler, su, true);
    (void)(*sampler)->untrack(nobody);
    Runs floor_round;
    if (with_floor && fine) {
      const auto records0 = floor_records;
      fine = phase(*floor, floor_round.stats, false);
      floor_round.tracked = floor_records - records0;
      floor_total.add(floor_round);
    }
    (void)(*sampler)->track(getpid(), layout, PointerSite::tls_offset(own_tls_offset()), flags);
    // Tracked, without and then (--context) with the process context header.
    for (int with_context = 0; with_context <= (context ? 1 : 0) && fine; ++with_context) {
      (void)(*sampler)->track_process_context(getpid(), with_context ? std::optional(header) : std::nullopt);
      auto c0 = (*sampler)->counters()[TC_CTR_SAMPLES];
      const auto records0 = records, bytes0 = (*sampler)->ring_bytes_consumed();
      fine = fine && phase(*sampler, with_context ? sc : ss, true);
      (with_context ? context_runs : tracked_runs) += (*sampler)->counters()[TC_CTR_SAMPLES] - c0;
      phase_records[with_context] += records - records0;
      phase_ring_bytes[with_context] += (*sampler)->ring_bytes_consumed() - bytes0;
    }
    if (with_floor && fine) {
      auto delta = [](const bpf::ProgramStats& a, const bpf::ProgramStats& b) {
        return bpf::ProgramStats{a.run_time_ns - b.run_time_ns, a.run_cnt - b.run_cnt, 0};
      };
      Runs tracked_round{delta(ss, ss0), tracked_runs - tracked_runs0};
      const double e = ns_per_run(delta(se, se0)), u = ns_per_run(delta(su, su0));
      per_round.push_back({e, u, tracked_round.per_tracked(u), floor_round.per_tracked(u)});
    }
  }
  g_stop = true;
  for (auto& t : pool) t.join();
  if (!fine) return 3;
  auto c = (*sampler)->counters();
  double e = ns_per_run(se), u = ns_per_run(su), t = ns_per_run(ss);
  double f = ss.run_cnt ? double(tracked_runs) / double(ss.run_cnt) : 0;
  double per_tracked = f > 0 ? (t - (1 - f) * u) / f : 0;
  std::printf("overhead: %u Hz per CPU, %d s per configuration in %d rounds, %d busy threads, stack depth ~%d%s\n", hz,
              seconds, rounds, threads, depth + 3, no_stack ? ", user stack NOT collected (--no-stack)" : "");
  std::printf("  empty program                  : %9llu runs %8.1f ns/run\n", (unsigned long long)se.run_cnt, e);
  std::printf("  sampler, no sampled pid tracked: %9llu runs %8.1f ns/run (pid lookup miss)\n",
              (unsigned long long)su.run_cnt, u);
  std::printf("  sampler, tracking the workload : %9llu runs %8.1f ns/run (%.0f%% of runs on tracked threads)\n",
              (unsigned long long)ss.run_cnt, t, 100 * f);
  std::printf("  => per tracked sample          : %8.1f ns, %.1f ns above empty (target <= 300)\n", per_tracked,
              per_tracked - e);
  std::printf("  => per untracked sample        : %8.1f ns above empty\n", u - e);
  std::printf("  records %llu (read ok %llu), mean user frames %.1f, ring buffer full %llu\n",
              (unsigned long long)records, (unsigned long long)ok, records ? double(frames) / double(records) : 0.0,
              (unsigned long long)c[TC_CTR_RINGBUF_FULL]);
  print_ring_bytes(**sampler, records);
  if (context) {
    double tc = ns_per_run(sc);
    double fc = sc.run_cnt ? double(context_runs) / double(sc.run_cnt) : 0;
    double per_context = fc > 0 ? (tc - (1 - fc) * u) / fc : 0;
    auto bytes_per = [&](int i) { return phase_records[i] ? double(phase_ring_bytes[i]) / double(phase_records[i]) : 0.0; };
    std::printf("  with the process context header : %9llu runs %8.1f ns/run (%.0f%% of runs on tracked threads)\n",
                (unsigned long long)sc.run_cnt, tc, 100 * fc);
    std::printf("  => per tracked sample with it  : %8.1f ns, %.1f ns above empty; %.1f ns above without (x%.3f)\n",
                per_context, per_context - e, per_context - per_tracked, per_tracked > 0 ? per_context / per_tracked : 0);
    std::printf("  ring bytes per record: %.1f without, %.1f with (%llu and %llu records); %llu records carried a timestamp\n",
                bytes_per(0), bytes_per(1), (unsigned long long)phase_records[0], (unsigned long long)phase_records[1],
                (unsigned long long)timestamped);
  }
  if (with_floor) {
    const char* what = no_stack ? "records only" : "records + stack";
    std::printf("  floor (pid lookup + empty ring record): %9llu runs %8.1f ns/run (%.0f%% of runs on tracked threads)\n",
                (unsigned long long)floor_total.stats.run_cnt, ns_per_run(floor_total.stats),
                100 * floor_total.tracked_share());
    std::printf("  per round, ns above empty per tracked sample: %s | floor | ratio (target <= 2)\n", what);
    for (std::size_t r = 0; r < per_round.size(); ++r) {
      const auto& [re, ru, rt, rf] = per_round[r];
      std::printf("    round %zu (empty %.1f ns/run): %8.1f | %8.1f | x%.2f\n", r + 1, re, rt - re, rf - re,
                  rf - re > 0 ? (rt - re) / (rf - re) : 0.0);
    }
    const double floor_above = floor_total.per_tracked(u) - e;
    std::printf("  => overall: %s %.1f ns above empty, floor %.1f ns above empty: x%.2f (target <= 2: %s)\n", what,
                per_tracked - e, floor_above, floor_above > 0 ? (per_tracked - e) / floor_above : 0.0,
                floor_above > 0 && per_tracked - e <= 2 * floor_above ? "met" : "not met");
  }
  return 0;
}

int lost(const std::string& fixture, unsigned hz, int seconds, int threads) {
  pid_t child = fork();
  if (child == 0) {
    std::string t = std::to_string(threads);
    execl(fixture.c_str(), fixture.c_str(), "--threads", t.c_str(), (char*)nullptr);
    _exit(127);
  }
  auto kill_child = [&] {
    kill(child, SIGTERM);
    waitpid(child, nullptr, 0);
  };
  // Wait for the library's TLS descriptor to resolve (the fixture dlopens it).
  LibraryCache cache;
  std::optional<std::int64_t> offset;
  for (int i = 0; i < 100 && !offset; ++i) {
    std::this_thread::sleep_for(100ms);
    auto found = discover_process(child, elastic_v1::discovery_options(), cache);
    if (!found || !found->has_value() || !(*found)->tls_descriptor_addr) continue;
    LiveProcessMemory mem(child);
    auto d = read_tls_descriptor(mem, *(*found)->tls_descriptor_addr, (*found)->elf.machine);
    if (d && d->model == TlsModel::StaticOffset) offset = d->tp_offset;
  }
  if (!offset) {
    std::fprintf(stderr, "the fixture's TLS offset was not found\n");
    kill_child();
    return 3;
  }
  auto sampler = bpf::SamplerLoader::open();
  if (!sampler) {
    std::fprintf(stderr, "%s\n", sampler.error().message().c_str());
    kill_child();
    return 3;
  }
  const RecordLayout& layout = elastic_v1::tls_record_layout();
  (void)(*sampler)->track(child, layout, PointerSite::tls_offset(*offset));
  if (auto st = (*sampler)->attach(hz); !st) {
    std::fprintf(stderr, "%s\n", st.error().message().c_str());
    kill_child();
    return 3;
  }
  const std::size_t cpus = (*sampler)->attached_cpus();
  std::uint64_t records = 0, ok = 0, traced = 0;
  auto until = steady_clock::now() + seconds * 1s;
  while (steady_clock::now() < until)
    (void)(*sampler)->poll(100ms, [&](const bpf::SampleView& s) {
      ++records;
      if (s.header.status == TC_SAMPLE_OK) {
        ++ok;
        traced += layout.valid(s.record) && s.record[*layout.presence_offset] != 0;
      }
    });
  (*sampler)->detach();
  (void)(*sampler)->poll(0ms, [&](const bpf::SampleView&) { ++records; });
  auto c = (*sampler)->counters();
  kill_child();
  std::printf("lost: %u Hz per CPU on %zu CPUs, %d s, fixture with %d threads (TLS offset %lld)\n", hz,
              cpus, seconds, threads, (long long)*offset);
  std::printf("  tracked samples : %llu\n  records consumed: %llu (record read ok %llu, in a trace %llu)\n",
              (unsigned long long)c[TC_CTR_SAMPLES], (unsigned long long)records, (unsigned long long)ok,
              (unsigned long long)traced);
  std::printf("  lost (ring buffer full): %llu (target 0)\n", (unsigned long long)c[TC_CTR_RINGBUF_FULL]);
  print_ring_bytes(**sampler, records);
  return 0;
}

void usage() {
  std::fprintf(stderr,
               "usage: tracecorr_bpf_bench overhead [--hz 1000] [--seconds 20] [--threads 2] [--depth 16] [--rounds 4] [--no-stack] [--context] [--floor] [--ringbuf-kib 8192]\n"
               "       tracecorr_bpf_bench lost --fixture PATH [--hz 1000] [--seconds 30] [--threads 64]\n");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return usage(), 2;
  std::string mode = argv[1], fixture;
  unsigned hz = 1000;
  int seconds = mode == "lost" ? 30 : 20, threads = mode == "lost" ? 64 : 2, depth = 16, rounds = 4;
  bool no_stack = false, context = false, with_floor = false;
  std::size_t ringbuf_bytes = bpf::SamplerLoaderOptions{}.ringbuf_bytes;
  for (int i = 2; i < argc; i += 2) {
    std::string k = argv[i];
    if (k == "--no-stack" || k == "--context" || k == "--floor") {
      (k == "--no-stack" ? no_stack : k == "--context" ? context : with_floor) = true;
      --i;
      continue;
    }
    if (i + 1 >= argc) return usage(), 2;
    std::string v = argv[i + 1];
    if (k == "--hz") hz = static_cast<unsigned>(std::stoul(v));
    else if (k == "--seconds") seconds = std::stoi(v);
    else if (k == "--threads") threads = std::stoi(v);
    else if (k == "--depth") depth = std::stoi(v);
    else if (k == "--rounds") rounds = std::max(1, std::stoi(v));
    else if (k == "--fixture") fixture = v;
    else if (k == "--ringbuf-kib") ringbuf_bytes = std::stoul(v) * 1024;
    else return usage(), 2;
  }
  signal(SIGPIPE, SIG_IGN);
  if (mode == "overhead") return overhead(hz, seconds, threads, depth, rounds, no_stack, ringbuf_bytes, context, with_floor);
  if (mode == "lost" && !fixture.empty()) return lost(fixture, hz, seconds, threads);
  usage();
  return 2;
}

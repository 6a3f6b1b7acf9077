// Decoding a large OTLP profiles export (issue 27): decode_profiles against a
// plain libprotobuf parse of the same bytes, time and peak memory, in one run.
//
// The export is shaped like the OTel eBPF profiler's: one resource, one CPU
// profile, samples with thread.id, process.pid and thread.name attributes, a
// link to a span and a stack from a shared table. Two shapes of the same
// observations: one Sample per observation (the worst case per observation)
// and aggregated (five timestamps per Sample, as OTLP recommends).
//
// Time: the median of --rounds runs of each, alternated, in this process.
// Peak memory: each operation once in a forked child, its peak RSS (wait4's
// ru_maxrss) minus that of a child that did nothing.
//
// Usage: tracecorr_profiles_decode_bench [--samples N] [--rounds N]
#include <malloc.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "opentelemetry/proto/collector/profiles/v1development/profiles_service.pb.h"
#include "tracecorr/profiles/decode.hpp"

namespace {

namespace pb_collector = opentelemetry::proto::collector::profiles::v1development;
using Clock = std::chrono::steady_clock;

std::string build_export(std::size_t observations, std::size_t per_sample) {
  pb_collector::ExportProfilesServiceRequest request;
  auto* d = request.mutable_dictionary();
  d->add_string_table("");
  d->add_location_table();
  d->add_stack_table();
  d->add_attribute_table();
  auto* zero = d->add_link_table();
  zero->set_trace_id(std::string(16, '\0'));
  zero->set_span_id(std::string(8, '\0'));
  auto string = [&](const std::string& s) {
    d->add_string_table(s);
    return d->string_table_size() - 1;
  };
  const int key_tid = string("thread.id"), key_pid = string("process.pid"), key_name = string("thread.name");
  constexpr int kThreads = 200, kStacks = 1000, kLinks = 500, kDepth = 20;
  std::vector<int> tid_attr, name_attr;
  for (int t = 0; t < kThreads; ++t) {
    auto* a = d->add_attribute_table();
    a->set_key_strindex(key_tid);
    a->mutable_value()->set_int_value(10'000 + t);
    tid_attr.push_back(d->attribute_table_size() - 1);
    auto* n = d->add_attribute_table();
    n->set_key_strindex(key_name);
    n->mutable_value()->set_string_value("worker-" + std::to_string(t));
    name_attr.push_back(d->attribute_table_size() - 1);
  }
  auto* pid = d->add_attribute_table();
  pid->set_key_strindex(key_pid);
  pid->mutable_value()->set_int_value(4242);
  const int pid_attr = d->attribute_table_size() - 1;
  for (int s = 0; s < kStacks; ++s) {
    auto* stack = d->add_stack_table();
    for (int f = 0; f < kDepth; ++f) {
      d->add_location_table()->set_address(0x400000 + static_cast<std::uint64_t>(s) * 0x1000 + f * 8);
      stack->add_location_indices(d->location_table_size() - 1);
    }
  }
  for (int l = 0; l < kLinks; ++l) {
    auto* link = d->add_link_table();
    std::string trace(16, '\x4b'), span(8, '\x00');
    std::memcpy(trace.data(), &l, sizeof l);
    std::memcpy(span.data(), &l, sizeof l);
    span[7] = 1;
    link->set_trace_id(trace);
    link->set_span_id(span);
  }
  auto* profile = request.add_resource_profiles()->add_scope_profiles()->add_profiles();
  profile->mutable_sample_type()->set_type_strindex(string("samples"));
  profile->mutable_sample_type()->set_unit_strindex(string("count"));
  const std::uint64_t t0 = 1'700'000'000'000'000'000ull;
  for (std::size_t i = 0; i < observations; i += per_sample) {
    auto* sample = profile->add_samples();
    const int thread = static_cast<int>((i / per_sample) % kThreads);
    sample->add_attribute_indices(tid_attr[thread]);
    sample->add_attribute_indices(name_attr[thread]);
    sample->add_attribute_indices(pid_attr);
    sample->set_stack_index(1 + static_cast<int>((i / per_sample) % kStacks));
    sample->set_link_index(1 + static_cast<int>((i / per_sample) % kLinks));
    for (std::size_t k = 0; k < per_sample && i + k < observations; ++k)
      sample->add_timestamps_unix_nano(t0 + (i + k) * 1000);
  }
  return request.SerializeAsString();
}

std::size_t plain_parse(const std::string& bytes) {
  pb_collector::ExportProfilesServiceRequest request;
  if (!request.ParseFromString(bytes)) std::abort();
  return static_cast<std::size_t>(request.resource_profiles(0).scope_profiles(0).profiles(0).samples_size());
}

std::size_t decode(const std::string& bytes) {
  auto decoded = tracecorr::profiles::decode_profiles(bytes);
  if (!decoded.ok()) {
    std::fprintf(stderr, "decode failed: %s\n", decoded.first_fatal->message().c_str());
    std::abort();
  }
  return decoded.samples.size();
}

double median_ms(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Peak RSS (KiB) of a child that runs `op` on the parent's bytes (or nothing).
// The parent returned its free heap to the system first (malloc_trim), so
// what the operation allocates is faulted in anew and counted.
long child_peak_kib(const std::string& bytes, int op) {
  const pid_t child = ::fork();
  if (child == 0) {
    std::size_t n = op == 1 ? plain_parse(bytes) : op == 2 ? decode(bytes) : 1;
    ::_exit(n > 0 ? 0 : 1);
  }
  int status = 0;
  rusage usage{};
  ::wait4(child, &status, 0, &usage);
  return usage.ru_maxrss;
}

void run(std::size_t observations, std::size_t per_sample, int rounds) {
  const std::string bytes = build_export(observations, per_sample);
  ::malloc_trim(0);
  const long base = child_peak_kib(bytes, 0);
  const long parse_peak = child_peak_kib(bytes, 1) - base;
  const long decode_peak = child_peak_kib(bytes, 2) - base;
  std::vector<double> parse_ms, decode_ms;
  std::size_t decoded = 0;
  for (int r = 0; r < rounds; ++r) {
    auto a = Clock::now();
    plain_parse(bytes);
    auto b = Clock::now();
    decoded = decode(bytes);
    auto c = Clock::now();
    parse_ms.push_back(std::chrono::duration<double, std::milli>(b - a).count());
    decode_ms.push_back(std::chrono::duration<double, std::milli>(c - b).count());
  }
  ::malloc_trim(0);
  const double p = median_ms(parse_ms), d = median_ms(decode_ms);
  std::printf("| %zu per Sample | %zu | %.2f MB | %.1f ms | %.1f ms | x%.2f | %.2f M/s | %.1f MB | %.1f MB |\n", per_sample,
              decoded, static_cast<double>(bytes.size()) / 1e6, p, d, d / p, static_cast<double>(decoded) / d / 1e3,
              static_cast<double>(parse_peak) / 1024, static_cast<double>(decode_peak) / 1024);
}

}  // namespace

int main(int argc, char** argv) {
  std::size_t observations = 100'000;
  int rounds = 9;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--samples")) observations = std::stoul(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--rounds")) rounds = std::stoi(argv[i + 1]);
  }
  std::printf("| shape | observations | export | plain parse (median) | decode_profiles (median) | ratio "
              "| observations/s | parse peak RSS | decode peak RSS |\n|---|---|---|---|---|---|---|---|---|\n");
  run(observations, 1, rounds);
  run(observations, 5, rounds);
  return 0;
}

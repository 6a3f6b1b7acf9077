// The agent side's hot path: publishing a thread's record with the valid-byte
// protocol (the reference fixture's own tc_record_publish), next to a plain
// 37-byte memcpy of the same record. Numbers only: see BENCHMARKS.md.
#include <benchmark/benchmark.h>

#include <array>
#include <cstdint>
#include <cstring>

extern "C" {
#include "fixture.h"
}

namespace {

// Written through a thread_local pointer, as an agent does.
thread_local std::uint8_t* record_pointer = nullptr;

struct Ids {
  std::uint8_t trace[TC_TLS_TRACE_ID_SIZE];
  std::uint8_t span[TC_TLS_SPAN_ID_SIZE];
  std::uint8_t transaction[TC_TLS_TRANSACTION_ID_SIZE];
};

void BM_PublishValidByteProtocol(benchmark::State& state) {
  alignas(64) static thread_local std::uint8_t record[64] = {};
  record_pointer = record;
  Ids ids{};
  for (auto _ : state) {
    ids.span[0]++;  // a different span each time, as when spans start and end
    tc_record_publish(record_pointer, 1, 1, ids.trace, ids.span, ids.transaction);
    benchmark::ClobberMemory();
  }
}
BENCHMARK(BM_PublishValidByteProtocol);

void BM_Memcpy37Bytes(benchmark::State& state) {
  alignas(64) static thread_local std::uint8_t record[64] = {};
  record_pointer = record;
  alignas(64) std::uint8_t source[TC_TLS_RECORD_SIZE] = {};
  for (auto _ : state) {
    source[TC_TLS_SPAN_ID_OFFSET]++;
    std::memcpy(record_pointer, source, TC_TLS_RECORD_SIZE);
    benchmark::ClobberMemory();
  }
}
BENCHMARK(BM_Memcpy37Bytes);

}  // namespace

BENCHMARK_MAIN();

// tracecorr::Sampler over the BPF sampler (sampler.bpf.c via SamplerLoader).
#pragma once

#include <memory>

#include "tracecorr/error.hpp"
#include "tracecorr/sampler.hpp"

namespace tracecorr::bpf {

struct BpfSamplerOptions {
  unsigned frequency_hz = 99;
  std::size_t ringbuf_bytes = 8u << 20;  // at least; grown to hold a second of samples on every CPU
};

// Loads the program and attaches it to a cpu-clock event on every online CPU.
// Errors say why (no BTF, no privilege, perf_event refused) so callers can
// suggest the ptrace reader.
Expected<std::unique_ptr<Sampler>> make_bpf_sampler(const BpfSamplerOptions& options);

}  // namespace tracecorr::bpf

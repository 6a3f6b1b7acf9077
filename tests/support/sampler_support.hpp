// The samplers the engine's tests run against live targets: "ptrace" always,
// "bpf" when this build has it and the machine lets it load (else nullptr and
// why, for GTEST_SKIP).
#pragma once

#include <memory>
#include <string>

#include "tracecorr/sampler.hpp"
#if defined(TRACECORR_HAVE_BPF)
#include "bpf_sampler.hpp"
#endif

namespace tracecorr::test {

inline std::unique_ptr<Sampler> make_test_sampler(const std::string& which, std::string& why_not) {
  if (which == "ptrace") return make_ptrace_sampler({.frequency_hz = 200});
#if defined(TRACECORR_HAVE_BPF)
  auto bpf = bpf::make_bpf_sampler({.frequency_hz = 499});
  if (bpf) return std::move(*bpf);
  why_not = bpf.error().message();
#else
  why_not = "this build has no BPF sampler";
#endif
  return nullptr;
}

}  // namespace tracecorr::test

// The calling thread's own thread pointer, to compare with what the readers
// find from outside (fs_base on x86-64, TPIDR_EL0 on arm64).
#pragma once

#include <sys/syscall.h>
#include <unistd.h>
#if defined(__x86_64__)
#include <asm/prctl.h>
#endif

#include <cstdint>

namespace tracecorr::test_support {

inline std::uint64_t own_thread_pointer() {
#if defined(__x86_64__)
  unsigned long fs = 0;
  ::syscall(SYS_arch_prctl, ARCH_GET_FS, &fs);
  return fs;
#else
  return reinterpret_cast<std::uint64_t>(__builtin_thread_pointer());
#endif
}

}  // namespace tracecorr::test_support

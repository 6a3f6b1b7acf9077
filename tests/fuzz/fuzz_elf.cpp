// libFuzzer: ELF analysis of the agent library (libelf behind tracecorr's own
// header and size checks), on an in-memory file.
#include <sys/mman.h>
#include <unistd.h>

#include "tracecorr/elf.hpp"
#include "tracecorr/fd.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static tracecorr::UniqueFd fd(::memfd_create("fuzz-elf", MFD_CLOEXEC));
  if (::ftruncate(fd.get(), 0) != 0) return 0;
  if (size && ::pwrite(fd.get(), data, size, 0) != static_cast<ssize_t>(size)) return 0;
  auto analysis = tracecorr::elf::analyze_library(fd.get(), "fuzz.so");
  (void)analysis;
  return 0;
}

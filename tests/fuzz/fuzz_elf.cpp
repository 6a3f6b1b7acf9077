// libFuzzer: ELF analysis of the agent library (libelf behind tracecorr's own
// header and size checks), on an in-memory file.
#include <sys/mman.h>
#include <unistd.h>

#include <string>

#include "elastic_v1/registry.hpp"
#include "tracecorr/elf.hpp"
#include "tracecorr/fd.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static tracecorr::UniqueFd fd(::memfd_create("fuzz-elf", MFD_CLOEXEC));
  if (::ftruncate(fd.get(), 0) != 0) return 0;
  if (size && ::pwrite(fd.get(), data, size, 0) != static_cast<ssize_t>(size)) return 0;
  // The seed corpus holds Elastic v1 libraries: look for their symbols, so
  // mutations reach the symbol and relocation paths.
  namespace spec = tracecorr::elastic_v1::spec;
  auto analysis = tracecorr::elf::analyze_library(fd.get(), "fuzz.so", std::string(spec::kProcessStorageSymbol),
                                                  std::string(spec::kTlsSymbol));
  (void)analysis;
  return 0;
}

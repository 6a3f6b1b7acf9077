// Reading another process's memory. Never writes.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <span>
#include <string>

#include "tracecorr/error.hpp"
#include "tracecorr/fd.hpp"

namespace tracecorr {

// Reads `out.size()` bytes at `offset` from the start of a structure. Decoders
// of variable-length structures pull bytes on demand through one, from target
// memory or from a buffer.
using ByteSource = std::function<Status(std::uint64_t offset, std::span<std::uint8_t> out)>;
ByteSource buffer_source(std::span<const std::uint8_t> bytes);

// An address in the target as every message prints it: 0x-prefixed lower-case hex.
std::string hex_address(std::uint64_t address);

class ProcessMemory {
 public:
  virtual ~ProcessMemory() = default;
  // Reads exactly out.size() bytes at addr; a short or failed read is an error
  // naming the address (unmapped, process gone, permission).
  virtual Status read(std::uint64_t addr, std::span<std::uint8_t> out) const = 0;

  Expected<std::uint64_t> read_u64(std::uint64_t addr) const;
  // A ByteSource over the structure starting at base.
  ByteSource source_at(std::uint64_t base) const;
};

// process_vm_readv, falling back to /proc/PID/mem when the syscall is refused
// (some seccomp profiles and older kernels). /proc/PID/mem is opened read-only.
class LiveProcessMemory final : public ProcessMemory {
 public:
  explicit LiveProcessMemory(pid_t pid) : pid_(pid), task_(pid) {}
  Status read(std::uint64_t addr, std::span<std::uint8_t> out) const override;
  pid_t pid() const { return pid_; }

 private:
  pid_t pid_;
  mutable pid_t task_;               // pid_, or a live thread when the leader is a zombie
  mutable UniqueFd mem_fd_;          // opened on first fallback
  mutable bool vm_readv_refused_ = false;
};

}  // namespace tracecorr

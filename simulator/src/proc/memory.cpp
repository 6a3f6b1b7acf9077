#include "tracecorr/memory.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>

#include "tracecorr/maps.hpp"
#include "tracecorr/procfs.hpp"

namespace tracecorr {
namespace {

bool process_exists(pid_t pid) { return ::kill(pid, 0) == 0 || errno == EPERM; }

std::string where(pid_t pid, std::uint64_t addr, std::size_t size) {
  return "pid " + std::to_string(pid) + " address " + hex_address(addr) + " (" + std::to_string(size) + " bytes)";
}

// Why `addr` cannot be read: a mapping without read permission (PROT_NONE, a
// guard page) is not the same finding as no mapping at all.
// `detail` says how much was read before.
std::string describe_unreadable(pid_t pid, std::uint64_t addr, const std::string& detail) {
  if (auto maps = read_maps(pid))
    if (const Mapping* m = find_mapping(*maps, addr); m && !m->read)
      return "unreadable memory (PROT_NONE): " + detail + "mapped " + hex_address(m->start) + "-" +
             hex_address(m->end) + " without read permission at " + hex_address(addr);
  return "unmapped memory: " + detail + "nothing mapped at " + hex_address(addr);
}

}  // namespace

std::string hex_address(std::uint64_t address) {
  char b[24];
  std::snprintf(b, sizeof b, "0x%llx", static_cast<unsigned long long>(address));
  return b;
}

Expected<std::uint64_t> ProcessMemory::read_u64(std::uint64_t addr) const {
  std::uint64_t v = 0;
  auto st = read(addr, {reinterpret_cast<std::uint8_t*>(&v), sizeof v});
  if (!st) return st.error();
  return v;  // native byte order: the target runs on this machine's byte order
}

ByteSource buffer_source(std::span<const std::uint8_t> bytes) {
  return [bytes](std::uint64_t offset, std::span<std::uint8_t> out) -> Status {
    if (offset > bytes.size() || out.size() > bytes.size() - offset)
      return make_error("needs " + std::to_string(out.size()) + " bytes but the buffer ends at " +
                        std::to_string(bytes.size()));
    std::memcpy(out.data(), bytes.data() + offset, out.size());
    return Ok{};
  };
}

ByteSource ProcessMemory::source_at(std::uint64_t base) const {
  // The ProcessMemory outlives the decoder call that uses this source.
  return [this, base](std::uint64_t offset, std::span<std::uint8_t> out) -> Status {
    if (offset > UINT64_MAX - base) return make_error("address overflows", hex_address(base) + "+" + std::to_string(offset));
    return read(base + offset, out);
  };
}

Status LiveProcessMemory::read(std::uint64_t addr, std::span<std::uint8_t> out) const {
  if (out.empty()) return Ok{};
  if (addr > UINT64_MAX - out.size() + 1)
    return make_error("the range wraps around the address space", where(pid_, addr, out.size()));

  if (!vm_readv_refused_) {
    std::size_t done = 0;
    while (done < out.size()) {
      iovec local{out.data() + done, out.size() - done};
      iovec remote{reinterpret_cast<void*>(addr + done), out.size() - done};
      ssize_t n = ::process_vm_readv(task_, &local, 1, &remote, 1, 0);
      if (n > 0) {
        done += static_cast<std::size_t>(n);
        continue;
      }
      int err = n == 0 ? EFAULT : errno;
      if (err == EINTR) continue;
      if ((err == EINVAL || err == ESRCH) && task_ == pid_) {
        // A zombie thread-group leader has no memory of its own; any live thread shares it.
        pid_t live = live_task(pid_);
        if (live != pid_) {
          task_ = live;
          continue;
        }
      }
      if (err == EFAULT)
        return make_error(ErrorKind::kUnmapped, describe_unreadable(pid_, addr + done, std::to_string(done) + " of " +
                                                                     std::to_string(out.size()) + " bytes readable, "),
                          where(pid_, addr, out.size()));
      if (err == ESRCH) return make_error(ErrorKind::kGone, "the process is gone", where(pid_, addr, out.size()));
      if (err == EINVAL && out.size() - done <= SSIZE_MAX)
        return make_error(ErrorKind::kGone, "the process has no memory (exited, a zombie, or a kernel thread)", where(pid_, addr, out.size()));
      if ((err == EPERM || err == ENOSYS) && process_exists(pid_)) {
        // Refused by a seccomp profile, an LSM or an old kernel: try /proc/PID/mem.
        vm_readv_refused_ = true;
        break;
      }
      if (err == EPERM) return make_error(ErrorKind::kPermission, "permission denied", where(pid_, addr, out.size()));
      return make_error(std::string("process_vm_readv failed: ") + std::strerror(err), where(pid_, addr, out.size()));
    }
    if (!vm_readv_refused_) return Ok{};
  }

  if (!mem_fd_) {
    std::string path = process_dir(pid_) + "/mem";
    // Read only: tracecorr never writes into a target.
    mem_fd_.reset(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (!mem_fd_) {
      int err = errno;
      if (err == ENOENT || err == ESRCH) return make_error(ErrorKind::kGone, "the process is gone", where(pid_, addr, out.size()));
      return make_error(std::string("process_vm_readv refused and ") + path + " not readable: " +
                            (err == EACCES || err == EPERM ? "permission denied" : std::strerror(err)),
                        where(pid_, addr, out.size()));
    }
  }
  std::size_t done = 0;
  while (done < out.size()) {
    // pread takes a signed offset: addresses above 2^63 are kernel space anyway.
    if (addr + done > static_cast<std::uint64_t>(INT64_MAX))
      return make_error(ErrorKind::kUnmapped, "address is outside user space", where(pid_, addr, out.size()));
    ssize_t n = ::pread(mem_fd_.get(), out.data() + done, out.size() - done, static_cast<off_t>(addr + done));
    if (n > 0) {
      done += static_cast<std::size_t>(n);
      continue;
    }
    int err = n == 0 ? EIO : errno;
    if (err == EINTR) continue;
    if (err == EIO || err == EFAULT) {
      if (!process_exists(pid_)) return make_error(ErrorKind::kGone, "the process is gone", where(pid_, addr, out.size()));
      return make_error(ErrorKind::kUnmapped, describe_unreadable(pid_, addr + done, ""), where(pid_, addr, out.size()));
    }
    if (err == ESRCH) return make_error(ErrorKind::kGone, "the process is gone", where(pid_, addr, out.size()));
    return make_error(std::string("reading /proc/PID/mem failed: ") + std::strerror(err), where(pid_, addr, out.size()));
  }
  return Ok{};
}

}  // namespace tracecorr

// A launched process's stores into the head of one mapping, its system calls
// and its forks, observed deterministically: the watch follows the process from
// before its exec, with every thread it starts and every process it forks
// before it maps the mapping (a wrapper that forks and does not exec, such as
// `unshare --fork` or a shell running its last command as a child, starts the
// agent in a child; a container puts it in a pid namespace of its own: pids are
// the host's), stops each thread at the system calls it is asked about and,
// once the mapping appears, arms hardware watchpoints on its first bytes in
// every thread. Each store then stops the storing thread right after it, and
// the watched bytes are read there, so the order of a writer's stores (a
// seqlock's "timestamp last") is observed, not sampled.
//
// Protocols decide which mapping (a name predicate) and which system calls
// matter; the watch only reports, in order. Judging is theirs.
//
// The ptrace discipline is hardware_watch.hpp's: PTRACE_SEIZE, every thread
// disarmed and detached on every way out, the target's own signals delivered
// unchanged, nothing written into the target's memory.
//
// Host: x86-64 (DR0..DR3) or arm64 (NT_ARM_HW_WATCH watchpoints, stepped
// over after each trap: arm64 traps before the store); four 8-byte chunks, at
// most 32 bytes. Guests of qemu-user are watched too: qemu performs a guest's
// stores and system calls as host ones at the same addresses (system call
// numbers are then the host's, and qemu's own calls are seen as well).
#pragma once

#include <sys/types.h>

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "tracecorr/error.hpp"

namespace tracecorr::watch {

inline constexpr std::size_t kMappingWatchMaxBytes = 32;  // four debug registers of 8 bytes

struct MappingWatchEvent {
  enum class Kind {
    kMapped,   // the mapping appeared (address, name); watchpoints armed from here on
    kStore,    // a store into the watched bytes; `bytes` as they were right after it
    kSyscall,  // a system call of interest returned (nr, args, result)
    kFork,     // a new process; `child_has_mapping`: the child's address space holds it too
    kExec,     // the process replaced its image: the mapping, if any, is gone
  };
  Kind kind = Kind::kStore;
  std::chrono::steady_clock::time_point at;
  pid_t pid = 0;
  pid_t tid = 0;
  // kMapped, kStore
  std::uint64_t address = 0;
  std::string mapping_name;  // kMapped: as /proc/PID/maps names it
  std::vector<std::uint8_t> bytes;  // kMapped: the bytes when armed; kStore: after the store
  std::uint64_t pc_after_store = 0;  // kStore (host address: in qemu's code for a qemu guest)
  // kSyscall
  long syscall = -1;
  std::array<std::uint64_t, 6> args{};
  std::int64_t result = 0;  // -errno on failure
  // kFork. A child of a process with the watched mapping (`address`) is let
  // go at its first stop; any other is followed.
  pid_t child = 0;
  // It runs in the parent's own address space until it execs (vfork,
  // posix_spawn's CLONE_VM): it shares everything and inherits nothing.
  bool child_shares_memory = false;
  bool child_has_mapping = false;
  std::string child_mapping_name;
};

struct MappingWatchReport {
  std::vector<MappingWatchEvent> events;  // in the order the watch saw them; the first kMaxKeptEvents
  std::size_t events_dropped = 0;
  std::size_t threads_followed = 0;
  std::size_t threads_armed = 0;
  std::size_t stores_seen = 0;
  std::size_t syscalls_seen = 0;
  std::size_t signals_forwarded = 0;
  std::string ended_because;
  std::chrono::steady_clock::time_point ended_at{};  // when it stopped watching
  std::optional<Error> error;  // the watch stopped early (what it saw until then stays valid)
  std::size_t watched_bytes = 0;

  static constexpr std::size_t kMaxKeptEvents = 4096;
  // "3 threads followed, 3 armed, 12 stores and 4 system calls seen; ended: ..."
  std::string describe() const;
};

class MappingWatch {
 public:
  struct Settings {
    // True for the /proc/PID/maps name of the mapping to watch.
    std::function<bool(const std::string& name)> is_watched_mapping;
    std::size_t watched_bytes = kMappingWatchMaxBytes;  // from the mapping's start, at most kMappingWatchMaxBytes
    std::set<long> syscalls;  // host system call numbers reported as kSyscall
  };

  // Seizes `pid`, a process tracecorr forked that has not exec'd yet, from the
  // watch's own thread (ptrace binds a tracee to one tracer thread); returns
  // once it is seized. Errors: no hardware watchpoints on this host, ptrace
  // refused; the process is then left untouched.
  static Expected<std::unique_ptr<MappingWatch>> follow_launch(pid_t pid, Settings settings);
  ~MappingWatch();  // finish()
  MappingWatch(const MappingWatch&) = delete;
  MappingWatch& operator=(const MappingWatch&) = delete;

  // The events so far (a copy; the watch goes on).
  MappingWatchReport snapshot() const;
  // Ends the watch (every thread disarmed and detached) and returns what it saw.
  MappingWatchReport finish();

  struct State;  // shared with the watch's thread; defined in mapping_watch.cpp

 private:
  explicit MappingWatch(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

}  // namespace tracecorr::watch

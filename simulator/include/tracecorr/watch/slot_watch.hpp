// Whether a record is complete when its thread publishes it, checked deterministically: a hardware watchpoint on each new
// thread's TLS slot (the pointer to its record) stops the thread right after
// the store that publishes the pointer, and the record it points to is read
// there, before the thread runs its next instruction. A record published
// before it is complete (a real agent's zeroed record filled in a few
// microseconds later) is then seen every time, where polling sees it only
// when a poll happens to fall into that gap.
//
// The watch follows the launched process from before its exec
// (PTRACE_O_TRACECLONE/FORK/VFORK/EXEC): every thread it, or a process it
// forks, starts is held at its first stop until its slot is armed, provided
// the agent library is already located in that process (the usual order: the
// library is loaded, then the threads that publish records start). Threads
// that published before their slot could be armed are counted, not judged.
//
// Host: x86-64 or arm64, native targets (the thread pointer is the host's:
// fs_base, TPIDR_EL0).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tracecorr/error.hpp"
#include "tracecorr/record_layout.hpp"

namespace tracecorr::watch {

// One store of a non-zero pointer into a watched slot, and the record it
// pointed to at that moment; with Settings::every_store, any store into the
// watched bytes, and what they held after it.
struct SlotPublication {
  std::chrono::steady_clock::time_point at;
  pid_t pid = 0;
  pid_t tid = 0;
  std::uint64_t slot_address = 0;
  std::uint64_t record_pointer = 0;
  std::optional<RecordBytes> bytes;  // read by the watch's layout; nullopt: unreadable memory (read_error)
  std::optional<Error> read_error;
  // Settings::every_store: the watched bytes as the store left them, and
  // whether this is the state the watch found when it armed the thread
  // (no store: what the thread held before it was watched).
  std::vector<std::uint8_t> slot_bytes;
  bool at_arming = false;
};

struct SlotWatchReport {
  std::size_t threads_started = 0;  // threads that began while the watch ran
  std::size_t threads_armed = 0;    // slots watched while still zero (before any publication)
  std::size_t publications_seen = 0;
  std::vector<SlotPublication> publications;  // the first kMaxKeptPublications
  // Threads never armed, by why ("published before its slot could be watched", ...).
  std::map<std::string, std::size_t> not_armed;
  std::size_t signals_forwarded = 0;  // the target's own signals, re-delivered unchanged
  std::string ended_because;
  std::optional<Error> error;  // the watch stopped early (what it saw until then stays valid)

  static constexpr std::size_t kMaxKeptPublications = 256;
  // "4 threads started, 4 slots armed, 4 publications seen; not armed: ..."
  std::string describe() const;
};

class SlotWatch {
 public:
  // The slot of a thread of process `pid` whose thread pointer is
  // `thread_pointer`; an error (with why) while it cannot be known yet, e.g.
  // before the agent library is loaded or its TLS descriptor relocated.
  using SlotLocator = std::function<Expected<std::uint64_t>(pid_t pid, std::uint64_t thread_pointer)>;

  struct Settings {
    // After the first slot is located, of the target's own time (wall minus
    // its longest wait for a CPU): how long the watch goes on without a new
    // thread or publication once it has seen a publication ...
    std::chrono::milliseconds quiet{300};
    // ... and how long at most (threads that never publish, a JVM that keeps
    // starting threads) ...
    std::chrono::milliseconds after_located{2000};
    // ... and, however starved the target, how long at most by the wall clock.
    std::chrono::milliseconds ceiling{20000};
    // Before any slot is located (a library that is never loaded).
    std::chrono::milliseconds until_located{10000};
    // Called with each followed process held at its exec (PTRACE_EVENT_EXEC),
    // before the new program runs its first instruction (LaunchSpec::on_exec).
    std::function<void(pid_t)> on_exec;
    // The bytes watched from the slot's address: 8 (a pointer) up to
    // kMaxWatchedBytes (a struct, in four 8-byte debug registers).
    std::size_t watched_bytes = 8;
    // A struct's whole life rather than a pointer's publication: each thread
    // is armed whatever its slot holds (its state then reported, at_arming),
    // and every store, zeroing ones too, is reported with the watched bytes
    // (slot_bytes); no record is read.
    bool every_store = false;
    // Called on the watch's thread with each publication (every_store: each
    // state) as it is seen, kept in the report or not: how a session follows
    // the watch while it runs. Must not block.
    std::function<void(const SlotPublication&)> on_publication;
  };
  static constexpr std::size_t kMaxWatchedBytes = 32;

  // Seizes `pid`, a process tracecorr forked that has not exec'd yet, from
  // the watch's own thread (ptrace binds a tracee to one tracer thread);
  // returns once it is seized. Publications are read by `layout`. An error:
  // it could not be (no hardware watchpoints on this host, ptrace refused, a
  // layout failing check());
  // the process is then left untouched.
  static Expected<std::unique_ptr<SlotWatch>> follow_launch(pid_t pid, const RecordLayout& layout, SlotLocator locate,
                                                            Settings settings);
  static Expected<std::unique_ptr<SlotWatch>> follow_launch(pid_t pid, const RecordLayout& layout, SlotLocator locate) {
    return follow_launch(pid, layout, std::move(locate), Settings{});
  }
  ~SlotWatch();  // finish()
  SlotWatch(const SlotWatch&) = delete;
  SlotWatch& operator=(const SlotWatch&) = delete;

  // Waits until the watch settles by its own rules or `deadline` passes,
  // ends it (every thread disarmed and detached) and returns what it saw.
  SlotWatchReport finish(std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::min());

  struct State;  // shared with the watch's thread; defined in slot_watch.cpp

 private:
  explicit SlotWatch(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

}  // namespace tracecorr::watch

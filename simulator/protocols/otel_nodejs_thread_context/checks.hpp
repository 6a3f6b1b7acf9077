// The writer rules one look at a Node.js process judges
// (spec/otel-nodejs-thread-context.md §6): the module's ELF (NJS-01..03), the
// reference data (NJS-09), and one thread's struct, walk and record (NJS-06,
// 07, 08, 11, 12). Shared by inspect and, later, the conform suite.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <vector>

#include "otel_nodejs_thread_context/record.hpp"
#include "otel_nodejs_thread_context/walk.hpp"
#include "tracecorr/discovery.hpp"
#include "tracecorr/finding.hpp"

namespace tracecorr::otel_nodejs_thread_context {

std::vector<Finding> check_variable(const AgentLibrary& module);
// NJS-09: nullopt reference: no process context read. `publishes`: some
// thread's gate is open. A process that neither declares the schema nor opens
// a gate takes no part (what NJS-10 asks of one without AsyncContextFrame).
std::vector<Finding> check_reference_data(const std::optional<ReferenceData>& reference, bool publishes);

// What one thread showed: its walk, the key where a scan found it (when the
// hashed bucket missed it), and the record the walk reached.
struct ThreadLook {
  pid_t tid = 0;
  WalkTrace walk;
  std::optional<MisplacedEntry> misplaced;
  std::optional<ThreadContextRecord> record;
  std::optional<std::string> record_error;  // the record pointer led to no readable record
  const KeyMap* key_map = nullptr;
};
// NJS-06 (a step that failed on what the struct says), 07, 08, 11, 12; only
// what the look shows: nothing for a closed gate or a detached context.
std::vector<Finding> check_thread(const ThreadLook& look);

}  // namespace tracecorr::otel_nodejs_thread_context

// The thread context's writer rules that one look at a process judges,
// written once: `tracecorr inspect`, the host agent and the conformance suite
// call them, so a rule has one wording and one verdict wherever it is judged.
//
// Each finding names where: the module and its symbol (TCTX-01..05), the
// process context's attributes (TCTX-06, 07), or the thread, the record's
// address and the entry's offset in attrs_data (TCTX-11..20). Rules that need
// watching the writer over time (TCTX-08, 10, 14, 21..28) are not here.
#pragma once

#include <sys/types.h>

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "otel_thread_context/record.hpp"
#include "tracecorr/discovery.hpp"
#include "tracecorr/error.hpp"
#include "tracecorr/finding.hpp"

namespace tracecorr::otel_thread_context {

// ---- The variable (TCTX-01..05) ----

// The requirements check_variable judges, in order.
inline constexpr std::array<std::string_view, 5> kVariableRequirements{"TCTX-01", "TCTX-02", "TCTX-03", "TCTX-04",
                                                                       "TCTX-05"};
// One Finding per kVariableRequirements entry, of the module discovery found:
// its .dynsym entry (defined, binding, visibility, type, size) and the
// relocations that reach it. TCTX-04 and 05 are NotApplicable in an
// executable (the linker relaxes every access there).
std::vector<Finding> check_variable(const AgentLibrary& module);

// ---- The reference data (TCTX-06, 07) ----

// TCTX-06 and TCTX-07 of the process context's attributes (nullopt: no
// process context was read and decoded: both NotApplicable). A missing key
// map is Tolerated until a record carries an attribute entry
// (`records_carry_entries`), then Violated.
std::vector<Finding> check_reference_data(const std::optional<ReferenceData>& data, bool records_carry_entries);

// ---- One thread's record (TCTX-11..20) ----

struct RecordLook {
  pid_t tid = 0;
  std::uint64_t address = 0;  // the record pointer the thread's variable held
  ThreadContextRecord record;
  // Whether the 640 bytes from `address` are all readable (nullopt: not
  // probed). A right-sized record next to an unmapped page meets TCTX-20,
  // but a reader copying a fixed 640-byte window loses it: Tolerated.
  std::optional<bool> recommended_window_readable;
};

// The requirements check_record judges, in order.
inline constexpr std::array<std::string_view, 8> kRecordRequirements{"TCTX-11", "TCTX-12", "TCTX-13", "TCTX-15",
                                                                     "TCTX-16", "TCTX-17", "TCTX-19", "TCTX-20"};
// One Finding per kRecordRequirements entry. A record whose `valid` is not 1
// is what readers ignore (TCTXR-08): only TCTX-13 (0 is a writer's word, any
// other value breaks it) and TCTX-19 are judged on it, the rest are
// NotApplicable. `key_map`: the map published when the record was read
// (nullptr: none; TCTX-11 is then NotApplicable, TCTX-07 says why).
std::vector<Finding> check_record(const RecordLook& look, const KeyMap* key_map);

// The requirement a failed read of a published record breaks, when the
// writer is at fault: a non-NULL pointer must lead to 28 + attrs_data_size
// readable bytes (TCTX-12). "" when the failure proves nothing against the
// writer (the thread went away, tracecorr was refused, dynamic TLS the thread
// has not touched).
std::string requirement_of_record_read_error(const Error& error);

// Where an invalid UTF-8 sequence starts in `value`, and whether it is a
// multi-byte character cut by the value's end (a lead byte and fewer
// continuation bytes than it announces, then nothing): TCTX-17's two ways.
struct Utf8Problem {
  std::size_t offset = 0;
  bool cut_at_end = false;
};
std::optional<Utf8Problem> utf8_problem(std::span<const std::uint8_t> value);

}  // namespace tracecorr::otel_thread_context

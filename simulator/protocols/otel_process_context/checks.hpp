// The process context's writer rules that one look at a process can judge,
// written once: `tracecorr inspect` and the conformance suite's probes both
// call them, so a rule has one wording and one verdict wherever it is judged.
//
// The engine's reader (tracecorr/process_context.hpp) reads; these judge what
// it read. Rules that need watching the writer over time (PCTX-07..10, 13, 14)
// are not here.
#pragma once

#include <array>
#include <string>
#include <string_view>
#include <vector>

#include "tracecorr/finding.hpp"
#include "tracecorr/process_context.hpp"

namespace tracecorr::otel_process_context {

namespace pc = tracecorr::process_context;

// ---- Each rule over what it rests on ----

// PCTX-01: a mapping named as the OTEP lists exists (Violated when none).
// `found` counts every one the process maps (the snapshot lists only the first
// few: pc::kMaxMappingsRead); 0 means mappings.size().
Finding check_mapping_present(const std::vector<pc::ContextMapping>& mappings, std::size_t found = 0);
// PCTX-12: at most one.
Finding check_single_mapping(const std::vector<pc::ContextMapping>& mappings, std::size_t found = 0);
// PCTX-11 of one mapping: dc in VmFlags (KitError when smaps did not say).
Finding check_dont_fork(const pc::ContextMapping& mapping);
// PCTX-17 of one mapping: rw-p.
Finding check_private_read_write(const pc::ContextMapping& mapping);
// PCTX-02 and PCTX-03 of a header (Tolerated for the development version).
Finding check_signature(const pc::Header& header);
Finding check_version(const pc::Header& header);
// PCTX-06: the timestamp lies in [process start, now] on CLOCK_BOOTTIME
// (start known to a clock tick; nullopt: only `now` bounds it).
Finding check_clock(const pc::Header& header, std::optional<std::uint64_t> process_start_boottime_ns,
                    std::uint64_t boottime_now_ns);
// PCTX-18: payload_size within the size every known reader accepts.
Finding check_payload_size(const pc::Header& header);
// PCTX-15 and PCTX-16 of a decoded payload.
Finding check_unique_keys(const pc::Payload& payload);
Finding check_threadlocal_placement(const pc::Payload& payload);

// The rules one mapping's read and decode rest on: PCTX-01 (the header at the
// mapping's start), 02, 03, 04, 05, 06, 15, 16, 18. Rules the read could
// not reach are NotApplicable (the header was not read) or KitError (no
// consistent read, or a payload beyond tracecorr's decode bounds).
std::vector<Finding> check_mapping_read(const pc::MappingSnapshot& mapping, const pc::Snapshot& snapshot);

// ---- One snapshot, every rule it can judge ----

// The requirements check_snapshot judges, in registry order.
inline constexpr std::array<std::string_view, 12> kSnapshotRequirements{
    "PCTX-01", "PCTX-02", "PCTX-03", "PCTX-04", "PCTX-05", "PCTX-06",
    "PCTX-11", "PCTX-12", "PCTX-15", "PCTX-16", "PCTX-17", "PCTX-18"};

// One Finding per kSnapshotRequirements entry, in that order. With several
// mappings each rule is judged on every one and the worst outcome stands
// (Violated, then KitError, Tolerated, Met, NotApplicable), its reason naming
// the mapping; a Met counts the mappings it rests on. Without a mapping,
// PCTX-01 is Violated and the rest NotApplicable.
std::vector<Finding> check_snapshot(const pc::Snapshot& snapshot);

// The requirement a failed read or decode breaks, when the writer is at
// fault: the package's reading of the engine's error kinds ("" when the
// failure proves nothing about the writer: the process went away, tracecorr
// was refused, the timestamp never settled).
std::string requirement_of_read_error(const pc::ContextRead& read);
std::string requirement_of_decode_error(const Error& error);

// The payload_size when it exceeds the message: the length of the longest
// prefix that decodes, when a non-empty prefix does and the whole does not
// (trailing bytes after the message); nullopt otherwise.
std::optional<std::size_t> message_end_before_payload_end(std::span<const std::uint8_t> payload);

}  // namespace tracecorr::otel_process_context

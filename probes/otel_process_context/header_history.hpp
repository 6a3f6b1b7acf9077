// The story of a process context header told by the mapping watch's stores:
// each time the timestamp turned non-zero (the first publication, then each
// update), each store that changed another field while the timestamp was set,
// and the naming calls around them. Pure: judges read it, tests feed it
// hand-made watch reports.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "tracecorr/watch/mapping_watch.hpp"
#include "tracecorr/process_context.hpp"

namespace tracecorr::otel_process_context {

// The timestamp turned non-zero: from 0 (the seqlock's way), or straight from
// another non-zero value (an update that never zeroed it).
struct Publication {
  std::size_t event = 0;  // index in the report's events
  process_context::Header header;  // right after the store
  std::optional<std::uint64_t> previous_timestamp;  // the last non-zero one before, if any
  bool from_zero = true;
  bool complete() const;  // signature, version, payload size and pointer all written
  // Naming calls (prctl PR_SET_VMA on the mapping) after this store, before
  // the timestamp next changed (or the watch ended).
  std::size_t naming_calls_after = 0;
  // Whether the timestamp changed again later, and how long the watch went on
  // after this store (a naming call still to come may have been cut off);
  // when the report dropped events, only until its last kept one.
  bool superseded = false;
  std::chrono::nanoseconds watched_after{0};
  // Long enough without a change that a naming call would have come: the
  // writer names right after the store, not seconds later.
  bool settled() const { return superseded || watched_after >= kNamingGrace; }
  static constexpr std::chrono::milliseconds kNamingGrace{500};
};

// A store that changed another header field while the timestamp stayed set.
struct ChangeWhileSet {
  std::size_t event = 0;
  process_context::Header before, after;
  std::vector<std::string> fields;  // "payload", "payload_size", ...
};

struct HeaderHistory {
  std::optional<std::uint64_t> address;    // of the watched mapping (nullopt: it never appeared)
  std::string mapping_name;
  bool armed_before_publication = false;   // the timestamp was 0 when the watch armed
  std::vector<Publication> publications;
  std::vector<ChangeWhileSet> changes_while_set;
  std::size_t stores = 0;
  std::size_t naming_calls = 0;             // prctl PR_SET_VMA on the mapping, in total
  std::size_t naming_calls_before_first_publication = 0;
  std::vector<std::size_t> unreadable_stores;  // stores whose bytes could not be read
};

// `pid`: the judged process (events of other processes, e.g. forked children,
// are left out).
HeaderHistory header_history(const watch::MappingWatchReport& report, pid_t pid);

// "signature \"OTEL_CTX\", version 2, payload_size 120, published_at 123, payload 0x7f.."
std::string describe(const process_context::Header& header);

}  // namespace tracecorr::otel_process_context

// What the HTML report draws, gathered from the sessions' evidence after the
// probes judged (a suite's figures(), e.g. probes/elastic_v1/figures.cpp). Facts only, no verdicts: the pictures
// show the same evidence the judges read. The JSON report carries them too
// ("figures"), so a saved report renders later (tracecorr report --html).
//
// Everything here that came from the target (symbol names, ids) is hostile:
// renderers escape it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace tracecorr::conform {

// One thing that happened in a session, at a time relative to its opening.
struct TimelineEvent {
  double at_ms = 0;
  std::string kind;  // "registration", "correlation", "span", "watch", "sampling", "boundary", "stop"
  std::string text;
};

struct SessionTimeline {
  std::string session;  // "enabled"
  double duration_ms = 0;
  std::vector<TimelineEvent> events;  // in time order, bounded (kMaxTimelineEvents)
};
inline constexpr std::size_t kMaxTimelineEvents = 400;

// One exported span of the enabled session: how long after its end it
// arrived, against the deferral delay in force when it ended.
struct DeferralPoint {
  std::string session;
  std::string trace_id, span_id;  // hex
  bool transaction = false;       // false: a child span, never deferred (the baseline)
  bool sampled = true;
  double ended_ms = 0;            // since the session opened
  double export_delay_ms = 0;
  std::optional<double> delay_in_force_ms;  // nullopt: a registration or the timing boundary was too close to tell
};

inline constexpr std::size_t kMaxDeferralPoints = 5000;

// One observed state of a watched record (the update-order watch), in store order.
struct RecordStore {
  std::string session;
  std::int64_t tid = 0;
  std::uint64_t record_address = 0;
  std::size_t index = 0;       // 0: the state read when the watch began
  double at_ms = 0;            // since the watch began
  unsigned valid = 0;          // the valid byte after the store
  std::string changed;         // fields that differ from the previous state ("valid", "span_id", ...)
  std::uint64_t pc_after_store = 0;
  bool violation = false;      // a field changed while valid stayed set (or unwatched bytes did)
};

inline constexpr std::size_t kMaxRecordStores = 2000;

// Stacks sampled while a transaction was current in the sampled thread.
struct StackCount {
  std::vector<std::string> frames;  // outermost first, symbolised: "function (library)"
  std::uint64_t count = 0;
};
struct TransactionFlame {
  std::string trace_id, transaction_id;  // hex
  std::uint64_t samples = 0;
  std::vector<StackCount> stacks;  // bounded (kMaxStacksPerTransaction), most samples first
};
inline constexpr std::size_t kMaxStacksPerTransaction = 200;
inline constexpr std::size_t kMaxFlameTransactions = 12;

struct FlameGraphs {
  std::string source;  // where the samples came from, in words; empty: no sampling
  std::uint64_t samples = 0;                  // every sample taken
  std::uint64_t samples_without_transaction = 0;  // record invalid, no trace or unreadable
  std::uint64_t transactions_total = 0;       // transactions with samples (only kMaxFlameTransactions are kept)
  std::vector<TransactionFlame> transactions;  // most samples first
};

struct Figures {
  std::vector<SessionTimeline> timelines;
  std::vector<DeferralPoint> deferral;
  std::vector<RecordStore> record_stores;
  FlameGraphs flames;
  bool empty() const {
    return timelines.empty() && deferral.empty() && record_stores.empty() && flames.source.empty();
  }
};

}  // namespace tracecorr::conform

// What the HTML report draws, gathered from the sessions' evidence after the
// probes judged (a suite's figures(), e.g. probes/elastic_v1/figures.cpp). Facts only, no verdicts: the pictures
// show the same evidence the judges read. The JSON report carries them too
// ("figures"), so a saved report renders later (tracecorr report --html).
//
// The shapes are the engine's (timelines, scatters of points over a session's
// time, the states of a watched record, stacks grouped per context); every
// word a reader sees on them (titles, axes, legends, the requirement a figure
// illustrates) is the package's, in the captions.
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
  std::string session;  // its name: "enabled", "otel-thread-context/musl-dlopen"
  double duration_ms = 0;
  std::vector<TimelineEvent> events;  // in time order, bounded (kMaxTimelineEvents)
  std::string of = "session";  // what it is of: "session", "stage member" (profiler mode)
};
inline constexpr std::size_t kMaxTimelineEvents = 400;

// A scatter: one point per thing measured, y against x, in a primary series
// and a baseline series, with the reference value in force at each primary
// point drawn as a step line through them (what the package's judge compares).
struct ScatterPoint {
  std::string session;
  std::string label;       // what the point is, in the package's words (its hover text)
  bool primary = false;    // false: the baseline series
  double x = 0, y = 0;
  std::optional<double> reference;  // nullopt: the reference was unclear (not judged)
};
inline constexpr std::size_t kMaxScatterPoints = 5000;

struct ScatterCaption {
  std::string id;           // the figure's name in the page (fig-<id>, data-figure="<id>")
  std::string requirement;  // the requirement it illustrates, shown before the title; may be empty
  std::string title;
  std::string empty;        // said when there is no point
  std::string description;  // the picture in words (its aria-label)
  std::string x_axis, y_axis, y_quantity;  // y_quantity: "export delay" in "median export delay"
  std::string primary, baseline, baseline_note;  // the series' names ("baseline_note": under the baseline's)
  std::string reference, unclear;                // the step line's name; a primary point with no reference
};

struct ScatterFigure {
  ScatterCaption caption;
  std::vector<ScatterPoint> points;  // bounded (kMaxScatterPoints)
};

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

struct RecordStoresCaption {
  std::string id;           // fig-<id>, data-figure="<id>"
  std::string requirement;  // shown before the title; may be empty
  std::string title;
  std::string empty;        // said when no store was watched
  std::string note;         // how to read the picture
};

struct RecordStoresFigure {
  RecordStoresCaption caption;
  std::vector<RecordStore> stores;  // bounded (kMaxRecordStores)
};

// Stacks sampled while a context (a trace and the id the record named it by)
// was current in the sampled thread.
struct StackCount {
  std::vector<std::string> frames;  // outermost first, symbolised: "function (library)"
  std::uint64_t count = 0;
};
struct ContextStacks {
  std::string trace_id, context_id;  // hex
  std::uint64_t samples = 0;
  std::vector<StackCount> stacks;  // bounded (kMaxStacksPerContext), most samples first
};
inline constexpr std::size_t kMaxStacksPerContext = 200;
inline constexpr std::size_t kMaxStackContexts = 12;

struct StacksCaption {
  std::string title = "Where each context's time went: flame graphs";
  std::string context = "context", contexts = "contexts";  // the package's word for a context, one and several
};

struct StacksFigure {
  StacksCaption caption;
  std::string source;  // where the samples came from, in words; empty: no sampling
  std::uint64_t samples = 0;                   // every sample taken
  std::uint64_t samples_without_context = 0;   // record invalid, no trace or unreadable
  std::uint64_t contexts_total = 0;            // contexts with samples (only kMaxStackContexts are kept)
  std::vector<ContextStacks> contexts;         // most samples first
};

struct Figures {
  std::vector<SessionTimeline> timelines;
  std::vector<ScatterFigure> scatters;            // bounded (kMaxScatters)
  std::optional<RecordStoresFigure> record_stores;  // nullopt: the suite watches no record's stores
  StacksFigure stacks;
  bool empty() const { return timelines.empty() && scatters.empty() && !record_stores && stacks.source.empty(); }
};
inline constexpr std::size_t kMaxScatters = 8;

}  // namespace tracecorr::conform

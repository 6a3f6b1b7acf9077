#include "figures_json.hpp"

#include "tracecorr/plugin_registry.hpp"
#include "tracecorr/report/report.hpp"
#include "tracecorr/report/saved_figures.hpp"

namespace tracecorr::report {

using namespace tracecorr::conform;

// Strings from the target may be anything: keep them valid UTF-8 and visible.
std::string json_text(std::string_view raw) { return printable_text(raw, true); }

namespace {

using json = nlohmann::ordered_json;

// Bounds for what a saved report may make us render (the others: figures.hpp).
constexpr std::size_t kMaxFrames = 128;
constexpr std::size_t kMaxTimelines = 16;

PluginRegistry<SavedFiguresReader>& readers() {
  static PluginRegistry<SavedFiguresReader> registry;
  return registry;
}

template <typename T>
T get(const json& j, const char* key, T fallback) {
  return saved_value<T>(j, key, std::move(fallback));
}

json timelines_to_json(const std::vector<SessionTimeline>& timelines) {
  json out = json::array();
  for (const auto& t : timelines) {
    json events = json::array();
    for (const auto& e : t.events) events.push_back({{"at_ms", e.at_ms}, {"kind", json_text(e.kind)}, {"text", json_text(e.text)}});
    out.push_back({{"of", json_text(t.of)}, {"session", json_text(t.session)}, {"duration_ms", t.duration_ms},
                   {"events", events}});
  }
  return out;
}

json scatter_to_json(const ScatterFigure& f) {
  const auto& c = f.caption;
  json caption = {{"id", json_text(c.id)}, {"requirement", json_text(c.requirement)}, {"title", json_text(c.title)},
                  {"empty", json_text(c.empty)}, {"description", json_text(c.description)},
                  {"x_axis", json_text(c.x_axis)}, {"y_axis", json_text(c.y_axis)},
                  {"y_quantity", json_text(c.y_quantity)}, {"primary", json_text(c.primary)},
                  {"baseline", json_text(c.baseline)}, {"baseline_note", json_text(c.baseline_note)},
                  {"reference", json_text(c.reference)}, {"unclear", json_text(c.unclear)}};
  json points = json::array();
  for (const auto& p : f.points)
    points.push_back({{"session", json_text(p.session)}, {"label", json_text(p.label)}, {"primary", p.primary},
                      {"x", p.x}, {"y", p.y}, {"reference", p.reference ? json(*p.reference) : json(nullptr)}});
  return {{"caption", caption}, {"points", points}};
}

json record_stores_to_json(const RecordStoresFigure& f) {
  const auto& c = f.caption;
  json stores = json::array();
  for (const auto& s : f.stores)
    stores.push_back({{"session", json_text(s.session)},
                      {"tid", s.tid},
                      {"record_address", s.record_address},
                      {"index", s.index},
                      {"at_ms", s.at_ms},
                      {"valid", s.valid},
                      {"changed", json_text(s.changed)},
                      {"pc_after_store", s.pc_after_store},
                      {"violation", s.violation}});
  return {{"caption", {{"id", json_text(c.id)}, {"requirement", json_text(c.requirement)}, {"title", json_text(c.title)},
                       {"empty", json_text(c.empty)}, {"note", json_text(c.note)}}},
          {"stores", stores}};
}

json stacks_to_json(const StacksFigure& f) {
  json contexts = json::array();
  for (const auto& t : f.contexts) {
    json stacks = json::array();
    for (const auto& s : t.stacks) {
      json frames = json::array();
      for (const auto& fr : s.frames) frames.push_back(json_text(fr));
      stacks.push_back({{"frames", frames}, {"count", s.count}});
    }
    contexts.push_back({{"trace_id", json_text(t.trace_id)},
                        {"context_id", json_text(t.context_id)},
                        {"samples", t.samples},
                        {"stacks", stacks}});
  }
  return {{"caption",
           {{"title", json_text(f.caption.title)}, {"context", json_text(f.caption.context)},
            {"contexts", json_text(f.caption.contexts)}}},
          {"source", json_text(f.source)},
          {"samples", f.samples},
          {"samples_without_context", f.samples_without_context},
          {"contexts_total", f.contexts_total},
          {"contexts", contexts}};
}

std::vector<SessionTimeline> timelines_from_json(const json& j) {
  std::vector<SessionTimeline> out;
  for (const auto& t : saved_list(j, "timelines")) {
    SessionTimeline timeline;
    timeline.of = get<std::string>(t, "of", "session");
    timeline.session = get<std::string>(t, "session", "");
    timeline.duration_ms = get<double>(t, "duration_ms", 0);
    for (const auto& e : saved_list(t, "events")) {
      if (timeline.events.size() >= kMaxTimelineEvents) break;
      timeline.events.push_back({get<double>(e, "at_ms", 0), get<std::string>(e, "kind", ""), get<std::string>(e, "text", "")});
    }
    out.push_back(std::move(timeline));
    if (out.size() >= kMaxTimelines) break;
  }
  return out;
}

ScatterFigure scatter_from_json(const json& j) {
  ScatterFigure f;
  const json& c = saved_object(j, "caption");
  auto text = [&](const char* key) { return get<std::string>(c, key, ""); };
  f.caption = {text("id"), text("requirement"), text("title"), text("empty"), text("description"), text("x_axis"),
               text("y_axis"), text("y_quantity"), text("primary"), text("baseline"), text("baseline_note"),
               text("reference"), text("unclear")};
  for (const auto& p : saved_list(j, "points")) {
    if (f.points.size() >= kMaxScatterPoints) break;
    ScatterPoint point{get<std::string>(p, "session", ""), get<std::string>(p, "label", ""),
                       get<bool>(p, "primary", false), get<double>(p, "x", 0), get<double>(p, "y", 0), std::nullopt};
    if (p.is_object() && p.contains("reference") && p["reference"].is_number()) point.reference = p["reference"].get<double>();
    f.points.push_back(std::move(point));
  }
  return f;
}

RecordStoresFigure record_stores_from_json(const json& j) {
  RecordStoresFigure f;
  const json& c = saved_object(j, "caption");
  f.caption = {get<std::string>(c, "id", ""), get<std::string>(c, "requirement", ""), get<std::string>(c, "title", ""),
               get<std::string>(c, "empty", ""), get<std::string>(c, "note", "")};
  for (const auto& s : saved_list(j, "stores")) {
    if (f.stores.size() >= kMaxRecordStores) break;
    RecordStore r;
    r.session = get<std::string>(s, "session", "");
    r.tid = get<std::int64_t>(s, "tid", 0);
    r.record_address = get<std::uint64_t>(s, "record_address", 0);
    r.index = get<std::size_t>(s, "index", 0);
    r.at_ms = get<double>(s, "at_ms", 0);
    r.valid = get<unsigned>(s, "valid", 0);
    r.changed = get<std::string>(s, "changed", "");
    r.pc_after_store = get<std::uint64_t>(s, "pc_after_store", 0);
    r.violation = get<bool>(s, "violation", false);
    f.stores.push_back(std::move(r));
  }
  return f;
}

StacksFigure stacks_from_json(const json& j) {
  StacksFigure f;
  const json& c = saved_object(j, "caption");
  f.caption = {get<std::string>(c, "title", f.caption.title), get<std::string>(c, "context", f.caption.context),
               get<std::string>(c, "contexts", f.caption.contexts)};
  f.source = get<std::string>(j, "source", "");
  f.samples = get<std::uint64_t>(j, "samples", 0);
  f.samples_without_context = get<std::uint64_t>(j, "samples_without_context", 0);
  f.contexts_total = get<std::uint64_t>(j, "contexts_total", 0);
  for (const auto& t : saved_list(j, "contexts")) {
    if (f.contexts.size() >= kMaxStackContexts) break;
    ContextStacks context;
    context.trace_id = get<std::string>(t, "trace_id", "");
    context.context_id = get<std::string>(t, "context_id", "");
    context.samples = get<std::uint64_t>(t, "samples", 0);
    for (const auto& s : saved_list(t, "stacks")) {
      if (context.stacks.size() >= kMaxStacksPerContext) break;
      context.stacks.push_back(saved_stack(s));
    }
    f.contexts.push_back(std::move(context));
  }
  return f;
}

// The engine's own members besides the timelines: a report without any is in
// an older shape, a package's to read.
bool in_the_engines_shape(const json& j) {
  return j.is_object() && (j.contains("scatters") || j.contains("record_watch") || j.contains("stacks"));
}

}  // namespace

const json& saved_list(const json& j, const char* key) {
  static const json empty = json::array();
  if (!j.is_object()) return empty;
  auto it = j.find(key);
  return it != j.end() && it->is_array() ? *it : empty;
}

const json& saved_object(const json& j, const char* key) {
  static const json empty = json::object();
  if (!j.is_object()) return empty;
  auto it = j.find(key);
  return it != j.end() && it->is_object() ? *it : empty;
}

StackCount saved_stack(const json& j) {
  StackCount stack;
  stack.count = get<std::uint64_t>(j, "count", 0);
  for (const auto& fr : saved_list(j, "frames")) {
    if (stack.frames.size() >= kMaxFrames) break;
    if (fr.is_string()) stack.frames.push_back(fr.get<std::string>());
  }
  return stack;
}

void register_saved_figures_reader(const SavedFiguresReader& reader) { readers().add(reader); }

json figures_to_json(const Figures& f) {
  json scatters = json::array();
  for (const auto& s : f.scatters) scatters.push_back(scatter_to_json(s));
  json out = {{"timelines", timelines_to_json(f.timelines)}, {"scatters", scatters}};
  if (f.record_stores) out["record_watch"] = record_stores_to_json(*f.record_stores);
  out["stacks"] = stacks_to_json(f.stacks);
  return out;
}

Figures figures_from_json(const json& j) {
  Figures f;
  if (!in_the_engines_shape(j)) {
    for (const auto* reader : readers().all())
      if (auto older = reader->read(j)) {
        f = std::move(*older);
        break;
      }
    f.timelines = timelines_from_json(j);
    return f;
  }
  f.timelines = timelines_from_json(j);
  for (const auto& s : saved_list(j, "scatters")) {
    if (f.scatters.size() >= kMaxScatters) break;
    f.scatters.push_back(scatter_from_json(s));
  }
  if (j.contains("record_watch")) f.record_stores = record_stores_from_json(saved_object(j, "record_watch"));
  f.stacks = stacks_from_json(saved_object(j, "stacks"));
  return f;
}

}  // namespace tracecorr::report

#include "figures_json.hpp"

#include "tracecorr/report/report.hpp"

namespace tracecorr::conform {

// Strings from the target may be anything: keep them valid UTF-8 and visible.
std::string json_text(std::string_view raw) { return printable_text(raw, true); }

namespace {

using json = nlohmann::ordered_json;


template <typename T>
T get(const json& j, const char* key, T fallback) {
  if (!j.is_object()) return fallback;
  auto it = j.find(key);
  if (it == j.end()) return fallback;
  if constexpr (std::is_same_v<T, std::string>) {
    return it->is_string() ? it->template get<std::string>() : fallback;
  } else if constexpr (std::is_same_v<T, bool>) {
    return it->is_boolean() ? it->template get<bool>() : fallback;
  } else {
    return it->is_number() ? it->template get<T>() : fallback;
  }
}

const json& list(const json& j, const char* key) {
  static const json empty = json::array();
  if (!j.is_object()) return empty;
  auto it = j.find(key);
  return it != j.end() && it->is_array() ? *it : empty;
}

// Bounds for what a saved report may make us render (the others: figures.hpp).
constexpr std::size_t kMaxFrames = 128;

}  // namespace

json figures_to_json(const Figures& f) {
  json timelines = json::array();
  for (const auto& t : f.timelines) {
    json events = json::array();
    for (const auto& e : t.events) events.push_back({{"at_ms", e.at_ms}, {"kind", json_text(e.kind)}, {"text", json_text(e.text)}});
    timelines.push_back({{"session", json_text(t.session)}, {"duration_ms", t.duration_ms}, {"events", events}});
  }
  json deferral = json::array();
  for (const auto& d : f.deferral)
    deferral.push_back({{"session", json_text(d.session)},
                        {"trace_id", json_text(d.trace_id)},
                        {"span_id", json_text(d.span_id)},
                        {"transaction", d.transaction},
                        {"sampled", d.sampled},
                        {"ended_ms", d.ended_ms},
                        {"export_delay_ms", d.export_delay_ms},
                        {"delay_in_force_ms", d.delay_in_force_ms ? json(*d.delay_in_force_ms) : json(nullptr)}});
  json stores = json::array();
  for (const auto& s : f.record_stores)
    stores.push_back({{"session", json_text(s.session)},
                      {"tid", s.tid},
                      {"record_address", s.record_address},
                      {"index", s.index},
                      {"at_ms", s.at_ms},
                      {"valid", s.valid},
                      {"changed", json_text(s.changed)},
                      {"pc_after_store", s.pc_after_store},
                      {"violation", s.violation}});
  json flames = json::array();
  for (const auto& t : f.flames.transactions) {
    json stacks = json::array();
    for (const auto& s : t.stacks) {
      json frames = json::array();
      for (const auto& fr : s.frames) frames.push_back(json_text(fr));
      stacks.push_back({{"frames", frames}, {"count", s.count}});
    }
    flames.push_back({{"trace_id", json_text(t.trace_id)},
                      {"transaction_id", json_text(t.transaction_id)},
                      {"samples", t.samples},
                      {"stacks", stacks}});
  }
  return {{"timelines", timelines},
          {"deferral", deferral},
          {"record_stores", stores},
          {"flames",
           {{"source", json_text(f.flames.source)},
            {"samples", f.flames.samples},
            {"samples_without_transaction", f.flames.samples_without_transaction},
            {"transactions_total", f.flames.transactions_total},
            {"transactions", flames}}}};
}

Figures figures_from_json(const json& j) {
  Figures f;
  for (const auto& t : list(j, "timelines")) {
    SessionTimeline timeline;
    timeline.session = get<std::string>(t, "session", "");
    timeline.duration_ms = get<double>(t, "duration_ms", 0);
    for (const auto& e : list(t, "events")) {
      if (timeline.events.size() >= kMaxTimelineEvents) break;
      timeline.events.push_back({get<double>(e, "at_ms", 0), get<std::string>(e, "kind", ""), get<std::string>(e, "text", "")});
    }
    f.timelines.push_back(std::move(timeline));
    if (f.timelines.size() >= 16) break;
  }
  for (const auto& d : list(j, "deferral")) {
    if (f.deferral.size() >= kMaxDeferralPoints) break;
    DeferralPoint p;
    p.session = get<std::string>(d, "session", "");
    p.trace_id = get<std::string>(d, "trace_id", "");
    p.span_id = get<std::string>(d, "span_id", "");
    p.transaction = get<bool>(d, "transaction", false);
    p.sampled = get<bool>(d, "sampled", true);
    p.ended_ms = get<double>(d, "ended_ms", 0);
    p.export_delay_ms = get<double>(d, "export_delay_ms", 0);
    if (d.is_object() && d.contains("delay_in_force_ms") && d["delay_in_force_ms"].is_number())
      p.delay_in_force_ms = d["delay_in_force_ms"].get<double>();
    f.deferral.push_back(std::move(p));
  }
  for (const auto& s : list(j, "record_stores")) {
    if (f.record_stores.size() >= kMaxRecordStores) break;
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
    f.record_stores.push_back(std::move(r));
  }
  const json empty = json::object();
  const json& flames = j.is_object() && j.contains("flames") && j["flames"].is_object() ? j["flames"] : empty;
  f.flames.source = get<std::string>(flames, "source", "");
  f.flames.samples = get<std::uint64_t>(flames, "samples", 0);
  f.flames.samples_without_transaction = get<std::uint64_t>(flames, "samples_without_transaction", 0);
  f.flames.transactions_total = get<std::uint64_t>(flames, "transactions_total", 0);
  for (const auto& t : list(flames, "transactions")) {
    if (f.flames.transactions.size() >= kMaxFlameTransactions) break;
    TransactionFlame flame;
    flame.trace_id = get<std::string>(t, "trace_id", "");
    flame.transaction_id = get<std::string>(t, "transaction_id", "");
    flame.samples = get<std::uint64_t>(t, "samples", 0);
    for (const auto& s : list(t, "stacks")) {
      if (flame.stacks.size() >= kMaxStacksPerTransaction) break;
      StackCount stack;
      stack.count = get<std::uint64_t>(s, "count", 0);
      for (const auto& fr : list(s, "frames")) {
        if (stack.frames.size() >= kMaxFrames) break;
        if (fr.is_string()) stack.frames.push_back(fr.get<std::string>());
      }
      flame.stacks.push_back(std::move(stack));
    }
    f.flames.transactions.push_back(std::move(flame));
  }
  return f;
}

}  // namespace tracecorr::conform

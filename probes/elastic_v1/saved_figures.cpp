// Reports saved before the engine's figures were generic (tracecorr-report/2 as
// written until issue 26) keep Elastic v1's figures in Elastic's words:
// "deferral" (a point per exported span), "record_stores" (the TLS-04 watch)
// and "flames" (stacks per transaction). `tracecorr report --html` still draws
// them, with the captions the package gives its figures today.
#include "saved_figures.hpp"

#include "elastic_v1/library.hpp"
#include "figures.hpp"
#include "tracecorr/report/saved_figures.hpp"

namespace tracecorr::elastic_v1 {
namespace {

using json = nlohmann::ordered_json;

ScatterFigure deferral_from(const json& saved) {
  ScatterFigure f = deferral_scatter();
  for (const auto& d : report::saved_list(saved, "deferral")) {
    if (f.points.size() >= kMaxScatterPoints) break;
    std::optional<double> in_force;
    if (d.is_object() && d.contains("delay_in_force_ms") && d["delay_in_force_ms"].is_number())
      in_force = d["delay_in_force_ms"].get<double>();
    f.points.push_back(deferral_point(report::saved_value<std::string>(d, "session", ""),
                                      report::saved_value<std::string>(d, "trace_id", ""),
                                      report::saved_value<std::string>(d, "span_id", ""),
                                      report::saved_value<bool>(d, "transaction", false), report::saved_value<double>(d, "ended_ms", 0),
                                      report::saved_value<double>(d, "export_delay_ms", 0), in_force));
  }
  return f;
}

RecordStoresFigure record_stores_from(const json& saved) {
  RecordStoresFigure f{record_stores_caption(), {}};
  for (const auto& s : report::saved_list(saved, "record_stores")) {
    if (f.stores.size() >= kMaxRecordStores) break;
    RecordStore r;
    r.session = report::saved_value<std::string>(s, "session", "");
    r.tid = report::saved_value<std::int64_t>(s, "tid", 0);
    r.record_address = report::saved_value<std::uint64_t>(s, "record_address", 0);
    r.index = report::saved_value<std::size_t>(s, "index", 0);
    r.at_ms = report::saved_value<double>(s, "at_ms", 0);
    r.valid = report::saved_value<unsigned>(s, "valid", 0);
    r.changed = report::saved_value<std::string>(s, "changed", "");
    r.pc_after_store = report::saved_value<std::uint64_t>(s, "pc_after_store", 0);
    r.violation = report::saved_value<bool>(s, "violation", false);
    f.stores.push_back(std::move(r));
  }
  return f;
}

StacksFigure flames_from(const json& saved) {
  const json& flames = report::saved_object(saved, "flames");
  StacksFigure f;
  f.caption = stacks_caption();
  f.source = report::saved_value<std::string>(flames, "source", "");
  f.samples = report::saved_value<std::uint64_t>(flames, "samples", 0);
  f.samples_without_context = report::saved_value<std::uint64_t>(flames, "samples_without_transaction", 0);
  f.contexts_total = report::saved_value<std::uint64_t>(flames, "transactions_total", 0);
  for (const auto& t : report::saved_list(flames, "transactions")) {
    if (f.contexts.size() >= kMaxStackContexts) break;
    ContextStacks context;
    context.trace_id = report::saved_value<std::string>(t, "trace_id", "");
    context.context_id = report::saved_value<std::string>(t, "transaction_id", "");
    context.samples = report::saved_value<std::uint64_t>(t, "samples", 0);
    for (const auto& s : report::saved_list(t, "stacks")) {
      if (context.stacks.size() >= kMaxStacksPerContext) break;
      context.stacks.push_back(report::saved_stack(s));
    }
    f.contexts.push_back(std::move(context));
  }
  return f;
}

class OlderFigures final : public report::SavedFiguresReader {
 public:
  std::optional<Figures> read(const json& saved) const override {
    if (!saved.is_object() || !(saved.contains("deferral") || saved.contains("record_stores") || saved.contains("flames")))
      return std::nullopt;
    Figures f;
    f.scatters.push_back(deferral_from(saved));
    f.record_stores = record_stores_from(saved);
    f.stacks = flames_from(saved);
    return f;
  }
};

}  // namespace

const report::SavedFiguresReader& saved_figures_reader() {
  static const OlderFigures reader;
  return reader;
}

}  // namespace tracecorr::elastic_v1

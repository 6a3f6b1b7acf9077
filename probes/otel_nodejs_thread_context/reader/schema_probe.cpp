// NJSR-01: the walk is selected by the process context's schema only. The
// stage's members under OTEP 4947's schema and under none publish this
// schema's struct and records all the same: every context reported for them
// was read by a walk nothing selected.
#include "reader.hpp"

namespace tracecorr::otel_nodejs_thread_context::reader {
namespace {

class SchemaProbe : public ReaderProbe {
 public:
  std::string name() const override { return "schema"; }
  std::vector<std::string> requirements() const override { return {"NJSR-01"}; }
  std::vector<Finding> judge(const ReaderEvidence& e) const override {
    std::size_t samples = 0, linked = 0;
    std::vector<Evidence> shown;
    for (const auto* m : unread_members(e))
      for (const auto* s : m->samples) {
        ++samples;
        if (!s->link) continue;
        ++linked;
        if (shown.size() < profiler::kExamplesKept)
          shown.push_back(profiler::sample_evidence(m->member.layout + " [" + m->member.name + "]", *s,
                                                    profiler::check_sample(*m, *s, e.tolerance_ns), "no context"));
      }
    if (linked > 0)
      return {violated("NJSR-01", std::to_string(linked) + " of " + std::to_string(samples) +
                                      " samples of processes not announcing nodejs_v1_dev carried a context", shown)};
    if (samples > 0)
      return {met("NJSR-01", samples, std::to_string(samples) + " samples of processes announcing another schema or "
                                                                "none, none with a context")};
    // Never sampled: the profiler left them alone, which the rule allows;
    // what it read meanwhile of the read members shows it was reading.
    std::size_t others = 0;
    for (const auto* m : read_members(e)) others += m->samples.size();
    return {met("NJSR-01", others, "the processes under another schema or none were never sampled (left alone) while " +
                                       std::to_string(others) + " samples of the other Node.js writers came in")};
  }
  std::size_t minimum_evidence(const std::string&) const override { return kMinSamples; }
};

}  // namespace

std::unique_ptr<ReaderProbe> make_schema_probe() { return std::make_unique<SchemaProbe>(); }

}  // namespace tracecorr::otel_nodejs_thread_context::reader

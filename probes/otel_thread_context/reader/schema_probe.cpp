// TCTXR-02..04, 15: where a reader looks and what it leaves alone: the
// variable in the executable and in every library, no records read under a
// schema it does not know.
#include <algorithm>

#include "reader.hpp"

namespace tracecorr::otel_thread_context::reader {
namespace {

using Kind = profiler::SampleCheck::Kind;

Finding judge_other_schema(const ReaderEvidence& e) {
  std::size_t samples = 0, linked = 0;
  std::vector<Evidence> shown;
  for (const auto& m : e.members) {
    if (!m.member.must_not_be_read) continue;
    for (const auto* s : m.samples) {
      ++samples;
      if (!s->link) continue;
      ++linked;
      if (shown.size() < profiler::kExamplesKept)
        shown.push_back(profiler::sample_evidence(m.member.name, *s, profiler::check_sample(m, *s, e.tolerance_ns),
                                                  "no link: " + m.member.layout));
    }
  }
  if (linked > 0) return violated("TCTXR-03", std::to_string(linked) + " samples of a process under another schema carried a link read from its records", shown);
  if (samples > 0)
    return met("TCTXR-03", samples, std::to_string(samples) + " samples of a process announcing another schema, none read as this layout");
  // Not sampled at all: the profiler left it alone, which the rule allows;
  // what it read meanwhile of the other writers shows it was reading.
  std::size_t others = 0;
  for (const auto* m : read_members(e)) others += m->samples.size();
  return met("TCTXR-03", others, "the process announcing another schema was never sampled (left alone) while " +
                                     std::to_string(others) + " samples of the other writers came in");
}

// The variable is found in the executable (exe-*, static-pie) and in
// libraries (the rest): each kind of member the stage has must be read.
Finding judge_lookup(const ReaderEvidence& e) {
  std::size_t exe_right = 0, lib_right = 0, exe_members = 0, lib_members = 0;
  for (const auto* m : read_members(e)) {
    const bool in_exe = m->member.layout.find("executable") != std::string::npos;
    (in_exe ? exe_members : lib_members) += 1;
    auto t = profiler::tally(*m, e.tolerance_ns);
    (in_exe ? exe_right : lib_right) += t.count(Kind::Right);
  }
  if (exe_members > 0 && exe_right == 0 && lib_right > 0)
    return violated("TCTXR-04", "no sample of a writer whose variable is in the executable carried its context (" +
                                    std::to_string(lib_right) + " of writers whose variable is in a library did)");
  if (lib_members > 0 && lib_right == 0 && exe_right > 0)
    return violated("TCTXR-04", "no sample of a writer whose variable is in a library carried its context (" +
                                    std::to_string(exe_right) + " of writers whose variable is in the executable did)");
  if (exe_right == 0 || lib_right == 0)
    return kit_error("TCTXR-04", "inconclusive: samples with context from executables " + std::to_string(exe_right) +
                                     ", from libraries " + std::to_string(lib_right) + ": both are needed");
  return met("TCTXR-04", exe_right + lib_right, "the variable was found in executables (" + std::to_string(exe_right) +
                                                    " samples) and in libraries (" + std::to_string(lib_right) + ")");
}

class SchemaProbe : public ReaderProbe {
 public:
  std::string name() const override { return "schema"; }
  std::vector<std::string> requirements() const override { return {"TCTXR-02", "TCTXR-03", "TCTXR-04", "TCTXR-15"}; }
  std::vector<Finding> judge(const ReaderEvidence& e) const override {
    return {not_applicable("TCTXR-02", "no stage member publishes its threadlocal keys after it started yet: nothing "
                                       "shows whether the reader looks again at the next update"),
            judge_other_schema(e), judge_lookup(e),
            not_applicable("TCTXR-15", "a documentation rule: a merge policy is read in the profiler's documentation, "
                                       "not in its samples (TCTXR-14 judges the samples)")};
  }
  std::size_t minimum_evidence(const std::string& requirement) const override {
    return requirement == "TCTXR-03" ? 5 : 2;
  }
};

}  // namespace

std::unique_ptr<ReaderProbe> make_schema_probe() { return std::make_unique<SchemaProbe>(); }

}  // namespace tracecorr::otel_thread_context::reader

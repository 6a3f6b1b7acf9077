// The Node.js thread context package's reader side, registered with the
// profiler mode (called before main from the generated builtin_protocols.cpp
// when the profiler mode is built).
#include "otel_nodejs_thread_context/registry.hpp"
#include "reader.hpp"

namespace tracecorr::otel_nodejs_thread_context {
namespace reader {
namespace {

using Kind = profiler::SampleCheck::Kind;

class NodeThreadContextReaders : public profiler::ReaderSuite {
 public:
  NodeThreadContextReaders() {
    probes_.push_back(make_link_probe());
    probes_.push_back(make_walk_probe());
    probes_.push_back(make_schema_probe());
    probes_.push_back(make_record_probe());
  }
  const ProtocolSpec& protocol() const override { return spec::kProtocol; }
  std::vector<profiler::StageMember> stage(const profiler::StageOptions& options) const override {
    return reader::stage(options);
  }
  const std::vector<std::unique_ptr<ReaderProbe>>& probes() const override { return probes_; }

 private:
  std::vector<std::unique_ptr<ReaderProbe>> probes_;
};

std::vector<const MemberEvidence*> members(const ReaderEvidence& evidence, bool read) {
  std::vector<const MemberEvidence*> out;
  for (const auto& m : evidence.members)
    if (m.member.protocol == spec::kProtocol.id && m.member.must_not_be_read != read && m.launch_error.empty())
      out.push_back(&m);
  return out;
}

}  // namespace

std::vector<const MemberEvidence*> read_members(const ReaderEvidence& evidence) { return members(evidence, true); }
std::vector<const MemberEvidence*> unread_members(const ReaderEvidence& evidence) { return members(evidence, false); }

std::vector<HazardSample> samples_in(const ReaderEvidence& evidence, const std::string& hazard) {
  std::vector<HazardSample> out;
  for (const auto* m : read_members(evidence))
    for (auto& s : profiler::tally(*m, evidence.tolerance_ns).checked)
      if (hazard.empty() || profiler::around_hazard(*m, *s.sample, evidence.tolerance_ns, hazard))
        out.push_back({m, std::move(s)});
  return out;
}

bool reports_wrong_ids(const profiler::CheckedSample& sample) {
  const auto kind = sample.check.kind;
  return kind == Kind::Poisoned || kind == Kind::Stale || kind == Kind::Torn || kind == Kind::Unknown;
}

}  // namespace reader

void register_reader() {
  static const reader::NodeThreadContextReaders suite;
  profiler::register_reader_suite(suite);
}

}  // namespace tracecorr::otel_nodejs_thread_context

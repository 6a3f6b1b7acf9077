// The thread context package's reader side, registered with the profiler
// mode (called before main from the generated builtin_protocols.cpp when the
// profiler mode is built).
#include "otel_thread_context/registry.hpp"
#include "reader.hpp"

namespace tracecorr::otel_thread_context {
namespace reader {
namespace {

class ThreadContextReaders : public profiler::ReaderSuite {
 public:
  ThreadContextReaders() {
    probes_.push_back(make_link_probe());
    probes_.push_back(make_attributes_probe());
    probes_.push_back(make_schema_probe());
  }
  const ProtocolSpec& protocol() const override { return spec::kProtocol; }
  std::vector<profiler::StageMember> stage(const profiler::StageOptions& options) const override {
    return reader::stage(options);
  }
  const std::vector<std::unique_ptr<ReaderProbe>>& probes() const override { return probes_; }
  std::vector<std::string> journal_events() const override { return {std::string(kKeysEvent)}; }

 private:
  std::vector<std::unique_ptr<ReaderProbe>> probes_;
};

}  // namespace

std::vector<const MemberEvidence*> read_members(const ReaderEvidence& evidence) {
  std::vector<const MemberEvidence*> out;
  for (const auto& m : evidence.members)
    if (m.member.protocol == "otel-thread-context" && !m.member.must_not_be_read && m.launch_error.empty())
      out.push_back(&m);
  return out;
}

std::size_t samples_in_hazard(const MemberEvidence& member, const profiler::MemberTally& tally, const std::string& hazard,
                              std::uint64_t tolerance_ns) {
  if (hazard.empty()) return tally.checked.size();
  std::size_t n = 0;
  for (const auto& s : tally.checked)
    if (profiler::around_hazard(member, *s.sample, tolerance_ns, hazard)) ++n;
  return n;
}

}  // namespace reader

void register_reader() {
  static const reader::ThreadContextReaders suite;
  profiler::register_reader_suite(suite);
}

}  // namespace tracecorr::otel_thread_context

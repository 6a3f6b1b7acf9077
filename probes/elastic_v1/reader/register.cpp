// Elastic v1's reader side, registered with the profiler mode (called before
// main from the generated builtin_protocols.cpp when the profiler mode is
// built). Its stage member is the reference APM agent, busy on one thread.
#include <filesystem>

#include "elastic_v1/registry.hpp"
#include "reader.hpp"

namespace tracecorr::elastic_v1 {
namespace reader {

std::vector<profiler::StageMember> stage(const profiler::StageOptions& o) {
  const std::string program = o.fixtures_dir + "/reference/tracecorr-fixture";
  if (!std::filesystem::exists(program)) return {};
  profiler::StageMember m;
  m.name = "elastic-v1/reference";
  m.protocol = kProtocolId;
  m.layout = "Elastic v1 record (TLS descriptor), glibc";
  m.argv = {program,           "--threads",       "1",           "--busy-percent",
            "100",             "--span-ms",       "50",          "--duration",
            "600",             "--state-journal", "--stage-hazards", "--hazard-ms",
            std::to_string(o.hazard_ms)};
  m.hazards = {"valid_0_poison", "trace_present_0_poison"};
  return {m};
}

std::vector<const profiler::MemberEvidence*> elastic_members(const profiler::ReaderEvidence& evidence) {
  std::vector<const profiler::MemberEvidence*> out;
  for (const auto& m : evidence.members)
    if (m.member.protocol == kProtocolId && m.launch_error.empty()) out.push_back(&m);
  return out;
}

namespace {

class ElasticReaders : public profiler::ReaderSuite {
 public:
  ElasticReaders() {
    probes_.push_back(make_msg_probe());
    probes_.push_back(make_tls_probe());
  }
  const ProtocolSpec& protocol() const override { return spec::kProtocol; }
  std::vector<profiler::StageMember> stage(const profiler::StageOptions& options) const override {
    return reader::stage(options);
  }
  const std::vector<std::unique_ptr<profiler::ReaderProbe>>& probes() const override { return probes_; }
  std::vector<std::string> journal_events() const override { return {"message"}; }

 private:
  std::vector<std::unique_ptr<profiler::ReaderProbe>> probes_;
};

}  // namespace
}  // namespace reader

void register_reader() {
  static const reader::ElasticReaders suite;
  profiler::register_reader_suite(suite);
}

}  // namespace tracecorr::elastic_v1

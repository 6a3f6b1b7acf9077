// The process context package's reader side, registered with the profiler
// mode (called before main from the generated builtin_protocols.cpp when the
// profiler mode is built).
#include "otel_process_context/registry.hpp"
#include "reader.hpp"

namespace tracecorr::otel_process_context {
namespace {

class ProcessContextReaders : public profiler::ReaderSuite {
 public:
  ProcessContextReaders() { probes_.push_back(reader::make_resource_probe()); }
  const ProtocolSpec& protocol() const override { return spec::kProtocol; }
  // Its writers are the thread-context writers' own process contexts (a
  // process-context-only writer sleeps, and a sampling profiler never
  // samples a sleeping process), and thread-context writers whose process
  // context is damaged (reader/stage.cpp).
  std::vector<profiler::StageMember> stage(const profiler::StageOptions& options) const override {
    return reader::stage(options, std::string(spec::kProtocol.id));
  }
  const std::vector<std::unique_ptr<profiler::ReaderProbe>>& probes() const override { return probes_; }

 private:
  std::vector<std::unique_ptr<profiler::ReaderProbe>> probes_;
};

}  // namespace

void register_reader() {
  static const ProcessContextReaders suite;
  profiler::register_reader_suite(suite);
}

}  // namespace tracecorr::otel_process_context

// The process context package tells the engine what it brings: its
// requirements, its conformance suite and its inspector. Called before main
// from the generated builtin_protocols.cpp (TRACECORR_PROTOCOLS in the top
// CMakeLists.txt).
#include "otel_process_context/inspect/inspect.hpp"
#include "otel_process_context/registry.hpp"
#include "probes.hpp"
#include "tracecorr/reader_defects.hpp"

namespace tracecorr::otel_process_context {
namespace {

// What `tracecorr agent --reader-defect` can make the host agent's reading of
// process contexts (the engine's, by these names) break: this package's rules.
const std::vector<ReaderDefect>& reader_defects() {
  static const std::vector<ReaderDefect> defects = {
      {"one-mapping-name", "PCTXR-01",
       "only [anon_shmem:OTEL_CTX] mappings are looked for: memfd and [anon:OTEL_CTX] publications are missed"},
      {"any-signature", "PCTXR-02",
       "ptrace reader only: the process context header's signature and version are not checked"},
      {"ignores-seqlock", "PCTXR-03, PCTXR-04",
       "the process context payload is taken while its timestamp is 0 and not re-checked after the copy"},
  };
  return defects;
}

}  // namespace

void register_protocol() {
  tracecorr::register_protocol(spec::kProtocol);
  conform::register_suite(suite());
  tracecorr::register_inspector(inspector());
  tracecorr::declare_reader_defects(reader_defects());
}

}  // namespace tracecorr::otel_process_context

// OTEP 4719's reader side (profiler mode): PCTXR-01..06, judged on the
// resources a profiler's samples carry.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "tracecorr/profiler/reader_suite.hpp"

namespace tracecorr::otel_process_context::reader {

std::unique_ptr<profiler::ReaderProbe> make_resource_probe();  // resource_probe.cpp: PCTXR-01..06

// stage.cpp: writers whose process context is damaged (PCTXR-02, 05), of `protocol`.
std::vector<profiler::StageMember> stage(const profiler::StageOptions& options, const std::string& protocol);

}  // namespace tracecorr::otel_process_context::reader

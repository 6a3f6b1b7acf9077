// OTEP 4719's reader side (profiler mode): PCTXR-01..06, judged on the
// resources a profiler's samples carry.
#pragma once

#include <memory>

#include "tracecorr/profiler/reader_suite.hpp"

namespace tracecorr::otel_process_context::reader {

std::unique_ptr<profiler::ReaderProbe> make_resource_probe();  // resource_probe.cpp: PCTXR-01..06

}  // namespace tracecorr::otel_process_context::reader

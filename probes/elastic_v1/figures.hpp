// Gathers what the HTML report draws (tracecorr/conform/figures.hpp) from the
// sessions' evidence, after the probes judged. Reads, never judges.
#pragma once

#include "tracecorr/conform/probe.hpp"
#include "tracecorr/conform/figures.hpp"

namespace tracecorr::elastic_v1 {

using namespace tracecorr::conform;

Figures collect_figures(const SessionSet& sessions);

}  // namespace tracecorr::elastic_v1

// Gathers what the HTML report draws (tracecorr/conform/figures.hpp) from the
// sessions' evidence, after the probes judged. Reads, never judges.
#pragma once

#include "tracecorr/conform/probe.hpp"
#include "tracecorr/conform/figures.hpp"

namespace tracecorr::elastic_v1 {

using namespace tracecorr::conform;

Figures collect_figures(const SessionSet& sessions);

// The figures' captions and points, shared with the reader of reports saved
// before the engine's figures were generic (saved_figures.cpp).
ScatterFigure deferral_scatter();  // its caption, no point
ScatterPoint deferral_point(const std::string& session, const std::string& trace_id, const std::string& span_id,
                            bool transaction, double ended_ms, double export_delay_ms, std::optional<double> in_force);
RecordStoresCaption record_stores_caption();

}  // namespace tracecorr::elastic_v1

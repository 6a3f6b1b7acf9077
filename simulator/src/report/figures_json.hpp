// The "figures" member of the JSON report, both ways (report_json.cpp writes
// it, report_read.cpp reads it back for tracecorr report --html).
#pragma once

#include <nlohmann/json.hpp>

#include "tracecorr/conform/figures.hpp"

namespace tracecorr::report {

// What the target named, as the JSON report keeps it: printable, newlines kept.
std::string json_text(std::string_view raw);

nlohmann::ordered_json figures_to_json(const conform::Figures& figures);
// Lenient: a member missing or of the wrong type is left at its default, and
// every list is cut at the same bounds the collector keeps.
conform::Figures figures_from_json(const nlohmann::ordered_json& document);

}  // namespace tracecorr::report

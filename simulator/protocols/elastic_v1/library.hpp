// Where Elastic v1 lives in a process: its library's name pattern and
// symbols (spec/elastic-v1.md §2), for the engine's discovery.
#pragma once

#include "tracecorr/discovery.hpp"

namespace tracecorr::elastic_v1 {

DiscoveryOptions discovery_options();

}  // namespace tracecorr::elastic_v1

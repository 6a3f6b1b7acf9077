// Where Elastic v1 lives in a process: its library's name pattern and
// symbols (spec/elastic-v1.md §2), for the engine's discovery.
#pragma once

#include "tracecorr/conform/figures.hpp"
#include "tracecorr/watch/record_watcher.hpp"
#include "tracecorr/discovery.hpp"

namespace tracecorr::elastic_v1 {

DiscoveryOptions discovery_options();

// Which trace an Elastic v1 record names: its trace id and transaction id,
// while valid with a trace (for the engine's watchers, the host agent's
// flame graphs).
const watch::ActiveTraceOf& active_trace();

// The flame graphs' words for what active_trace() names: a transaction.
conform::StacksCaption stacks_caption();

}  // namespace tracecorr::elastic_v1

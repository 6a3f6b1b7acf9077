// The reader of Elastic v1's figures as reports saved them before the engine's
// figures were generic (registered by register.cpp).
#pragma once

#include "tracecorr/report/saved_figures.hpp"

namespace tracecorr::elastic_v1 {

const report::SavedFiguresReader& saved_figures_reader();

}  // namespace tracecorr::elastic_v1

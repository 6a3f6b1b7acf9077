// Order statistics for judges and reports: one definition of a quantile and
// of the median, so a figure in a reason and the same figure in a picture agree.
#pragma once

#include <algorithm>
#include <cstddef>
#include <utility>
#include <vector>

namespace tracecorr {

// The q-quantile (0..1) by rank: the value at index floor(q * n), clamped to
// the last; 0 when there are no values.
inline double quantile(std::vector<double> values, double q) {
  if (values.empty()) return 0;
  auto k = std::min(values.size() - 1, static_cast<std::size_t>(q * static_cast<double>(values.size())));
  std::nth_element(values.begin(), values.begin() + static_cast<long>(k), values.end());
  return values[k];
}

// The upper median (index n / 2) for even counts; 0 when there are no values.
inline double median(std::vector<double> values) { return quantile(std::move(values), 0.5); }

}  // namespace tracecorr

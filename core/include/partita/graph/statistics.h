#pragma once

// Small statistics shared by the modules that summarize measurements (calibration fits, the
// runtime's trace summary): one definition of the median.

#include <algorithm>
#include <vector>

namespace partita {

// The median of `values` (the mean of the middle two for an even count); 0 for none.
inline double median(std::vector<double> values) {
  if (values.empty()) {
    return 0.0;
  }
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

} // namespace partita

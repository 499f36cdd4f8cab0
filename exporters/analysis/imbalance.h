#pragma once

#include <cmath>
#include <vector>

namespace fabricscope::exporters {

// Coefficient of variation of non-negative values: population standard deviation / mean
// (sqrt(sum (x_i - m)^2 / n) / m, m = sum x_i / n). 0 = all equal; sqrt(n - 1) = everything in
// one of n values. NaN for fewer than 2 values or a mean <= 0.
inline double CoefficientOfVariation(const std::vector<double>& v) {
  if (v.size() < 2) return NAN;
  double sum = 0;
  for (double x : v) sum += x;
  const double mean = sum / static_cast<double>(v.size());
  if (mean <= 0) return NAN;
  double ss = 0;
  for (double x : v) ss += (x - mean) * (x - mean);
  return std::sqrt(ss / static_cast<double>(v.size())) / mean;
}

}  // namespace fabricscope::exporters

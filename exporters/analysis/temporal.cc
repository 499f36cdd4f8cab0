#include "exporters/analysis/temporal.h"

#include <algorithm>
#include <cmath>

namespace fabricscope::exporters {

std::optional<PeriodEstimate> DetectPeriod(const std::vector<double>& x, double dt_seconds,
                                           const PeriodOptions& options) {
  const size_t n = x.size();
  if (n < 16 || !(dt_seconds > 0)) return std::nullopt;
  double sum = 0;
  size_t valid = 0;
  for (double v : x) {
    if (std::isfinite(v)) {
      sum += v;
      ++valid;
    }
  }
  if (valid < 16) return std::nullopt;
  const double mean = sum / static_cast<double>(valid);
  std::vector<double> d(n);
  double var = 0;
  for (size_t i = 0; i < n; ++i) {
    d[i] = std::isfinite(x[i]) ? x[i] - mean : 0.0;
    var += d[i] * d[i];
  }
  if (var <= 0) return std::nullopt;
  const size_t max_lag = n / 2;
  std::vector<double> r(max_lag + 2, 0.0);
  for (size_t k = 0; k <= max_lag + 1 && k < n; ++k) {
    double acc = 0;
    for (size_t i = 0; i + k < n; ++i) acc += d[i] * d[i + k];
    r[k] = acc / var;
  }
  size_t zero = 0;
  for (size_t k = 1; k <= max_lag; ++k) {
    if (r[k] < 0) {
      zero = k;
      break;
    }
  }
  if (zero == 0) return std::nullopt;
  size_t best = 0;
  for (size_t k = std::max(zero, options.min_lag); k <= max_lag; ++k) {
    if (best == 0 || r[k] > r[best]) best = k;
  }
  const double threshold =
      std::max(options.min_strength, options.sigma_factor / std::sqrt(static_cast<double>(n)));
  if (best == 0 || r[best] < threshold) return std::nullopt;
  // The shortest local maximum within 10% of the best: the fundamental, not a multiple.
  for (size_t k = std::max(zero, options.min_lag); k < best; ++k) {
    if (r[k] >= 0.9 * r[best] && r[k] >= r[k - 1] && r[k] >= r[k + 1]) {
      best = k;
      break;
    }
  }
  double offset = 0;
  const double a = r[best - 1], b = r[best], c = r[best + 1];
  const double denom = a - 2 * b + c;
  if (denom < 0) offset = std::clamp(0.5 * (a - c) / denom, -0.5, 0.5);
  return PeriodEstimate{(static_cast<double>(best) + offset) * dt_seconds, b};
}

namespace {
double Median(std::vector<double>& v) {
  const size_t mid = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(mid), v.end());
  double m = v[mid];
  if (v.size() % 2 == 0) {
    m = (m + *std::max_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(mid))) / 2;
  }
  return m;
}
}  // namespace

RobustZ RobustZScore(std::vector<double> baseline, double x) {
  RobustZ out;
  if (baseline.empty()) return out;
  out.median = Median(baseline);
  std::vector<double> dev(baseline.size());
  double mean_dev = 0;
  for (size_t i = 0; i < baseline.size(); ++i) {
    dev[i] = std::fabs(baseline[i] - out.median);
    mean_dev += dev[i];
  }
  mean_dev /= static_cast<double>(baseline.size());
  const double mad = Median(dev);
  if (mad > 0) {
    out.scale = mad;
    out.z = 0.6745 * (x - out.median) / mad;
  } else if (mean_dev > 0) {
    out.scale = 1.253314 * mean_dev;
    out.z = (x - out.median) / out.scale;
  } else {
    out.z = x == out.median ? 0 : (x > out.median ? kRobustZCap : -kRobustZCap);
  }
  out.z = std::clamp(out.z, -kRobustZCap, kRobustZCap);
  return out;
}

}  // namespace fabricscope::exporters

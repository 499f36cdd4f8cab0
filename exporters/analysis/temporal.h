#pragma once

#include <cstdint>
#include <optional>
#include <vector>

namespace fabricscope::exporters {

// A training step period found in a traffic series.
struct PeriodEstimate {
  double period_seconds = 0;
  double strength = 0;  // autocorrelation at the period, in (0, 1]
};

struct PeriodOptions {
  // The peak must reach max(min_strength, sigma_factor / sqrt(n)): for white noise the sample
  // autocorrelation at any lag > 0 is ~N(0, 1/n) (Bartlett 1946; Box, Jenkins & Reinsel, "Time
  // Series Analysis", 4th ed., §2.1.6), so 3/sqrt(n) rejects noise peaks at ~3 sigma and
  // min_strength rejects weak rhythms on long series.
  double min_strength = 0.3;
  double sigma_factor = 3.0;
  size_t min_lag = 2;  // samples; shorter periods are not resolved
};

// Detects the dominant period of a series sampled every dt_seconds (e.g. a node's bytes per
// 10 ms bucket) from its sample autocorrelation
//     r(k) = sum_{i=0}^{n-1-k} (x_i - m)(x_{i+k} - m) / sum_i (x_i - m)^2,   k = 0 .. n/2
// (the biased estimator of Box & Jenkins): the period is the lag of the highest r(k) after the
// first zero crossing of r, taking the shortest lag whose peak is within 10% of it (so that a
// multiple of the period does not win), refined by a parabola through r(k-1), r(k), r(k+1).
// NaN entries (no data) count as the mean. Returns nullopt when n < 16, the series is constant,
// r never crosses zero (a trend), or the peak is below the threshold (no period).
// Cost: O(n^2 / 2) multiply-adds.
std::optional<PeriodEstimate> DetectPeriod(const std::vector<double>& x, double dt_seconds,
                                           const PeriodOptions& options = {});

// Robust z-score of x against a baseline (Iglewicz & Hoaglin, "How to Detect and Handle
// Outliers", ASQC 1993, the "modified z-score"): z = 0.6745 (x - median) / MAD, MAD = median
// |b_i - median|. When MAD is 0 it uses 1.253314 x the mean absolute deviation instead (their
// recommendation, also in NIST/SEMATECH e-Handbook 1.3.5.17); when that is 0 too (a constant
// baseline) z is 0 for x == median and +-kRobustZCap otherwise. |z| > 3.5 is their outlier rule.
struct RobustZ {
  double median = 0;
  double scale = 0;  // MAD (or the mean-deviation substitute), in the units of x
  double z = 0;
};
inline constexpr double kRobustZCap = 1000;
RobustZ RobustZScore(std::vector<double> baseline, double x);

}  // namespace fabricscope::exporters

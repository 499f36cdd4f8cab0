#pragma once

#include <cmath>
#include <vector>

#include "exporters/exposition/metric_util.h"
#include "prometheus/metric_family.h"

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

// The one fabricscope_traffic_imbalance_ratio family. Two modules feed it, each with its own
// scope label value, and ClusterState::Collect merges them (MergeFamiliesByName):
//   {scope="rails", node, direction}: LinkAnalysis, across a node's RDMA ports, last window;
//   {scope="ranks", comm, direction}: GpuState, across a communicator's ranks, recent span.
inline prometheus::MetricFamily TrafficImbalanceFamily() {
  return MakeFamily(Metric::kTrafficImbalanceRatio);
}

}  // namespace fabricscope::exporters

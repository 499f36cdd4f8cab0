#pragma once

#include <cstdint>

#include "fabricscope/v1/telemetry.pb.h"

namespace fabricscope::common {

// Where the q-quantile (0 < q <= 1) of a cumulative v1::Histogram lies, read off its buckets as
// Prometheus's histogram_quantile does not (no interpolation): the upper bound of the first
// bucket whose running count reaches ceil(q x count). *above is set when that is the +Inf bucket
// (the quantile is then only known to exceed the last finite bound, which is returned). Returns
// false for an empty histogram or one without bounds. Shared by the agent's status line and the
// aggregator's /api/status.
inline bool HistogramQuantileBound(const v1::Histogram& h, double q, double* bound, bool* above) {
  if (h.count() == 0 || h.upper_bounds_size() == 0) return false;
  const double want = q * static_cast<double>(h.count());
  uint64_t target = static_cast<uint64_t>(want);
  if (static_cast<double>(target) < want) ++target;
  uint64_t cum = 0;
  for (int i = 0; i < h.bucket_counts_size(); ++i) {
    cum += h.bucket_counts(i);
    if (cum >= target) {
      *above = i >= h.upper_bounds_size();
      *bound = h.upper_bounds(*above ? h.upper_bounds_size() - 1 : i);
      return true;
    }
  }
  *above = true;
  *bound = h.upper_bounds(h.upper_bounds_size() - 1);
  return true;
}

}  // namespace fabricscope::common

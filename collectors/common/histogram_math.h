#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>

#include "fabricscope/v1/telemetry.pb.h"

namespace fabricscope::common {

// Arithmetic on the wire histogram (v1::Histogram: per-bucket counts, not cumulative, with
// upper_bounds one shorter than bucket_counts, the last bucket +Inf). Shared by the agent and
// the aggregator; rendering a histogram as a Prometheus family is exposition's
// (exporters/exposition/metric_util.h AddHistogram).

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

// Adds h into acc when both have the same bounds (an empty acc takes h's); returns false when
// the bounds differ (an agent of another version), leaving acc alone.
inline bool MergeHistogram(v1::Histogram* acc, const v1::Histogram& h) {
  if (acc->bucket_counts_size() == 0) {
    *acc = h;
    return true;
  }
  if (acc->upper_bounds_size() != h.upper_bounds_size() ||
      acc->bucket_counts_size() != h.bucket_counts_size()) {
    return false;
  }
  for (int i = 0; i < h.upper_bounds_size(); ++i) {
    if (acc->upper_bounds(i) != h.upper_bounds(i)) return false;
  }
  for (int i = 0; i < h.bucket_counts_size(); ++i) {
    acc->set_bucket_counts(i, acc->bucket_counts(i) + h.bucket_counts(i));
  }
  acc->set_count(acc->count() + h.count());
  acc->set_sum(acc->sum() + h.sum());
  return true;
}

// Samples above `bound` in a v1::Histogram (per-bucket counts, not cumulative): its count minus
// the buckets up to and including the one whose upper bound is `bound`. nullopt when no bucket
// has that bound.
inline std::optional<double> CountAbove(const v1::Histogram& h, double bound) {
  uint64_t upto = 0;
  for (int i = 0; i < h.bucket_counts_size() && i < h.upper_bounds_size(); ++i) {
    upto += h.bucket_counts(i);
    if (h.upper_bounds(i) == bound) {
      return static_cast<double>(h.count() - std::min(upto, h.count()));
    }
  }
  return std::nullopt;
}

}  // namespace fabricscope::common

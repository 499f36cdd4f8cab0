#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "fabricscope/v1/telemetry.pb.h"

namespace fabricscope::agent {

// Cumulative histogram with fixed upper bounds (Prometheus "le" semantics: a value equal to a
// bound falls in that bound's bucket). Not thread-safe: owned by one thread.
class Histogram {
 public:
  explicit Histogram(std::vector<double> upper_bounds)
      : bounds_(std::move(upper_bounds)), counts_(bounds_.size() + 1, 0) {}

  void Observe(double v) {
    const size_t i =
        static_cast<size_t>(std::lower_bound(bounds_.begin(), bounds_.end(), v) - bounds_.begin());
    ++counts_[i];
    sum_ += v;
    ++count_;
  }

  uint64_t count() const { return count_; }
  double sum() const { return sum_; }
  const std::vector<uint64_t>& bucket_counts() const { return counts_; }
  const std::vector<double>& upper_bounds() const { return bounds_; }

  void ToProto(v1::Histogram* out) const {
    out->mutable_upper_bounds()->Assign(bounds_.begin(), bounds_.end());
    out->mutable_bucket_counts()->Assign(counts_.begin(), counts_.end());
    out->set_sum(sum_);
    out->set_count(count_);
  }

 private:
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;
  double sum_ = 0;
  uint64_t count_ = 0;
};

// Bucket bounds used across the agent (seconds or ratios).
// These two are exported per port and direction: few buckets keep /metrics near 500 lines per
// node (tests/bench: ~1,000 lines per node with 18 and 11 buckets).
inline std::vector<double> MicroburstDurationBounds() {
  return {100e-6, 250e-6, 500e-6, 1e-3, 5e-3, 25e-3, 100e-3, 1.0};
}
inline std::vector<double> UtilizationBounds() { return {0.25, 0.5, 0.7, 0.8, 0.9, 0.95, 1.0}; }
// Bounds relative to the sampler's period, so that "p99 within 1.2x of nominal" can be read off
// the histogram at any period.
inline std::vector<double> SampleIntervalBounds(int64_t period_ns) {
  std::vector<double> out;
  for (double f : {0.5, 0.9, 0.98, 1.02, 1.05, 1.1, 1.2, 1.5, 2.0, 5.0, 10.0, 50.0}) {
    out.push_back(f * static_cast<double>(period_ns) / 1e9);
  }
  return out;
}

}  // namespace fabricscope::agent

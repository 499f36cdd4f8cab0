#pragma once

#include <cstdint>

namespace fabricscope::agent {

// Streaming estimate of one quantile with five markers and no stored samples: the P-squared
// algorithm (R. Jain and I. Chlamtac, "The P2 algorithm for dynamic calculation of quantiles
// and histograms without storing observations", CACM 28(10), 1985). Exact while fewer than five
// values were seen (the nearest-rank value of those).
class P2Quantile {
 public:
  explicit P2Quantile(double p) : p_(p) {}
  void Add(double x);
  double Value() const;
  uint64_t count() const { return count_; }

 private:
  double p_;
  uint64_t count_ = 0;
  double q_[5] = {};   // marker heights
  double n_[5] = {};   // marker positions (1-based)
  double np_[5] = {};  // desired positions
};

}  // namespace fabricscope::agent

#include "collectors/common/collective_vocabulary.h"

#include <algorithm>
#include <cmath>

namespace fabricscope::common {

const char* CollectiveCauseName(v1::CollectiveCause c) {
  switch (c) {
    case v1::COLLECTIVE_CAUSE_NORMAL:
      return "normal";
    case v1::COLLECTIVE_CAUSE_NETWORK_SATURATED:
      return "network_saturated";
    case v1::COLLECTIVE_CAUSE_NETWORK_LOSSY:
      return "network_lossy";
    case v1::COLLECTIVE_CAUSE_WAITING_ON_PEERS:
      return "waiting_on_peers";
    default:
      return "unknown";
  }
}

double BinomialUpperTail(size_t n, size_t k, double p) {
  if (k == 0) return 1;
  if (k > n) return 0;
  if (p <= 0) return 0;
  if (p >= 1) return 1;
  double tail = 0;
  for (size_t i = k; i <= n; ++i) {
    const double log_pmf =
        std::lgamma(static_cast<double>(n) + 1) - std::lgamma(static_cast<double>(i) + 1) -
        std::lgamma(static_cast<double>(n - i) + 1) + static_cast<double>(i) * std::log(p) +
        static_cast<double>(n - i) * std::log1p(-p);
    const double term = std::exp(log_pmf);
    tail += term;
    // Past the mean the terms only fall: stop once they no longer change the sum (a window of
    // millions of packets would otherwise cost millions of terms).
    if (static_cast<double>(i) > static_cast<double>(n) * p && term <= tail * 1e-17) break;
  }
  return std::min(1.0, tail);
}

}  // namespace fabricscope::common

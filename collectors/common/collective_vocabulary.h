#pragma once

// What the agent's per-collective analysis and the aggregator's cross-rank analysis both say
// about a collective: its cause label, its size class, and the binomial tail both tests use.

#include <cstddef>
#include <cstdint>

#include "fabricscope/v1/telemetry.pb.h"

namespace fabricscope::common {

// The cause label of an agent's CollectiveAnalysis: "normal", "network_saturated",
// "network_lossy", "waiting_on_peers", "unknown" (the aggregator adds "compute_straggler").
const char* CollectiveCauseName(v1::CollectiveCause cause);

// The size class of a collective's kind (communicator, function, size class), the same in the
// agent's slow-collective estimate and the aggregator's straggler history: floor(log2(bytes)),
// 0 for 0 or 1 byte.
inline int CollectiveSizeClass(uint64_t bytes) {
  int b = 0;
  while (bytes > 1) {
    bytes >>= 1;
    ++b;
  }
  return b;
}

// P(X >= k) for X ~ Binomial(n, p), summed in log space (lgamma) term by term: the agent's
// lossy-port recurrence test and the aggregator's persistent-straggler sign test. 1 for k = 0,
// 0 for k > n.
double BinomialUpperTail(size_t n, size_t k, double p);

}  // namespace fabricscope::common

#pragma once

// What the agent's per-collective analysis and the aggregator's cross-rank analysis both say
// about a collective: its cause, its size class, and the binomial tail both tests use.

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/types/span.h"
#include "fabricscope/v1/telemetry.pb.h"

namespace fabricscope::common {

// The causes of a slow collective: the proto enum v1::CollectiveCause is the only list; this
// table gives each its label (the `cause` label of the metrics and the JSON), who sets it and
// one line of meaning, from which CollectiveCauseName and README's cause table
// (CollectiveCauseMarkdown) are made.
struct CollectiveCauseInfo {
  v1::CollectiveCause cause;
  const char* name;     // snake_case label
  bool agent;           // the agent's per-collective analysis sets it
  bool aggregator;      // the aggregator's cross-rank matching sets it
  const char* meaning;  // one sentence
};
absl::Span<const CollectiveCauseInfo> CollectiveCauses();

// The label of a cause: "normal", "network_saturated", "network_lossy", "waiting_on_peers",
// "unknown", "compute_straggler"; "unknown" for a value outside the table.
const char* CollectiveCauseName(v1::CollectiveCause cause);

// README's cause table: a header and one row per cause of CollectiveCauses().
std::string CollectiveCauseMarkdown();

// "0123abcd": the `comm` label of a communicator hash (its top 32 bits in hex), in the metrics,
// the JSON and the heat maps of the aggregator.
std::string CommLabel(uint64_t comm_hash);

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

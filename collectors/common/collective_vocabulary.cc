#include "collectors/common/collective_vocabulary.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace fabricscope::common {

absl::Span<const CollectiveCauseInfo> CollectiveCauses() {
  // In the enum's order (proto/fabricscope/v1/gpu.proto), UNSPECIFIED left out.
  static constexpr CollectiveCauseInfo kCauses[] = {
      {v1::COLLECTIVE_CAUSE_NORMAL, "normal", true, true,
       "nothing held it back: no rule below applies"},
      {v1::COLLECTIVE_CAUSE_NETWORK_SATURATED, "network_saturated", true, true,
       "a port ran at line rate for much of it, another flow shared its link, or its path "
       "carried less than its line rate"},
      {v1::COLLECTIVE_CAUSE_NETWORK_LOSSY, "network_lossy", true, true,
       "its traffic was dropped, retransmitted or paused by PFC"},
      {v1::COLLECTIVE_CAUSE_WAITING_ON_PEERS, "waiting_on_peers", true, false,
       "its links idled while it ran: it waited for a late peer"},
      {v1::COLLECTIVE_CAUSE_UNKNOWN, "unknown", true, false, "no port sample covered it"},
      {v1::COLLECTIVE_CAUSE_COMPUTE_STRAGGLER, "compute_straggler", false, true,
       "one rank arrived late and the others waited for it with idle links"},
      {v1::COLLECTIVE_CAUSE_FABRIC_OVERSUBSCRIBED, "fabric_oversubscribed", false, true,
       "a leaf's uplinks to the spines carried its cross-leaf traffic at (near) their capacity "
       "while its ranks' host ports stayed below saturation"},
  };
  return kCauses;
}

const char* CollectiveCauseName(v1::CollectiveCause c) {
  for (const CollectiveCauseInfo& i : CollectiveCauses()) {
    if (i.cause == c) return i.name;
  }
  return "unknown";
}

std::string CollectiveCauseMarkdown() {
  std::string out = "| cause | set by | meaning |\n|---|---|---|\n";
  for (const CollectiveCauseInfo& i : CollectiveCauses()) {
    const char* by = i.agent && i.aggregator ? "agent (one rank), aggregator (all ranks)"
                     : i.agent               ? "agent (one rank)"
                                             : "aggregator (all ranks)";
    out += std::string("| `") + i.name + "` | " + by + " | " + i.meaning + " |\n";
  }
  return out;
}

std::string CommLabel(uint64_t comm_hash) {
  char label[9];
  std::snprintf(label, sizeof(label), "%08x", static_cast<unsigned>(comm_hash >> 32));
  return label;
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

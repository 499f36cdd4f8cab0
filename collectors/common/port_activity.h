#pragma once

#include <algorithm>
#include <cstdint>

#include "fabricscope/v1/telemetry.pb.h"

namespace fabricscope::common {

// The rules the agent's per-collective classification (agent/collective_analysis.cc) and the
// aggregator's cross-rank bottleneck (exporters/analysis/cross_rank.cc) share, one place for both,
// on one port's activity during a collective:
// - loss events: the larger of its loss + retransmit counter deltas and the packet capture's
//   loss events (both see the same losses, so never their sum);
inline uint64_t LossEvents(const v1::PortActivity& p) {
  return std::max(p.loss_events() + p.retransmits(), p.captured_loss_events());
}
// - saturated share of its duration: the largest of its saturated sample share, its microburst
//   overlap and its time waiting for credits (PortXmitWait), each a fraction of duration_s.
inline double SaturatedShare(const v1::PortActivity& p, double duration_s) {
  if (duration_s <= 0) return p.saturated_ratio();
  return std::max({p.saturated_ratio(), p.microburst_seconds() / duration_s,
                   p.transmit_wait_seconds() / duration_s});
}

}  // namespace fabricscope::common

// Helpers the cross-rank tests share.
#pragma once

#include <vector>

#include "exporters/analysis/cross_rank.h"

namespace fabricscope::exporters {

// fabricscope_collective_analyses_dropped_total of x, -1 when absent.
inline double DroppedAnalyses(const CrossRankAnalysis& x) {
  std::vector<prometheus::MetricFamily> f;
  x.Collect(&f);
  for (const auto& fam : f) {
    if (fam.name == "fabricscope_collective_analyses_dropped_total") {
      return fam.metric.at(0).counter.value;
    }
  }
  return -1;
}

}  // namespace fabricscope::exporters

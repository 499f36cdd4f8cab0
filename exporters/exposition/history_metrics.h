#pragma once

// The event history's own figures as metrics (fabricscope_history_*, declared in
// exporters/exposition/metric_catalog.inc): a collectable the aggregator adds to /metrics when
// its history is on.

#include <vector>

#include "prometheus/collectable.h"
#include "prometheus/metric_family.h"

namespace fabricscope::exporters {

class HistoryStore;

class HistoryMetrics : public prometheus::Collectable {
 public:
  // `history` must outlive this.
  explicit HistoryMetrics(const HistoryStore& history) : history_(history) {}
  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  const HistoryStore& history_;
};

}  // namespace fabricscope::exporters

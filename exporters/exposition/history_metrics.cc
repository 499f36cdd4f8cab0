#include "exporters/exposition/history_metrics.h"

#include "exporters/exposition/metric_util.h"
#include "exporters/history/history_store.h"

namespace fabricscope::exporters {

std::vector<prometheus::MetricFamily> HistoryMetrics::Collect() const {
  const HistoryStore::Stats s = history_.stats();
  FamilySet f;
  auto d = [](uint64_t v) { return static_cast<double>(v); };
  AddValue(f[Metric::kHistoryWrittenEventsTotal], {}, d(s.written));
  AddValue(f[Metric::kHistoryDroppedEventsTotal], {{"reason", "queue_full"}},
           d(s.dropped_queue_full));
  AddValue(f[Metric::kHistoryDroppedEventsTotal], {{"reason", "write_error"}},
           d(s.dropped_write_error));
  AddValue(f[Metric::kHistoryDroppedEventsTotal], {{"reason", "jsonl_write_error"}},
           d(s.jsonl_dropped));
  AddValue(f[Metric::kHistoryDroppedEventsTotal], {{"reason", "refused"}}, d(s.refused));
  AddValue(f[Metric::kHistoryDeletedEventsTotal], {{"reason", "retention"}},
           d(s.deleted_retention));
  AddValue(f[Metric::kHistoryDeletedEventsTotal], {{"reason", "size"}}, d(s.deleted_size));
  AddValue(f[Metric::kHistoryUsedBytes], {}, static_cast<double>(s.used_bytes));
  AddValue(f[Metric::kHistoryQueuedEvents], {}, d(s.queued));
  std::vector<prometheus::MetricFamily> out;
  f.DrainInto(&out);
  return out;
}

}  // namespace fabricscope::exporters

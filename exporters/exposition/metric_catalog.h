#pragma once

#include <cstddef>
#include <cstdint>

#include "prometheus/metric_family.h"
#include "prometheus/metric_type.h"

namespace fabricscope::exporters {

// Every metric family fabricscope exports, by id. The list, with each family's name, type and
// help, is exporters/exposition/metric_catalog.inc: the one place a metric is declared.
enum class Metric : uint16_t {
#define FABRICSCOPE_METRIC(id, name, type, help) id,
#include "exporters/exposition/metric_catalog.inc"
#undef FABRICSCOPE_METRIC
};

struct MetricInfo {
  Metric id;
  const char* name;
  prometheus::MetricType type;
  const char* help;
};

inline constexpr MetricInfo kMetricCatalog[] = {
#define FABRICSCOPE_METRIC(id, name, type, help) \
  {Metric::id, name, prometheus::MetricType::type, help},
#include "exporters/exposition/metric_catalog.inc"
#undef FABRICSCOPE_METRIC
};

inline constexpr size_t kMetricCount = sizeof(kMetricCatalog) / sizeof(kMetricCatalog[0]);

inline const MetricInfo& Info(Metric m) { return kMetricCatalog[static_cast<size_t>(m)]; }

// An empty family of `m`: its name, help and type from the catalog. Scrape time; allocates.
inline prometheus::MetricFamily MakeFamily(Metric m) {
  const MetricInfo& i = Info(m);
  prometheus::MetricFamily f;
  f.name = i.name;
  f.help = i.help;
  f.type = i.type;
  return f;
}

}  // namespace fabricscope::exporters

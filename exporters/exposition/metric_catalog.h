#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "collectors/common/metric_profile.h"
#include "prometheus/metric_family.h"
#include "prometheus/metric_type.h"

namespace fabricscope::exporters {

// Every metric family fabricscope exports, by id. The list, with each family's name, type, label
// names and help, is exporters/exposition/metric_catalog.inc: the one place a metric is declared.
enum class Metric : uint16_t {
#define FABRICSCOPE_METRIC(id, name, type, profile, unit, area, labels, help) id,
#include "exporters/exposition/metric_catalog.inc"
#undef FABRICSCOPE_METRIC
};

// The unit of a family's values (Prometheus naming: the name ends with it, before _total).
enum class MetricUnit : uint8_t { kNone, kSeconds, kBytes, kRatio, kBytesPerSecond, kPerSecond };

// Where a family's values come from: the module whose Collect builds it, each from its own
// snapshot taken under its own lock (exporters/README.md "Scaling": a scrape holds each lock only
// briefly).
enum class MetricArea : uint8_t {
  kPorts,      // ClusterState: node views (port windows, agent and capture stats), itself
  kPeers,      // sharded aggregators: ClusterState::CollectPeers: the forwarder and the peer inbox
  kLinks,      // LinkAnalysis
  kGpu,        // GpuState
  kCrossRank,  // CrossRankAnalysis: matching, skew, stragglers
  kDiagnosis,  // CrossRankAnalysis's per-communicator Diagnosis
  kImbalance,  // LinkAnalysis (rails) and GpuState (ranks), merged by name
  kRemoteWrite,  // RemoteWriter
  kHistory,      // HistoryMetrics (exporters/exposition/history_metrics.h)
  kFabric,       // FabricModel (exporters/analysis/fabric_model.h)
};

// "seconds", "bytes", "ratio", "bytes_per_second", "per_second"; "" for kNone.
const char* UnitName(MetricUnit u);

struct MetricInfo {
  Metric id;
  const char* name;
  prometheus::MetricType type;
  common::MetricProfile profile;  // the least profile that exports it
  MetricUnit unit;
  MetricArea area;
  const char* labels;  // the label names its samples may carry, one space apart; "" for none
  const char* help;
};

inline constexpr MetricInfo kMetricCatalog[] = {
#define FABRICSCOPE_METRIC(id, name, type, profile, unit, area, labels, help) \
  {Metric::id,                                                                \
   name,                                                                      \
   prometheus::MetricType::type,                                              \
   common::MetricProfile::k##profile,                                         \
   MetricUnit::k##unit,                                                       \
   MetricArea::k##area,                                                       \
   labels,                                                                    \
   help},
#include "exporters/exposition/metric_catalog.inc"
#undef FABRICSCOPE_METRIC
};

inline constexpr size_t kMetricCount = sizeof(kMetricCatalog) / sizeof(kMetricCatalog[0]);

inline const MetricInfo& Info(Metric m) { return kMetricCatalog[static_cast<size_t>(m)]; }

// Whether profile `p` exports family `m`.
inline bool Exported(Metric m, common::MetricProfile p) {
  return static_cast<uint8_t>(Info(m).profile) <= static_cast<uint8_t>(p);
}

// An empty family of `m`: its name, help and type from the catalog. Scrape time; allocates.
inline prometheus::MetricFamily MakeFamily(Metric m) {
  const MetricInfo& i = Info(m);
  prometheus::MetricFamily f;
  f.name = i.name;
  f.help = i.help;
  f.type = i.type;
  return f;
}

// What in `families` the catalog does not declare, one message per finding (empty when all is
// declared): "<family>: not in the metric catalog ..." for a family whose name is no catalog
// entry's, and "<family>: label \"<name>\" is not declared ..." once per (family, label name)
// where a sample carries a label name outside its entry's `labels` (the histogram's `le` and
// the summary's `quantile` are the serializer's, never a sample's). Families are matched by name
// only, so merged (MergeFamiliesByName) and unmerged snapshots check alike. Cost: one hash lookup
// per family and a scan of its few declared names per sample label; the name index is built on
// the first call. For Debug builds' /metrics check (HttpServer::RenderMetrics) and tests.
std::vector<std::string> UndeclaredLabels(const std::vector<prometheus::MetricFamily>& families);

}  // namespace fabricscope::exporters

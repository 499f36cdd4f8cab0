#pragma once

#include <cstdint>

namespace fabricscope::common {

// Which metric families /metrics (and any push of the same series) exports: --metrics on the
// agent (standalone) and the aggregator. Each family's profile is its entry in
// exporters/exposition/metric_catalog.inc; exporters/README.md "Series budget" gives the series
// counts.
//   kBasic (default): at most 40 series per port and 80 per node on the fixture trees: per-port
//     gauges and counters, node-level histograms in place of the per-port ones.
//   kFull: also the per-port histograms, the raw per-counter breakdowns (hw_counters, ethtool,
//     TcpExt) and the per-window rate gauges.
enum class MetricProfile : uint8_t { kBasic, kFull };

}  // namespace fabricscope::common

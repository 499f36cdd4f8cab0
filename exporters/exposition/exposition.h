#pragma once

#include <string>
#include <vector>

#include "prometheus/metric_family.h"

namespace fabricscope::exporters {

// Appends the shortest text that parses back to exactly `v` (Prometheus text format 0.0.4: a
// Go ParseFloat-compatible float), laid out as printf's %g would (fixed notation for decimal
// exponents -4..16, scientific otherwise): 12345678901234568, 0.30000000000000004, 0.0005,
// 1e-05, 1.8446744073709552e+19, and NaN, +Inf, -Inf. Wherever 16 significant digits hold a
// value exactly this is the text prometheus-cpp 1.0.1's TextSerializer writes (so `le` labels
// keep their spelling); past that it printed 16 digits, not enough for counters past 10^16
// (issue 14: 12345678901234568 bytes read 12345678901234570). node_exporter (client_golang's
// expfmt) also prints the shortest round-trip form.
void AppendSampleValue(double v, std::string* out);

// The families in the Prometheus text format 0.0.4 (prometheus.io "Exposition formats"), as
// prometheus-cpp's TextSerializer writes them but with AppendSampleValue for every value and
// `le` bound: per family `# HELP` (\ and newline escaped) and `# TYPE`, then one line per
// sample, label values with \, " and newline escaped; histograms as <name>_bucket{le} for each
// bucket given (the +Inf one included), <name>_sum and <name>_count; summaries as
// <name>{quantile}, <name>_sum and <name>_count; a non-zero timestamp_ms after the value.
// Output size: about 60-100 bytes per sample.
std::string TextExposition(const std::vector<prometheus::MetricFamily>& families);

}  // namespace fabricscope::exporters

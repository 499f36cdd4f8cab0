#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "collectors/common/json_text.h"
#include "exporters/analysis/heatmap_model.h"

namespace fabricscope::exporters {

struct Rgb {
  uint8_t r, g, b;
};
// Perceptually uniform color for t in [0, 1] (clamped): linear interpolation between the nine
// anchors of viridis (the matplotlib colormap by van der Walt & Smith, 2015, CC0), as
// published by viridisLite::viridis(9): #440154 #472D7B #3B528B #2C728E #21908C #27AD81
// #5DC863 #AADC32 #FDE725.
Rgb Viridis(double t);

// Escapes & < > " ' for XML text and attribute values.
std::string XmlEscape(const std::string& s);

// A self-contained SVG 1.1 document: title, row labels (every k-th when rows are thinner than a
// label), a time or named column axis with ticks, cells colored by Viridis((v - min) / (max -
// min)) with runs of equal color in a row merged into one rect, gray for no data, and a color
// legend with ticks and the value label. Cells are 1-20 px wide/tall so that the plot, its row
// labels and legend stay within ~1400 px across (the plot gets at least 1000 px; more columns
// make a wider picture: the caller merges them first, see ServeHeatmap) and 900 px down. A model
// without rows or columns is drawn as a 640 x 200 px "no data yet" frame with model.note, wrapped,
// as the reason. When `full_resolution_href` is not empty, a link to it is drawn under the title
// (for a plot whose columns were merged). Size: O(rows x runs) elements.
std::string RenderHeatmapSvg(const HeatmapModel& model,
                             absl::string_view full_resolution_href = {});

// The JSON appenders (collectors/common/json_text.h), used by every hand-written reply here.
using common::AppendJsonField;
using common::AppendJsonNumber;
using common::AppendJsonString;

// JSON for scripts and Grafana: {"title", "row_axis", "col_axis", "value_label", "scale_min",
// "scale_max", "note", "start_unix_seconds", "bucket_seconds" (time axis) or "col_labels",
// "rows": [label...], "values": [[v|null, ...] per row]} (values with 4 decimals).
std::string RenderHeatmapJson(const HeatmapModel& model);

}  // namespace fabricscope::exporters

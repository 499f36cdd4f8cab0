#pragma once

// The plain value a heat map is drawn from: the link, node, rank and collective analyses
// produce it; exporters/heatmap/heatmap_svg.h renders it as SVG or JSON.

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace fabricscope::exporters {

// What a heat map shows: rows x columns of values, row-major, NaN = no data. Columns are either
// time buckets (col_labels empty: column j covers [start_unix_ns + j x bucket_ns, + bucket_ns))
// or named (a matrix such as node x node).
struct HeatmapModel {
  std::string title;
  std::string row_axis;     // "link (node/device:port direction)"
  std::string col_axis;     // "time (UTC)"
  std::string value_label;  // "utilization of line rate"
  std::vector<std::string> rows;
  // The node of each row where a row is one of a node's (links x time), else empty.
  std::vector<std::string> row_nodes;
  // The port ("mlx5_2:1", device:port) of each row where row_nodes is set and the row is a link.
  std::vector<std::string> row_ports;
  std::vector<std::string> col_labels;  // empty for a time axis
  int64_t start_unix_ns = 0;
  int64_t bucket_ns = 0;
  size_t cols = 0;
  std::vector<float> values;  // rows.size() x cols
  double scale_min = 0;       // values are clamped to [scale_min, scale_max] for color
  double scale_max = 1;
  std::string note;  // e.g. "columns merged 4:1 (max)"

  float at(size_t r, size_t c) const { return values[r * cols + c]; }
};

// Merges adjacent time columns (the maximum of the non-NaN values, so that a one-bucket
// microburst stays visible; NaN when all are NaN) until rows x cols <= max_cells, and drops rows
// beyond max_cells / 1 column when rows alone exceed it. Notes what it did in model->note.
void DownsampleHeatmap(HeatmapModel* model, size_t max_cells);

}  // namespace fabricscope::exporters

#include "exporters/analysis/heatmap_model.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"

namespace fabricscope::exporters {

void DownsampleHeatmap(HeatmapModel* m, size_t max_cells) {
  if (max_cells == 0) max_cells = 1;
  if (m->rows.size() > max_cells) {
    absl::StrAppend(&m->note, m->note.empty() ? "" : "; ", "rows cut to ", max_cells, " of ",
                    m->rows.size());
    m->rows.resize(max_cells);
    if (m->row_nodes.size() > max_cells) m->row_nodes.resize(max_cells);
    if (m->row_ports.size() > max_cells) m->row_ports.resize(max_cells);
    m->values.resize(max_cells * m->cols);
  }
  const size_t rows = m->rows.size();
  if (rows == 0 || m->cols == 0 || rows * m->cols <= max_cells) return;
  const size_t target_cols = std::max<size_t>(1, max_cells / rows);
  const size_t factor = (m->cols + target_cols - 1) / target_cols;
  const size_t cols = (m->cols + factor - 1) / factor;
  std::vector<float> out(rows * cols, NAN);
  for (size_t r = 0; r < rows; ++r) {
    for (size_t c = 0; c < m->cols; ++c) {
      const float v = m->values[r * m->cols + c];
      float& o = out[r * cols + c / factor];
      if (!std::isnan(v) && (std::isnan(o) || v > o)) o = v;
    }
  }
  if (!m->col_labels.empty()) {
    std::vector<std::string> labels;
    for (size_t c = 0; c < m->cols; c += factor) labels.push_back(m->col_labels[c]);
    m->col_labels = std::move(labels);
  }
  m->values = std::move(out);
  m->cols = cols;
  m->bucket_ns *= static_cast<int64_t>(factor);
  absl::StrAppend(&m->note, m->note.empty() ? "" : "; ", "columns merged ", factor, ":1 (maximum)");
}

}  // namespace fabricscope::exporters

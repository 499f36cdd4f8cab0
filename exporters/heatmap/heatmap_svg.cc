#include "exporters/heatmap/heatmap_svg.h"

#include <algorithm>
#include <cmath>
#include <ctime>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"

namespace fabricscope::exporters {

Rgb Viridis(double t) {
  static constexpr Rgb kAnchors[] = {{0x44, 0x01, 0x54}, {0x47, 0x2D, 0x7B}, {0x3B, 0x52, 0x8B},
                                     {0x2C, 0x72, 0x8E}, {0x21, 0x90, 0x8C}, {0x27, 0xAD, 0x81},
                                     {0x5D, 0xC8, 0x63}, {0xAA, 0xDC, 0x32}, {0xFD, 0xE7, 0x25}};
  constexpr int kLast = 8;
  if (!(t > 0)) return kAnchors[0];
  if (t >= 1) return kAnchors[kLast];
  const double x = t * kLast;
  const int i = std::min(static_cast<int>(x), kLast - 1);
  const double f = x - i;
  auto mix = [f](uint8_t a, uint8_t b) {
    return static_cast<uint8_t>(std::lround(a + (static_cast<double>(b) - a) * f));
  };
  const Rgb& a = kAnchors[i];
  const Rgb& b = kAnchors[i + 1];
  return {mix(a.r, b.r), mix(a.g, b.g), mix(a.b, b.b)};
}

std::string XmlEscape(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (char ch : s) {
    switch (ch) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&apos;";
        break;
      default:
        // XML 1.0 forbids most control characters even escaped: replace them.
        out += (static_cast<unsigned char>(ch) < 0x20 && ch != '\t') ? '?' : ch;
    }
  }
  return out;
}

namespace {

constexpr char kMissing[] = "#d0d0d0";

std::string Hex(Rgb c) { return absl::StrFormat("#%02x%02x%02x", c.r, c.g, c.b); }

// 256-entry palette: cells are colored by palette index so runs can be merged.
int PaletteIndex(float v, double lo, double hi) {
  if (std::isnan(v)) return -1;
  const double t = hi > lo ? (static_cast<double>(v) - lo) / (hi - lo) : 0.0;
  return static_cast<int>(std::lround(std::clamp(t, 0.0, 1.0) * 255));
}

std::string TimeLabel(int64_t unix_ns, int64_t span_ns) {
  const time_t secs = static_cast<time_t>(unix_ns / 1'000'000'000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  const int64_t frac_ms = (unix_ns % 1'000'000'000) / 1'000'000;
  if (span_ns < 10'000'000'000) {
    return absl::StrFormat("%02d:%02d:%02d.%03d", tm.tm_hour, tm.tm_min, tm.tm_sec, frac_ms);
  }
  return absl::StrFormat("%02d:%02d:%02d", tm.tm_hour, tm.tm_min, tm.tm_sec);
}

std::string Num(double v) {
  if (std::fabs(v) >= 1e9) return absl::StrFormat("%.3gG", v / 1e9);
  if (std::fabs(v) >= 1e6) return absl::StrFormat("%.3gM", v / 1e6);
  if (std::fabs(v) >= 1e4) return absl::StrFormat("%.3gk", v / 1e3);
  return absl::StrFormat("%.3g", v);
}

// Appends the XML declaration, the <svg> start tag, the background, the title and the note.
void AppendSvgStart(std::string* out, const HeatmapModel& m, double left, double width,
                    double height) {
  absl::StrAppendFormat(out,
                        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
                        "<svg xmlns=\"http://www.w3.org/2000/svg\" "
                        "xmlns:xlink=\"http://www.w3.org/1999/xlink\" version=\"1.1\" "
                        "width=\"%.0f\" height=\"%.0f\" viewBox=\"0 0 %.0f %.0f\" "
                        "font-family=\"sans-serif\" font-size=\"11\">\n",
                        width, height, width, height);
  absl::StrAppend(out, "<title>", XmlEscape(m.title), "</title>\n",
                  "<rect width=\"100%\" height=\"100%\" fill=\"#ffffff\"/>\n");
  absl::StrAppendFormat(out,
                        "<text id=\"title\" x=\"%.1f\" y=\"22\" font-size=\"15\" "
                        "font-weight=\"bold\">%s</text>\n",
                        left, XmlEscape(m.title));
  if (!m.note.empty()) {
    absl::StrAppendFormat(out, "<text x=\"%.1f\" y=\"38\" fill=\"#555555\">%s</text>\n", left,
                          XmlEscape(m.note));
  }
}

// Appends the cells (rows x cols of cw x ch px from left, top): one rect per run of equal color.
void AppendCells(std::string* out, const HeatmapModel& m, size_t rows, size_t cols, double left,
                 double top, double cw, double ch) {
  absl::StrAppend(out, "<g id=\"cells\" shape-rendering=\"crispEdges\">\n");
  for (size_t r = 0; r < rows; ++r) {
    const double y = top + ch * static_cast<double>(r);
    size_t c = 0;
    while (c < cols) {
      const int idx = PaletteIndex(m.at(r, c), m.scale_min, m.scale_max);
      size_t end = c + 1;
      while (end < cols && PaletteIndex(m.at(r, end), m.scale_min, m.scale_max) == idx) ++end;
      const std::string fill = idx < 0 ? kMissing : Hex(Viridis(idx / 255.0));
      absl::StrAppendFormat(out,
                            "<rect x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"%.2f\" "
                            "fill=\"%s\"/>\n",
                            left + cw * static_cast<double>(c), y,
                            cw * static_cast<double>(end - c), ch, fill);
      c = end;
    }
  }
  absl::StrAppend(out, "</g>\n");
}

// Appends the legend: the color bar with its ticks, the no-data swatch and the value label.
void AppendLegend(std::string* out, const HeatmapModel& m, double legend_x, double top) {
  // Legend: a vertical color bar, high at the top.
  const double bar_h = 200;
  absl::StrAppend(out, "<g id=\"legend\">\n");
  for (int i = 0; i < 64; ++i) {
    const double t = 1.0 - (i + 0.5) / 64.0;
    absl::StrAppendFormat(out,
                          "<rect x=\"%.1f\" y=\"%.2f\" width=\"16\" height=\"%.3f\" "
                          "fill=\"%s\"/>\n",
                          legend_x, top + bar_h * i / 64.0, bar_h / 64.0 + 0.05, Hex(Viridis(t)));
  }
  for (int i = 0; i <= 4; ++i) {
    const double frac = i / 4.0;
    const double v = m.scale_max - (m.scale_max - m.scale_min) * frac;
    absl::StrAppendFormat(out, "<text x=\"%.1f\" y=\"%.1f\">%s</text>\n", legend_x + 20,
                          top + bar_h * frac + 4, Num(v));
  }
  absl::StrAppendFormat(out,
                        "<rect x=\"%.1f\" y=\"%.1f\" width=\"16\" height=\"10\" fill=\"%s\"/>"
                        "<text x=\"%.1f\" y=\"%.1f\">no data</text>\n",
                        legend_x, top + bar_h + 12, kMissing, legend_x + 20, top + bar_h + 21);
  absl::StrAppendFormat(out,
                        "<text id=\"legend-label\" x=\"%.1f\" y=\"%.1f\" "
                        "text-anchor=\"middle\" transform=\"rotate(-90 %.1f %.1f)\">%s</text>\n",
                        legend_x + 70, top + bar_h / 2, legend_x + 70, top + bar_h / 2,
                        XmlEscape(m.value_label));
  absl::StrAppend(out, "</g>\n");
}

// Splits text at spaces into lines of at most max_chars (a longer word stays whole).
std::vector<std::string> WrapWords(absl::string_view text, size_t max_chars) {
  std::vector<std::string> lines;
  std::string line;
  for (absl::string_view word : absl::StrSplit(text, ' ', absl::SkipEmpty())) {
    if (!line.empty() && line.size() + 1 + word.size() > max_chars) {
      lines.push_back(std::move(line));
      line.clear();
    }
    absl::StrAppend(&line, line.empty() ? "" : " ", word);
  }
  if (!line.empty()) lines.push_back(std::move(line));
  return lines;
}

// A heat map without rows or columns: the title, a gray frame saying "no data yet" and the
// model's note (why, and what would produce the data), with no axes and no legend.
std::string RenderEmptySvg(const HeatmapModel& m) {
  constexpr double kLeft = 20, kTop = 50, kW = 640, kH = 200;
  const std::vector<std::string> why = WrapWords(m.note, 96);
  const double width = std::max(kLeft + kW + 20, kLeft + 9.0 * static_cast<double>(m.title.size()));
  const double height = kTop + kH + 20;
  HeatmapModel head = m;
  head.note.clear();  // drawn inside the frame instead
  std::string out;
  AppendSvgStart(&out, head, kLeft, width, height);
  absl::StrAppendFormat(&out,
                        "<g id=\"empty\"><rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" "
                        "height=\"%.1f\" fill=\"%s\" stroke=\"#999999\"/>\n"
                        "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" font-size=\"15\">"
                        "no data yet</text>\n",
                        kLeft, kTop, kW, kH, "#f2f2f2", kLeft + kW / 2, kTop + 60);
  for (size_t i = 0; i < why.size(); ++i) {
    absl::StrAppendFormat(&out,
                          "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" "
                          "fill=\"#555555\">%s</text>\n",
                          kLeft + kW / 2, kTop + 90 + 16.0 * static_cast<double>(i),
                          XmlEscape(why[i]));
  }
  absl::StrAppend(&out, "</g>\n</svg>\n");
  return out;
}

// Appends the column axis under a plot of cols x cw px at (left, top + plot_h): a label per
// named column (rotated, every k-th when narrower than a label) or 7 time ticks, and the axis
// name centered under the plot (never left of the plot's left edge).
void AppendXAxis(std::string* out, const HeatmapModel& m, double left, double top, double cw,
                 double plot_h, double bottom) {
  const size_t cols = m.cols;
  const double plot_w = cw * static_cast<double>(cols);
  absl::StrAppend(out, "<g id=\"x-axis\" text-anchor=\"middle\">\n");
  if (!m.col_labels.empty()) {
    const size_t step = std::max<size_t>(1, static_cast<size_t>(std::ceil(12.0 / cw)));
    for (size_t c = 0; c < cols; c += step) {
      const double x = left + cw * (static_cast<double>(c) + 0.5);
      absl::StrAppendFormat(out,
                            "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\" "
                            "transform=\"rotate(-60 %.1f %.1f)\">%s</text>\n",
                            x, top + plot_h + 12, x, top + plot_h + 12, XmlEscape(m.col_labels[c]));
    }
  } else if (cols > 0) {
    const int ticks = 6;
    const int64_t span = m.bucket_ns * static_cast<int64_t>(cols);
    for (int i = 0; i <= ticks; ++i) {
      const double frac = static_cast<double>(i) / ticks;
      const double x = left + plot_w * frac;
      const int64_t t = m.start_unix_ns + static_cast<int64_t>(static_cast<double>(span) * frac);
      absl::StrAppendFormat(out,
                            "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" "
                            "stroke=\"#000000\"/><text x=\"%.1f\" y=\"%.1f\">%s</text>\n",
                            x, top + plot_h, x, top + plot_h + 5, x, top + plot_h + 17,
                            TimeLabel(t, span));
    }
  }
  const double half_label = 3.25 * static_cast<double>(m.col_axis.size());
  absl::StrAppendFormat(out, "<text id=\"x-label\" x=\"%.1f\" y=\"%.1f\">%s</text>\n",
                        std::max(left + plot_w / 2, left + half_label), top + plot_h + bottom - 12,
                        XmlEscape(m.col_axis));
  absl::StrAppend(out, "</g>\n");
}

}  // namespace

std::string RenderHeatmapSvg(const HeatmapModel& m, absl::string_view full_resolution_href) {
  const size_t rows = m.rows.size();
  const size_t cols = m.cols;
  if (rows == 0 || cols == 0) return RenderEmptySvg(m);
  size_t label_chars = 4;
  for (const std::string& r : m.rows) label_chars = std::max(label_chars, r.size());
  const double left = 20 + std::min<double>(360, 6.5 * static_cast<double>(label_chars));
  // The plot, its row labels and the legend (140 px) share a 1,400 px window; the plot gets at
  // least 1,000 px of it.
  const double cw =
      std::clamp(std::max(1000.0, 1400.0 - left - 140.0) / static_cast<double>(cols), 1.0, 20.0);
  const double ch = std::clamp(900.0 / static_cast<double>(rows), 1.0, 20.0);
  const double top = full_resolution_href.empty() ? 50 : 64;
  const double plot_w = cw * static_cast<double>(cols);
  const double plot_h = ch * static_cast<double>(rows);
  // The rotated row-axis name is centered on a span at least as long as the name (11 px sans:
  // ~6.5 px a character), so that a plot of two rows does not cut it.
  const double y_label_span = std::max(plot_h, 6.5 * static_cast<double>(m.row_axis.size()) + 10);
  const double bottom = m.col_labels.empty() ? 60 : 130;
  const double legend_x = left + plot_w + 30;
  // Wide enough for the title (15 px bold: ~9 px a character in a sans-serif face), the note
  // (11 px: ~6.5 px) and the x-axis name when they are longer than the plot and its legend.
  const double width =
      std::max({legend_x + 110, left + 9.0 * static_cast<double>(m.title.size()) + 20,
                left + 6.5 * static_cast<double>(m.note.size()) + 20,
                left + 6.5 * static_cast<double>(m.col_axis.size()) + 20});
  const double height = top + std::max({plot_h, 220.0, y_label_span}) + bottom;

  std::string out;
  out.reserve(512 + rows * 64 + rows * cols * 8);
  AppendSvgStart(&out, m, left, width, height);
  if (!full_resolution_href.empty()) {
    absl::StrAppendFormat(&out,
                          "<a id=\"full-resolution\" xlink:href=\"%s\"><text x=\"%.1f\" "
                          "y=\"54\" fill=\"#1a5fb4\" text-decoration=\"underline\">"
                          "full resolution (wide: scroll sideways)</text></a>\n",
                          XmlEscape(std::string(full_resolution_href)), left);
  }
  AppendCells(&out, m, rows, cols, left, top, cw, ch);
  // Row labels: every k-th so that labels are >= 11 px apart.
  const size_t row_step = std::max<size_t>(1, static_cast<size_t>(std::ceil(11.0 / ch)));
  absl::StrAppend(&out, "<g id=\"row-labels\" text-anchor=\"end\">\n");
  for (size_t r = 0; r < rows; r += row_step) {
    absl::StrAppendFormat(&out, "<text x=\"%.1f\" y=\"%.1f\">%s</text>\n", left - 4,
                          top + ch * (static_cast<double>(r) + 0.5) + 4, XmlEscape(m.rows[r]));
  }
  absl::StrAppend(&out, "</g>\n");
  absl::StrAppendFormat(&out,
                        "<g id=\"axes\" stroke=\"#000000\"><line x1=\"%.1f\" y1=\"%.1f\" "
                        "x2=\"%.1f\" y2=\"%.1f\"/><line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" "
                        "y2=\"%.1f\"/></g>\n",
                        left, top, left, top + plot_h, left, top + plot_h, left + plot_w,
                        top + plot_h);
  AppendXAxis(&out, m, left, top, cw, plot_h, bottom);
  absl::StrAppendFormat(&out,
                        "<text id=\"y-label\" x=\"12\" y=\"%.1f\" text-anchor=\"middle\" "
                        "transform=\"rotate(-90 12 %.1f)\">%s</text>\n",
                        top + y_label_span / 2, top + y_label_span / 2, XmlEscape(m.row_axis));
  AppendLegend(&out, m, legend_x, top);
  absl::StrAppend(&out, "</svg>\n");
  return out;
}

std::string RenderHeatmapJson(const HeatmapModel& m) {
  std::string out;
  out.reserve(256 + m.rows.size() * 48 + m.values.size() * 7);
  out += "{\"title\":";
  AppendJsonString(&out, m.title);
  out += ",\"row_axis\":";
  AppendJsonString(&out, m.row_axis);
  out += ",\"col_axis\":";
  AppendJsonString(&out, m.col_axis);
  out += ",\"value_label\":";
  AppendJsonString(&out, m.value_label);
  out += ",\"note\":";
  AppendJsonString(&out, m.note);
  absl::StrAppendFormat(&out, ",\"scale_min\":%.6g,\"scale_max\":%.6g", m.scale_min, m.scale_max);
  if (m.col_labels.empty()) {
    absl::StrAppendFormat(&out, ",\"start_unix_seconds\":%.6f,\"bucket_seconds\":%.9g",
                          static_cast<double>(m.start_unix_ns) / 1e9,
                          static_cast<double>(m.bucket_ns) / 1e9);
  } else {
    out += ",\"col_labels\":[";
    for (size_t c = 0; c < m.col_labels.size(); ++c) {
      if (c) out.push_back(',');
      AppendJsonString(&out, m.col_labels[c]);
    }
    out += "]";
  }
  out += ",\"rows\":[";
  for (size_t r = 0; r < m.rows.size(); ++r) {
    if (r) out.push_back(',');
    AppendJsonString(&out, m.rows[r]);
  }
  out += "],\"values\":[";
  for (size_t r = 0; r < m.rows.size(); ++r) {
    if (r) out.push_back(',');
    out.push_back('[');
    for (size_t c = 0; c < m.cols; ++c) {
      if (c) out.push_back(',');
      const float v = m.at(r, c);
      if (std::isnan(v)) {
        out += "null";
      } else {
        absl::StrAppendFormat(&out, "%.4g", v);
      }
    }
    out.push_back(']');
  }
  out += "]}";
  return out;
}

}  // namespace fabricscope::exporters

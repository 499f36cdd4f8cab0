#include "exporters/heatmap/heatmap_svg.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>
#include <vector>

namespace fabricscope::exporters {
namespace {

// A tiny XML checker: elements nest and close in order, attribute values are quoted, and text
// holds no raw '<' or bare '&'. Returns the element names in document order (empty on error).
struct Element {
  std::string name;
  std::map<std::string, std::string> attrs;
};
bool ParseXml(const std::string& doc, std::vector<Element>* out, std::string* error) {
  std::vector<std::string> stack;
  size_t i = 0;
  if (doc.rfind("<?xml", 0) == 0) i = doc.find("?>") + 2;
  while (i < doc.size()) {
    if (doc[i] != '<') {
      if (doc[i] == '&') {
        const size_t semi = doc.find(';', i);
        const std::string ent = doc.substr(i, semi - i + 1);
        if (ent != "&amp;" && ent != "&lt;" && ent != "&gt;" && ent != "&quot;" &&
            ent != "&apos;") {
          *error = "bad entity at " + std::to_string(i);
          return false;
        }
      }
      ++i;
      continue;
    }
    const size_t end = doc.find('>', i);
    if (end == std::string::npos) return (*error = "unclosed tag", false);
    std::string tag = doc.substr(i + 1, end - i - 1);
    i = end + 1;
    if (tag[0] == '/') {
      if (stack.empty() || stack.back() != tag.substr(1)) {
        *error = "mismatched </" + tag.substr(1) + ">";
        return false;
      }
      stack.pop_back();
      continue;
    }
    const bool self_closing = tag.back() == '/';
    if (self_closing) tag.pop_back();
    Element e;
    size_t p = tag.find_first_of(" \n");
    e.name = tag.substr(0, p);
    while (p != std::string::npos && p < tag.size()) {
      p = tag.find_first_not_of(" \n", p);
      if (p == std::string::npos) break;
      const size_t eq = tag.find('=', p);
      if (eq == std::string::npos || tag[eq + 1] != '"') return (*error = "unquoted attr", false);
      const size_t close = tag.find('"', eq + 2);
      if (close == std::string::npos) return (*error = "unterminated attr", false);
      const std::string value = tag.substr(eq + 2, close - eq - 2);
      if (value.find('<') != std::string::npos) return (*error = "< in attr", false);
      e.attrs[tag.substr(p, eq - p)] = value;
      p = close + 1;
    }
    out->push_back(e);
    if (!self_closing) stack.push_back(e.name);
  }
  if (!stack.empty()) return (*error = "unclosed <" + stack.back() + ">", false);
  return true;
}

HeatmapModel TwoLinks() {
  HeatmapModel m;
  m.title = "Links <test> & \"quotes\"";
  m.row_axis = "link";
  m.col_axis = "time (UTC)";
  m.value_label = "utilization of line rate";
  m.rows = {"n1/mlx5_0:1 tx", "n2/eth<0>:1 rx"};
  m.cols = 4;
  m.start_unix_ns = 1'700'000'000'000'000'000;
  m.bucket_ns = 1'000'000;
  m.values = {0.0f, 1.0f, 0.0f, NAN, 0.5f, 0.5f, 0.5f, 0.5f};
  return m;
}

TEST(Viridis, AnchorsAndInterpolation) {
  const Rgb lo = Viridis(0), hi = Viridis(1), mid = Viridis(0.5);
  EXPECT_EQ((std::vector<int>{lo.r, lo.g, lo.b}), (std::vector<int>{0x44, 0x01, 0x54}));
  EXPECT_EQ((std::vector<int>{hi.r, hi.g, hi.b}), (std::vector<int>{0xFD, 0xE7, 0x25}));
  EXPECT_EQ((std::vector<int>{mid.r, mid.g, mid.b}), (std::vector<int>{0x21, 0x90, 0x8C}));
  const Rgb q = Viridis(1.0 / 16);  // halfway between the first two anchors
  EXPECT_EQ(q.r, 0x46);
  EXPECT_EQ(q.g, 0x17);
  EXPECT_EQ(q.b, 0x68);
  // Perceptual order: luminance grows monotonically.
  double prev = -1;
  for (int i = 0; i <= 32; ++i) {
    const Rgb c = Viridis(i / 32.0);
    const double y = 0.2126 * c.r + 0.7152 * c.g + 0.0722 * c.b;
    EXPECT_GT(y, prev) << i;
    prev = y;
  }
  EXPECT_EQ(Viridis(-3).r, 0x44);
  EXPECT_EQ(Viridis(NAN).r, 0x44);
}

TEST(HeatmapSvg, IsWellFormedWithTitleAxesLegendAndEscapedNames) {
  const std::string svg = RenderHeatmapSvg(TwoLinks());
  std::vector<Element> elements;
  std::string error;
  ASSERT_TRUE(ParseXml(svg, &elements, &error)) << error << "\n" << svg;
  ASSERT_FALSE(elements.empty());
  EXPECT_EQ(elements[0].name, "svg");
  EXPECT_NE(svg.find("<title>Links &lt;test&gt; &amp; &quot;quotes&quot;</title>"),
            std::string::npos);
  EXPECT_NE(svg.find(">n2/eth&lt;0&gt;:1 rx</text>"), std::string::npos);
  std::map<std::string, int> ids;
  for (const Element& e : elements) {
    if (e.attrs.count("id")) ++ids[e.attrs.at("id")];
  }
  for (const char* id :
       {"title", "cells", "row-labels", "x-axis", "x-label", "y-label", "legend", "legend-label"}) {
    EXPECT_EQ(ids[id], 1) << id;
  }
  EXPECT_NE(svg.find("utilization of line rate"), std::string::npos);
}

// A title or note longer than the plot and legend widens the picture instead of running off
// its right edge: the canvas reaches past the title's start by its length at ~9 px a character.
TEST(HeatmapSvg, ALongTitleOrNoteWidensTheCanvas) {
  auto canvas_width = [](const std::string& svg) {
    std::vector<Element> elements;
    std::string error;
    EXPECT_TRUE(ParseXml(svg, &elements, &error)) << error;
    double width = 0, title_x = 0;
    for (const Element& e : elements) {
      if (e.name == "svg") width = std::stod(e.attrs.at("width"));
      if (e.attrs.count("id") && e.attrs.at("id") == "title") title_x = std::stod(e.attrs.at("x"));
    }
    return std::make_pair(width, title_x);
  };
  HeatmapModel m = TwoLinks();
  const auto [narrow, x0] = canvas_width(RenderHeatmapSvg(m));
  m.title = std::string(200, 'T');
  const auto [wide, x1] = canvas_width(RenderHeatmapSvg(m));
  EXPECT_LT(narrow, x0 + 200 * 9.0);
  EXPECT_GE(wide, x1 + 200 * 9.0);
  m.title = "short";
  m.note = std::string(300, 'n');
  const auto [noted, x2] = canvas_width(RenderHeatmapSvg(m));
  EXPECT_GE(noted, x2 + 300 * 6.5);
}

TEST(HeatmapSvg, CellsCarryTheViridisColorOfTheirValueAndRunsMerge) {
  const std::string svg = RenderHeatmapSvg(TwoLinks());
  std::vector<Element> elements;
  std::string error;
  ASSERT_TRUE(ParseXml(svg, &elements, &error)) << error;
  // The cell rects come between <g id="cells"> and the next <g>.
  std::vector<Element> cells;
  bool in = false;
  for (const Element& e : elements) {
    if (e.name == "g") {
      in = e.attrs.count("id") && e.attrs.at("id") == "cells";
      continue;
    }
    if (in && e.name == "rect") cells.push_back(e);
  }
  // Row 0: 0, 1, 0, no data -> 4 rects; row 1: four equal cells -> one rect.
  ASSERT_EQ(cells.size(), 5u);
  EXPECT_EQ(cells[0].attrs["fill"], "#440154");
  EXPECT_EQ(cells[1].attrs["fill"], "#fde725");
  EXPECT_EQ(cells[2].attrs["fill"], "#440154");
  EXPECT_EQ(cells[3].attrs["fill"], "#d0d0d0");
  const Rgb half = Viridis(128 / 255.0);
  char hex[8];
  snprintf(hex, sizeof(hex), "#%02x%02x%02x", half.r, half.g, half.b);
  EXPECT_EQ(cells[4].attrs["fill"], hex);
  // The merged rect spans the four columns.
  EXPECT_DOUBLE_EQ(std::stod(cells[4].attrs["width"]), 4 * std::stod(cells[0].attrs["width"]));
  EXPECT_GT(std::stod(cells[4].attrs["y"]), std::stod(cells[0].attrs["y"]));
}

TEST(HeatmapDownsample, MergesColumnsByMaximumWithinTheCellCap) {
  HeatmapModel m;
  m.rows = {"a", "b"};
  m.cols = 10;
  m.bucket_ns = 1'000'000;
  m.values.assign(20, 0.1f);
  m.values[7] = 0.9f;  // row a, column 7
  for (int c = 0; c < 10; ++c) m.values[10 + c] = NAN;
  m.values[10 + 9] = 0.3f;
  DownsampleHeatmap(&m, 8);  // 2 rows x at most 4 columns -> factor 3 -> 4 columns
  EXPECT_EQ(m.cols, 4u);
  EXPECT_EQ(m.bucket_ns, 3'000'000);
  ASSERT_EQ(m.values.size(), 8u);
  EXPECT_FLOAT_EQ(m.at(0, 2), 0.9f);  // columns 6-8 hold the 0.9
  EXPECT_FLOAT_EQ(m.at(0, 0), 0.1f);
  EXPECT_TRUE(std::isnan(m.at(1, 0)));
  EXPECT_FLOAT_EQ(m.at(1, 3), 0.3f);
  EXPECT_NE(m.note.find("3:1"), std::string::npos);
  HeatmapModel small = TwoLinks();
  DownsampleHeatmap(&small, 100);
  EXPECT_EQ(small.cols, 4u);
  EXPECT_TRUE(small.note.empty());
}

TEST(HeatmapJson, ValuesRowsAndNulls) {
  const std::string json = RenderHeatmapJson(TwoLinks());
  EXPECT_NE(json.find("\"rows\":[\"n1/mlx5_0:1 tx\",\"n2/eth<0>:1 rx\"]"), std::string::npos);
  EXPECT_NE(json.find("\"values\":[[0,1,0,null],[0.5,0.5,0.5,0.5]]"), std::string::npos);
  EXPECT_NE(json.find("\"bucket_seconds\":0.001"), std::string::npos);
  EXPECT_NE(json.find("\"title\":\"Links <test> & \\\"quotes\\\"\""), std::string::npos);
}

TEST(XmlEscape, EscapesMarkupAndReplacesControlCharacters) {
  EXPECT_EQ(XmlEscape("a<b>&\"c'\x01"), "a&lt;b&gt;&amp;&quot;c&apos;?");
}

}  // namespace
}  // namespace fabricscope::exporters

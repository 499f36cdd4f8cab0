#include "exporters/heatmap/heatmap_svg.h"

#include <gtest/gtest.h>
#include <httplib.h>

#include <cmath>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "exporters/exposition/link_http.h"

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

// The svg element's width and height, and the elements, of a well-formed document.
struct Svg {
  double width = 0, height = 0;
  std::vector<Element> elements;
  const Element* ById(const std::string& id) const {
    for (const Element& e : elements) {
      if (e.attrs.count("id") && e.attrs.at("id") == id) return &e;
    }
    return nullptr;
  }
};
Svg ParseSvg(const std::string& doc) {
  Svg s;
  std::string error;
  EXPECT_TRUE(ParseXml(doc, &s.elements, &error)) << error << "\n" << doc;
  for (const Element& e : s.elements) {
    if (e.name == "svg") {
      s.width = std::stod(e.attrs.at("width"));
      s.height = std::stod(e.attrs.at("height"));
      break;
    }
  }
  return s;
}

// A heat map with nothing to draw (no captured flows, no complete collective) is a small frame
// that says "no data yet" and why, not an empty plot whose axis name runs into its legend
// (a first user's report, issue 35).
TEST(HeatmapSvg, AnEmptyMapIsANoDataFrameThatSaysWhy) {
  HeatmapModel m;
  m.title = "Node x node bytes (captured flows), last 10 s";
  m.row_axis = "source";
  m.col_axis = "destination";
  m.note =
      "no captured flows in the last 10 s: this map is drawn from packet capture, which is "
      "off by default (agent --capture=IFACE, needs CAP_NET_RAW; agent/README.md)";
  const std::string doc = RenderHeatmapSvg(m);
  const Svg svg = ParseSvg(doc);
  EXPECT_NE(svg.ById("empty"), nullptr);
  EXPECT_EQ(svg.ById("legend"), nullptr);
  EXPECT_EQ(svg.ById("x-label"), nullptr);
  EXPECT_NE(doc.find(">no data yet</text>"), std::string::npos);
  // The reason, wrapped at spaces into lines of at most 96 characters, all of it.
  std::string words;
  size_t lines = 0;
  for (size_t at = doc.find("fill=\"#555555\">"); at != std::string::npos;
       at = doc.find("fill=\"#555555\">", at + 1)) {
    const size_t from = at + 15;
    const std::string line = doc.substr(from, doc.find("</text>", from) - from);
    EXPECT_LE(line.size(), 96u) << line;
    words += (words.empty() ? "" : " ") + line;
    ++lines;
  }
  EXPECT_EQ(words, m.note);
  EXPECT_EQ(lines, 2u);
  EXPECT_LE(svg.width, 700);
  // Rows without columns, or columns without rows, are empty too.
  m.rows = {"n1"};
  EXPECT_NE(ParseSvg(RenderHeatmapSvg(m)).ById("empty"), nullptr);
}

// The rotated row-axis name fits the canvas even when the plot is two rows high (it was cut to
// "link (node/device:port directi" on a one-link machine, issue 35): its span at ~6.5 px a
// character, centered on its y, lies within [0, height].
TEST(HeatmapSvg, TheRowAxisNameFitsAShortPlot) {
  HeatmapModel m = TwoLinks();
  m.row_axis = std::string("link (node/device:port direction)") + std::string(40, 'x');
  const Svg svg = ParseSvg(RenderHeatmapSvg(m));
  const Element* y = svg.ById("y-label");
  ASSERT_NE(y, nullptr);
  const double center = std::stod(y->attrs.at("y"));
  const double half = 6.5 * static_cast<double>(m.row_axis.size()) / 2;
  EXPECT_GE(center - half, 0);
  EXPECT_LE(center + half, svg.height);
  // The x-axis name starts right of the plot's left edge even under one named column.
  m.col_labels = {"a"};
  m.cols = 1;
  m.values = {0.5f, 0.5f};
  m.col_axis = std::string(60, 'c');
  const Svg named = ParseSvg(RenderHeatmapSvg(m));
  const double x = std::stod(named.ById("x-label")->attrs.at("x"));
  double left = 0;
  for (const Element& e : named.elements) {
    if (e.name == "line" && left == 0) left = std::stod(e.attrs.at("x1"));
  }
  EXPECT_GE(x - 3.25 * 60, left - 0.5);
}

// The link to the full-resolution plot is drawn when given, escaped, and only then.
TEST(HeatmapSvg, DrawsTheFullResolutionLinkWhenGiven) {
  const std::string doc = RenderHeatmapSvg(TwoLinks(), "/heatmap/links?full=1&seconds=10");
  const Svg svg = ParseSvg(doc);
  const Element* a = svg.ById("full-resolution");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->attrs.at("xlink:href"), "/heatmap/links?full=1&amp;seconds=10");
  EXPECT_EQ(ParseSvg(RenderHeatmapSvg(TwoLinks())).ById("full-resolution"), nullptr);
}

// Serves a link heat map of 2 rows x 10,000 time columns (10 s at 1 ms) with the query params.
std::pair<int, std::string> Serve(const std::multimap<std::string, std::string>& params) {
  HeatmapModel m = TwoLinks();
  m.cols = 10'000;
  m.values.assign(2 * m.cols, 0.2f);
  m.values[7'777] = 0.9f;  // one 1 ms burst on row 0
  httplib::Request req;
  req.path = "/heatmap/links";
  for (const auto& [k, v] : params) req.params.emplace(k, v);
  httplib::Response res;
  ServeHeatmap(req, res, m, 1'000'000);
  return {res.status, res.body};
}

// Opened in a browser, 10 s at 1 ms fits the window: columns merged by their maximum (the
// 1 ms burst still shows) to at most 1,000, the legend in view, and the full resolution one
// click away (the same query plus full=1), which keeps every column (issue 35: it was 10,238
// px wide, 1.3 s and no legend visible in a 1,400 px window).
TEST(ServeHeatmap, AnSvgFitsTheWindowWithTheFullResolutionOneClickAway) {
  const auto [status, doc] = Serve({{"seconds", "10"}});
  EXPECT_NE(status, 400);
  const Svg svg = ParseSvg(doc);
  EXPECT_LE(svg.width, 1400);
  const Element* legend = nullptr;
  for (const Element& e : svg.elements) {
    if (e.name == "rect" && legend == nullptr && e.attrs.count("width") &&
        e.attrs.at("width") == "16") {
      legend = &e;
    }
  }
  ASSERT_NE(legend, nullptr);
  EXPECT_LE(std::stod(legend->attrs.at("x")) + 16, svg.width);
  // Merged by maximum: still there (0.9f is 0.89999998, palette index 229).
  const Rgb burst =
      Viridis(static_cast<double>(std::lround(static_cast<double>(0.9f) * 255)) / 255);
  char hex[8];
  snprintf(hex, sizeof(hex), "#%02x%02x%02x", burst.r, burst.g, burst.b);
  EXPECT_NE(doc.find(absl::StrCat("fill=\"", hex, "\"")), std::string::npos) << hex;
  EXPECT_NE(doc.find("columns merged 10:1 (maximum)"), std::string::npos) << doc.substr(0, 1500);
  const Element* a = svg.ById("full-resolution");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->attrs.at("xlink:href"), "/heatmap/links?full=1&amp;seconds=10");

  const auto [full_status, full_doc] = Serve({{"seconds", "10"}, {"full", "1"}});
  const Svg full = ParseSvg(full_doc);
  EXPECT_GE(full.width, 10'000);
  EXPECT_EQ(full.ById("full-resolution"), nullptr);
  // JSON keeps every column; a bad full is a 400 that says what it must be.
  const auto [json_status, json] = Serve({{"format", "json"}});
  EXPECT_NE(json.find("\"bucket_seconds\":0.001"), std::string::npos);
  // Every key and value of the link is percent-encoded: a hostile key stays inside it.
  const auto [odd_status, odd] = Serve({{"x\"><a y", "<1&2>"}});
  const Svg odd_svg = ParseSvg(odd);
  ASSERT_NE(odd_svg.ById("full-resolution"), nullptr);
  EXPECT_EQ(odd_svg.ById("full-resolution")->attrs.at("xlink:href"),
            "/heatmap/links?full=1&amp;x%22%3E%3Ca%20y=%3C1%262%3E");
  const auto [bad, why] = Serve({{"full", "yes"}});
  EXPECT_EQ(bad, 400);
  EXPECT_EQ(why, "full must be 0 or 1\n");
}

}  // namespace
}  // namespace fabricscope::exporters

// fabricscope_bench_heatmap: the link x time heat map at 1,000 links x 1,000 time buckets.
//
// Builds a LinkAnalysis holding 125 nodes x 4 ports x 2 directions = 1,000 links with 1 s of
// 1 ms buckets each, then times (median of --repeat runs):
//   model  LinkAnalysis::LinksHeatmap (ring lookups into the 1,000 x 1,000 grid)
//   svg    RenderHeatmapSvg of that model;   json  RenderHeatmapJson
// against baselines measured in the same run: an snprintf loop writing one "%.4g," per cell
// (the least any text format of the same cells costs) and a memcpy of the rendered body. Two
// traffic patterns: "busy" (every cell a different level: the worst case for the SVG, whose
// equal-color runs merge) and "training" (idle links with 40 ms bursts every 250 ms).
// Also prints the memory of the per-port series (LinkAnalysis::series_bytes) and ingest time.
// Plain binary; no pass/fail.
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "collectors/common/utilization_codec.h"
#include "exporters/analysis/link_analysis.h"
#include "exporters/heatmap/heatmap_svg.h"
#include "tests/common/units.h"

namespace {

using fabricscope::exporters::HeatmapModel;
using fabricscope::exporters::LinkAnalysis;
using Clock = std::chrono::steady_clock;
using fabricscope::kMs;

constexpr int64_t kSec = 1'000'000'000;

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

template <typename F>
double MedianSeconds(int repeat, F f) {
  std::vector<double> t;
  for (int i = 0; i < repeat; ++i) {
    const auto a = Clock::now();
    f();
    t.push_back(Seconds(a, Clock::now()));
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

void Run(const char* pattern, bool busy, int repeat) {
  fabricscope::exporters::LinkAnalysisOptions o;
  o.history_seconds = 1;
  o.max_cells = 1'000'000;
  LinkAnalysis a(o);
  std::mt19937 rng(1);
  std::uniform_int_distribution<int> level(0, 250);
  const int nodes = 125, ports = 4;
  std::vector<fabricscope::v1::Batch> batches;
  for (int n = 0; n < nodes; ++n) {
    fabricscope::v1::Hello h;
    h.set_node("node" + std::to_string(n));
    h.set_instance_id(1);
    for (int p = 0; p < ports; ++p) {
      auto* pi = h.add_ports();
      pi->set_device("mlx5_" + std::to_string(p));
      pi->set_port(1);
      pi->set_rdma(true);
      pi->set_line_rate_bytes_per_second(50'000'000'000);
    }
    a.OnHello(h);
    fabricscope::v1::Batch b;
    b.set_seq(1);
    b.set_unix_offset_ns(1'700'000'000 * kSec);
    b.set_window_start_ns(100 * kSec);
    b.set_window_end_ns(101 * kSec);
    for (int p = 0; p < ports; ++p) {
      auto* s = b.add_utilization_series();
      s->set_port_index(static_cast<uint32_t>(p));
      s->set_start_ns(100 * kSec);
      s->set_bucket_ns(kMs);
      for (int k = 0; k < 1000; ++k) {
        const int code_tx = busy ? level(rng) : (k % 250 < 40 ? 240 : 3);
        const int code_rx = busy ? level(rng) : (k % 250 < 40 ? 235 : 2);
        s->mutable_transmit()->push_back(static_cast<char>(code_tx));
        s->mutable_receive()->push_back(static_cast<char>(code_rx));
      }
      auto* pw = b.add_ports();
      pw->set_port_index(static_cast<uint32_t>(p));
    }
    batches.push_back(std::move(b));
  }
  const auto i0 = Clock::now();
  for (int n = 0; n < nodes; ++n)
    a.OnBatch("node" + std::to_string(n), batches[static_cast<size_t>(n)]);
  const double ingest = Seconds(i0, Clock::now());

  LinkAnalysis::LinkQuery q;
  q.seconds = 1;
  HeatmapModel model;
  const double t_model = MedianSeconds(repeat, [&] { model = a.LinksHeatmap(q); });
  const size_t cells = model.rows.size() * model.cols;
  std::string svg, json;
  const double t_svg = MedianSeconds(repeat, [&] { svg = RenderHeatmapSvg(model); });
  const double t_json = MedianSeconds(repeat, [&] { json = RenderHeatmapJson(model); });
  // Baselines: the same number of cells through snprintf, and a copy of each body.
  std::string base;
  const double t_printf = MedianSeconds(repeat, [&] {
    base.clear();
    base.reserve(cells * 7);
    char buf[32];
    for (size_t i = 0; i < cells; ++i) {
      const int len = snprintf(buf, sizeof(buf), "%.4g,", static_cast<double>(model.values[i]));
      base.append(buf, static_cast<size_t>(len));
    }
  });
  std::vector<char> dst(std::max(svg.size(), json.size()));
  const double t_copy_svg =
      MedianSeconds(repeat, [&] { std::memcpy(dst.data(), svg.data(), svg.size()); });
  const double t_copy_json =
      MedianSeconds(repeat, [&] { std::memcpy(dst.data(), json.data(), json.size()); });
  printf("%s: %zu links x %zu buckets = %zu cells; ingest %.1f ms (%.1f us per node batch)\n",
         pattern, model.rows.size(), model.cols, cells, ingest * 1e3, ingest / nodes * 1e6);
  printf("  model  %8.1f ms\n", t_model * 1e3);
  printf("  svg    %8.1f ms  %6.1f MB  = %5.2fx snprintf baseline, %6.0fx memcpy of the body\n",
         t_svg * 1e3, static_cast<double>(svg.size()) / 1e6, t_svg / t_printf, t_svg / t_copy_svg);
  printf("  json   %8.1f ms  %6.1f MB  = %5.2fx snprintf baseline, %6.0fx memcpy of the body\n",
         t_json * 1e3, static_cast<double>(json.size()) / 1e6, t_json / t_printf,
         t_json / t_copy_json);
  printf("  baseline snprintf %.1f ms (%.1f MB)\n", t_printf * 1e3,
         static_cast<double>(base.size()) / 1e6);
  printf(
      "  memory: per-port series %.2f MB for 1,000 links x 1 s at 1 ms (%.0f bytes per link "
      "per second, incl. the per-node period ring)\n",
      static_cast<double>(a.series_bytes()) / 1e6, static_cast<double>(a.series_bytes()) / 1000.0);
}

}  // namespace

int main(int argc, char** argv) {
  int repeat = 5;
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--repeat=", 9) == 0) repeat = std::max(1, std::atoi(argv[i] + 9));
  }
  Run("busy", true, repeat);
  Run("training", false, repeat);
  return 0;
}

#include "tests/bench/bench_cluster_output.h"

#include <snappy.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>

#include "exporters/exposition/cluster_render.h"
#include "exporters/exposition/http_server.h"
#include "exporters/remote_write/remote_write.h"
#include "tests/bench/bench_common.h"

namespace fabricscope::bench {
namespace {

using Clock = std::chrono::steady_clock;
double Since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

}  // namespace

OutputFigures MeasureOutput(exporters::ClusterState& state, int repeat) {
  OutputFigures f;
  exporters::HttpServer http({}, &state);
  for (int r = 0; r < repeat; ++r) {
    const auto t0 = Clock::now();
    f.body = http.RenderMetrics();
    f.render.push_back(Since(t0));
    const auto t1 = Clock::now();
    std::string dup = f.body;
    f.copy.push_back(Since(t1));
    if (dup.size() != f.body.size()) std::abort();
  }
  for (char ch : f.body) f.lines += ch == '\n';

  const auto t0 = Clock::now();
  promrw::WriteRequest request;
  f.samples = exporters::BuildWriteRequest(exporters::ClusterFamilies(state), 0, &request);
  std::string raw = request.SerializeAsString(), compressed;
  snappy::Compress(raw.data(), raw.size(), &compressed);
  f.remote_write_seconds = Since(t0);
  f.raw_bytes = static_cast<double>(raw.size());
  f.compressed_bytes = static_cast<double>(compressed.size());
  return f;
}

void PrintOutput(const OutputFigures& f, size_t nodes, int repeat) {
  const double render = Median(f.render), copy = Median(f.copy);
  std::printf(
      "render /metrics:   %.1f ms median of %d (%.1f MiB, %zu lines, %.0f bytes/node); "
      "copy of the body %.2f ms; render / copy = %.0fx\n",
      render * 1e3, repeat, static_cast<double>(f.body.size()) / (1 << 20), f.lines,
      static_cast<double>(f.body.size()) / static_cast<double>(nodes), copy * 1e3, render / copy);
  std::printf(
      "remote-write:      %zu samples, %.1f MiB protobuf, %.1f MiB snappy (%.2fx), built and "
      "compressed in %.0f ms (%.2fx the render); the default 256 MiB queue holds %.0f min of "
      "a receiver outage at the 15 s interval\n",
      f.samples, f.raw_bytes / (1 << 20), f.compressed_bytes / (1 << 20),
      f.compressed_bytes / f.raw_bytes, f.remote_write_seconds * 1e3,
      f.remote_write_seconds / render,
      static_cast<double>(common::RemoteWriteOptions{}.queue_max_bytes) / f.compressed_bytes * 15 /
          60);
}

}  // namespace fabricscope::bench

// fabricscope_bench_cluster's output figures: /metrics rendered over the whole cluster and the
// remote-write request of the same snapshot (tests/bench/bench_cluster.cc).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "exporters/state/cluster_state.h"

namespace fabricscope::bench {

struct OutputFigures {
  // HttpServer::RenderMetrics() `repeat` times, seconds each; baseline: copying the body.
  std::vector<double> render, copy;
  std::string body;
  size_t lines = 0;
  // The remote-write request of one snapshot (exporters/remote_write): its size decides how
  // long a receiver may be down before the queue (remote_write.queue_max_bytes) drops.
  size_t samples = 0;
  double raw_bytes = 0, compressed_bytes = 0, remote_write_seconds = 0;
};

OutputFigures MeasureOutput(exporters::ClusterState& state, int repeat);
// The "render /metrics" and "remote-write" lines of the summary.
void PrintOutput(const OutputFigures& f, size_t nodes, int repeat);

}  // namespace fabricscope::bench

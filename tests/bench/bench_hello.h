#pragma once

// Simulated agents for the aggregator benchmarks (tests/bench): node names and the Hello of a
// node with `ports` InfiniBand NDR ports (mlx5_0..mlx5_<ports-1>, port 1, 400 Gb/s from sysfs),
// 100 us sampling and 1 s windows. Not part of ctest.

#include <cstddef>
#include <cstdio>
#include <string>

#include "fabricscope/v1/telemetry.pb.h"

namespace fabricscope::bench {

// "gpu-node-00042".
inline std::string NodeName(size_t i) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "gpu-node-%05zu", i);
  return buf;
}

// Instance id node + 1, resume_seq 1.
inline v1::Hello MakeHello(size_t node, int ports) {
  v1::Hello h;
  h.set_node(NodeName(node));
  h.set_boot_id("6f1c2a9e-3b7d-4c55-9a2e-0d8b1f4e7c3" + std::to_string(node % 10));
  h.set_agent_version("0.1.0");
  h.set_instance_id(node + 1);
  h.set_resume_seq(1);
  for (int p = 0; p < ports; ++p) {
    v1::PortInfo* pi = h.add_ports();
    pi->set_device("mlx5_" + std::to_string(p));
    pi->set_port(1);
    pi->set_link_layer(v1::LINK_LAYER_INFINIBAND);
    pi->set_line_rate_bytes_per_second(50'000'000'000);  // 400 Gb/s NDR
    pi->set_line_rate_source(v1::LINE_RATE_SOURCE_SYSFS);
    pi->set_rdma(true);
  }
  h.set_sample_period_seconds(100e-6);
  h.set_window_seconds(1.0);
  return h;
}

}  // namespace fabricscope::bench

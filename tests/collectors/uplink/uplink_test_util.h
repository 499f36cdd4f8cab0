#pragma once
// What the uplink tests (uplink_test.cc, uplink_spool_test.cc) send and read back: node-a's
// Hello with one 200 Gb/s port, a batch carrying a transmit total, and the aggregator's view.

#include <cstdint>
#include <string>

#include "exporters/exposition/cluster_render.h"
#include "exporters/state/cluster_state.h"
#include "fabricscope/v1/telemetry.pb.h"

namespace fabricscope::uplink {

inline v1::Hello TestHello(uint64_t instance = 42) {
  v1::Hello h;
  h.set_node("node-a");
  h.set_instance_id(instance);
  v1::PortInfo* p = h.add_ports();
  p->set_device("mlx5_0");
  p->set_port(1);
  p->set_line_rate_bytes_per_second(25'000'000'000);
  return h;
}

inline v1::Batch TestBatch(uint64_t tx_total) {
  v1::Batch b;
  b.set_window_end_ns(1'000'000'000);
  v1::PortWindow* w = b.add_ports();
  w->set_port_index(0);
  w->mutable_transmit()->set_bytes_total(tx_total);
  w->mutable_transmit()->set_has_bytes(true);
  return b;
}

// The transmit bytes total the aggregator exports for node-a, or -1 when absent.
inline double ExportedTx(const exporters::ClusterState& s) {
  for (const auto& f : ClusterFamilies(s)) {
    if (f.name == "fabricscope_port_transmit_bytes_total" && !f.metric.empty()) {
      return f.metric[0].counter.value;
    }
  }
  return -1;
}

// The family's value (counter or gauge), summed over its series; -1 when absent.
inline double SelfMetric(const exporters::ClusterState& s, const std::string& name) {
  for (const auto& f : ClusterFamilies(s)) {
    if (f.name != name) continue;
    double sum = 0;
    for (const auto& m : f.metric) {
      sum += f.type == prometheus::MetricType::Gauge ? m.gauge.value : m.counter.value;
    }
    return sum;
  }
  return -1;
}

}  // namespace fabricscope::uplink

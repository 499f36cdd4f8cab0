#pragma once

// /metrics of the cluster state: renders ClusterSnapshot (exporters/state/cluster_views.h) with
// the link, cross-rank and GPU renderers; computes nothing beyond summing what it renders (a
// node's histograms over its ports).

#include <vector>

#include "exporters/state/cluster_state.h"
#include "prometheus/collectable.h"
#include "prometheus/metric_family.h"

namespace fabricscope::exporters {

// Every family of the snapshot that has a sample and that s.profile exports (catalog order, then
// the link, cross-rank, peer and GPU families; fabricscope_traffic_imbalance_ratio's two scopes
// merged into one family).
std::vector<prometheus::MetricFamily> RenderClusterFamilies(const ClusterSnapshot& s);

// RenderClusterFamilies(state.Snapshot()).
std::vector<prometheus::MetricFamily> ClusterFamilies(const ClusterState& state);

// The cluster state as a prometheus::Collectable (HttpServer's /metrics, the remote writer).
// `state` must outlive it.
class ClusterMetrics : public prometheus::Collectable {
 public:
  explicit ClusterMetrics(const ClusterState& state) : state_(state) {}
  std::vector<prometheus::MetricFamily> Collect() const override { return ClusterFamilies(state_); }
  const ClusterState& state() const { return state_; }

 private:
  const ClusterState& state_;
};

}  // namespace fabricscope::exporters

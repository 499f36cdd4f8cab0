#pragma once

// The link analysis as Prometheus families and JSON: renders the plain values of
// exporters/analysis/link_analysis.h and loss_patterns.h; computes nothing.

#include <string>
#include <vector>

#include "exporters/analysis/link_analysis.h"
#include "exporters/analysis/loss_patterns.h"
#include "prometheus/metric_family.h"

namespace fabricscope::exporters {

// fabricscope_step_period_seconds{node}, fabricscope_step_period_strength_ratio{node},
// fabricscope_anomaly_events_total{node,kind}, fabricscope_traffic_imbalance_ratio{scope="rails",
// node,direction} (GpuState adds scope="ranks"; ClusterState::Collect merges the two),
// fabricscope_loss_concentration_ratio{node,device,port}, fabricscope_flight_recorder_bytes{node}
// and fabricscope_aggregator_link_series_bytes; families without a sample are left out.
void AddLinkFamilies(const LinkSnapshot& s, std::vector<prometheus::MetricFamily>* out);

// /api/anomalies: {"anomalies":[{node, kind, time_unix_seconds, value, median, scale, score}]},
// in the order given (newest last).
std::string AnomaliesJson(const std::vector<LinkAnomaly>& anomalies);

// /api/loss/patterns: {"classification", "rule", "reasons": [...], "total_loss_events", "gini",
// "links": [{node, device, port, loss_events, share}] (top first, at most 20),
// "total_priority_loss_events", "priorities": [{priority, loss_events, share}] (PFC priorities
// 0-7 with loss, top first; share of the priority-tagged loss events), "peers": [{src, dst,
// loss_events}], "nodes": [{node, step_period_seconds, captured_loss_events, phase_resultant,
// rayleigh_p}]} (the last two only where the Rayleigh test ran), "node_wide": [{node, device,
// loss_events}] (node-level pseudo-ports such as `tcp`: the node's TCP retransmissions, not a
// link's; top first, at most 20, not in total_loss_events).
std::string LossPatternsJson(const LossPatterns& p);

// /api/flight_recordings: {"recordings":[{node, device, port, reason, from_unix_seconds,
// to_unix_seconds, truncated, samples:[{time_unix_seconds, interval_seconds, transmit_bytes,
// receive_bytes, transmit_utilization, receive_utilization}]}]} in the order given.
std::string FlightRecordingsJson(const std::vector<LinkRecording>& recordings);

}  // namespace fabricscope::exporters

#pragma once

// The cluster state's JSON endpoints: renders the views of exporters/state/cluster_views.h;
// computes nothing beyond ordering and top-K. Units: seconds, per second, ratios 0..1, counts
// since agent start.

#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "exporters/state/cluster_state.h"

namespace fabricscope::exporters {

// /api/status, the live page's status: {"nodes_total", "nodes_reporting" (a Hello or batch
// within the last 10 s of state.Now()), "ports_total", "samples_per_second_total" (of the
// reporting nodes), "samples_total", "microbursts_total", "overruns_total", "ring_drops_total",
// "nodes":[{node, ports, samples_per_second (null before a window with samples), samples_total
// (AgentStats.ticks_total), p99_interval_seconds, p99_interval_above (true: beyond the last
// bound), microbursts_total, overruns_total, ring_drops_total, uplink_dropped_batches_total,
// lost_batches, last_seen_unix_seconds}]}: the `limit` nodes with the most overruns + ring drops
// first (ties by name), totals over all.
std::string StatusJson(const ClusterState& state, size_t limit);

// /api/ports: the ports' latest windows, {"ports_total", "ports":[{node, device, port, kind
// ("rdma"|"netdev"|"node"), line_rate_bytes_per_second, transmit_utilization,
// receive_utilization (mean over the window), loss_ratio, retransmits_per_second,
// tcp_retransmitted_ratio, cnp_sent_per_second, ecn_marked_ratio, pause_time_ratio (the most
// paused priority's share of the window); null when the port has no such counter)}]};
// node_filter empty = all nodes; the `limit` ports with the highest loss ratio, then
// retransmits per second, then utilization, first.
std::string PortsJson(const ClusterState& state, absl::string_view node_filter, size_t limit);

// /api/nodes: {"nodes":[{node, instance_id (a string: 64 bits), acked_seq, batches,
// duplicate_batches, lost_batches, last_seen_unix_seconds}...]} sorted by node: each node's
// live agent instance, the highest sequence number it has been acked (stored, or declared lost),
// and this instance's counts.
std::string NodesJson(const ClusterState& state);

// /api/microbursts: {"microbursts":[{node, device, port, direction, start_unix_seconds,
// duration_seconds, peak_utilization, bytes}, ...]} in the records' order.
std::string MicroburstsJson(const std::vector<MicroburstRecord>& records);

// /api/loss: {"loss_events":[{node, src, dst, proto ("tcp"|"rocev2"), sport, dport, qp, kind,
// time_unix_seconds, first, last}, ...]} in the records' order.
std::string LossEventsJson(const std::vector<LossEventRecord>& records);

}  // namespace fabricscope::exporters

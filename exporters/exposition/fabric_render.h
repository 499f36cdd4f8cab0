#pragma once

// What the fabric model (exporters/analysis/fabric_model.h) shows: its Prometheus families,
// /api/fabric's JSON, and the /heatmap/leaves route.

#include <string>
#include <vector>

#include "exporters/analysis/fabric_model.h"
#include "exporters/exposition/link_http.h"
#include "prometheus/metric_family.h"

namespace httplib {
class Server;
}

namespace fabricscope::exporters {

class ClusterState;

// fabricscope_leaf_uplink_demand_ratio{leaf} (leaves with a capacity),
// fabricscope_leaf_uplink_bytes_per_second{leaf,direction},
// fabricscope_traffic_local_ratio{scope="leaf"|"rail",comm} and {scope="leaf"|"rail",job_id}
// (rail series only where the topology file names rails), fabricscope_topology_disagreements.
// Series: at most 3 per leaf (1,024 leaves), 2 per communicator (64) and per job (64), and one.
void AddFabricFamilies(const FabricSnapshot& s, std::vector<prometheus::MetricFamily>* out);

// {"seconds":..,"leaves":[{"name","source","rail","nodes":[..],"uplink_capacity_bytes_per_second",
// "egress_bytes_per_second","ingress_bytes_per_second","demand_ratio"}],"local":[{"scope",
// "comm"|"job","local_bytes","total_bytes","ratio","rail_local_bytes","rail_total_bytes",
// "rail_ratio"}],"disagreements":[{"node","file_leaf",
// "cable_leaf","cable_switch","cable_source"}],"multi_leaf_nodes":[..],"unplaced_bytes","dropped_bytes",
// "late_bytes","clock_ahead_batches"}
std::string FabricJson(const FabricSnapshot& s);

// /heatmap/leaves (leaf x leaf NCCL bytes per second over the last 10 s; format=svg|json) and
// /api/fabric. `state` must outlive the server.
void RegisterFabricRoutes(httplib::Server& server, const ClusterState& state,
                          std::vector<HeatmapPage>* pages);

}  // namespace fabricscope::exporters

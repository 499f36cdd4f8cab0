#pragma once

// One job's share of a link's traffic over time (/heatmap/links?job=): from each node's recent
// collective records (their NCCL proxy network bytes over [start, end], the records the
// aggregator keeps per node, exporters/state/gpu_state.h), the share of the link's network bytes
// that the job's communicators moved in each time bucket. The profiler does not say which NIC a
// proxy op used: a transfer is placed on the RDMA ports its process had queue pairs on, as the
// agent read them from the kernel's QP table (GpuProducer.rdma_ports, agent/qp_ports.h), spread
// evenly over them; a transfer whose process's ports are unknown is spread evenly over the ports
// the node's known transfers used (node-wide, the same share on every link, when none is known).

#include <cstddef>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "exporters/analysis/heatmap_model.h"

namespace fabricscope::exporters {

// One collective record's network transfer on its node: its proxy bytes over [start, end] (Unix
// ns); a transfer of no duration counts whole in the bucket it falls in.
struct NodeTransfer {
  uint64_t comm = 0;
  int64_t start_unix_ns = 0, end_unix_ns = 0;
  uint64_t bytes = 0;
  // The RDMA ports ("mlx5_2:1") its process had queue pairs on; empty = unknown.
  std::vector<std::string> ports;
};

// A node's stored transfers; truncated: the node held as many records as it keeps, so older ones
// were dropped.
struct NodeTransfers {
  std::vector<NodeTransfer> transfers;
  bool truncated = false;
};

// Per column of the time grid [from + j x bucket_ns, + bucket_ns), j < cols: the share in [0, 1]
// of the transfer bytes on `port` ("mlx5_2:1"; "" = the whole node) that `comms` moved, each
// transfer counted pro rata to its overlap with the column and weighted by its part of the port
// (1/k on each of its k ports, 0 off them; unknown ports: 1/n, n the distinct ports of the
// node's known transfers, or 1 when none is known); 0 where nothing was moved; when
// `truncated`, NaN in columns that end before the earliest end among the transfers held (the
// node keeps its latest records, which arrive in the order of their ends: older ones were
// dropped), and in all of them when none is held. A transfer with an unknown start (0), an end
// before its start or a span over an hour is skipped. from must be at least 0 and from +
// bucket_ns x cols must fit an int64; bucket_ns <= 0 gives all NaN.
std::vector<float> JobShareColumns(const NodeTransfers& node, const std::set<uint64_t>& comms,
                                   int64_t from, int64_t bucket_ns, size_t cols,
                                   const std::string& port = "");

// JobShareColumns of every port of one node, from one pass over its transfers (WeighByJob asks
// for each of a node's rows).
class NodeShares {
 public:
  // `wanted`: the ports to keep columns for (nullptr = all); the others answer Of() with the
  // part of the transfers of unknown ports. Memory: 3 x cols floats plus cols per wanted port.
  NodeShares(const NodeTransfers& node, const std::set<uint64_t>& comms, int64_t from,
             int64_t bucket_ns, size_t cols, const std::set<std::string>* wanted = nullptr);
  // The columns of `port` ("" = the whole node); a port no known transfer used gets the part of
  // the transfers of unknown ports.
  const std::vector<float>& Of(const std::string& port) const;

 private:
  std::map<std::string, std::vector<float>> by_port_;
  std::vector<float> unknown_only_, node_wide_;
};

// Scales a links x time heat map (model->row_nodes set, a time axis) to one job's part: each cell
// times the job's share of its link's network bytes then (JobShareColumns of by_node[node] on
// the row's port, model->row_ports, "mlx5_0:1"; node-wide where the model has no row_ports; a
// port no known transfer used, such as an Ethernet row "eth0:0", gets the part of the transfers
// of unknown ports); NaN where the share is unknown. Rows where the job moved nothing in the window
// are dropped. Returns the rows kept.
size_t WeighByJob(HeatmapModel* model, const std::map<std::string, NodeTransfers>& by_node,
                  const std::set<uint64_t>& comms);

}  // namespace fabricscope::exporters

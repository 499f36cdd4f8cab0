#pragma once

// One job's share of a link's traffic over time (/heatmap/links?job=): from each node's recent
// collective records (their NCCL proxy network bytes over [start, end], the records the
// aggregator keeps per node, exporters/state/gpu_state.h), the share of the node's network bytes
// that the job's communicators moved in each time bucket. Node-wide: the profiler does not say
// which NIC a proxy op used, so every link of a node gets the node's share.

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
};

// A node's stored transfers; truncated: the node held as many records as it keeps, so older ones
// were dropped.
struct NodeTransfers {
  std::vector<NodeTransfer> transfers;
  bool truncated = false;
};

// Per column of the time grid [from + j x bucket_ns, + bucket_ns), j < cols: the share in [0, 1]
// of the node's transfer bytes that `comms` moved, each transfer counted pro rata to its overlap
// with the column; 0 where the node's transfers moved nothing; when `truncated`, NaN in columns
// that end before the earliest end among the transfers held (the node keeps its latest records,
// which arrive in the order of their ends: older ones were dropped), and in all of them when
// none is held. A transfer with an unknown start (0), an end before its start or a span over an
// hour is skipped. from must be at least 0 and from + bucket_ns x cols must fit an int64;
// bucket_ns <= 0 gives all NaN.
std::vector<float> JobShareColumns(const NodeTransfers& node, const std::set<uint64_t>& comms,
                                   int64_t from, int64_t bucket_ns, size_t cols);

// Scales a links x time heat map (model->row_nodes set, a time axis) to one job's part: each cell
// times the share of its node's network bytes the job moved then (JobShareColumns of
// by_node[node]); NaN where the share is unknown. Rows of a node where the job moved nothing in
// the window are dropped. Returns the rows kept.
size_t WeighByJob(HeatmapModel* model, const std::map<std::string, NodeTransfers>& by_node,
                  const std::set<uint64_t>& comms);

}  // namespace fabricscope::exporters

#pragma once

// What GpuState hands out (exporters/state/gpu_state.h): plain values, copied under the
// aggregator's GPU lock and rendered after it by exporters/exposition/gpu_render.h. Nothing here
// points into GpuState.

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "exporters/state/job_table.h"
#include "fabricscope/v1/telemetry.pb.h"

namespace fabricscope::exporters {

// GpuState::Snapshot: the aggregates /metrics shows, computed over every node's latest
// GpuWindow and recent batches (the rules are GpuState's class comment's).
struct GpuSnapshot {
  // One (func, comm label) pair: the communicator label is common::CommLabel of its hash, or
  // "other" past max_comm_labels, or "" for a busBw whose communicator has no totals.
  struct Series {
    std::string func, comm;
    v1::Histogram durations;    // seconds, merged over nodes (bounds that differ are left out)
    double bus_bytes = 0;       // bytes, CollectiveTotals.bus_bytes_total summed
    double weighted_busbw = 0;  // bytes/s x seconds of each node's last window with the func
    double seconds = 0;         // the weights' sum; 0: no busBw known
  };
  std::vector<Series> series;                                       // sorted by (func, comm)
  std::vector<std::pair<std::string, double>> collectives_by_func;  // sorted by func
  struct BySource {
    std::string func;
    v1::TimingSource source;  // 1..4
    double count;
  };
  std::vector<BySource> by_timing_source;  // sorted by (func, source)
  // The coefficient of variation of each communicator's ranks' bytes (exporters/analysis/
  // imbalance.h), per comm label and direction ("transmit" | "receive"); finite values only.
  struct RankImbalance {
    std::string comm;
    const char* direction;
    double ratio;
  };
  std::vector<RankImbalance> rank_imbalance;
  // The rank_pair_top_k (comm, src rank, dst rank) pairs with the most bytes, most first.
  struct RankPair {
    uint64_t comm_hash;
    int32_t src_rank, dst_rank;
    double bytes;
  };
  std::vector<RankPair> top_rank_pairs;
  // Per node with a GPU window: the ingest's counters and CUPTI's kernel totals.
  struct Node {
    std::string node;
    v1::GpuIngestStats ingest;
    uint64_t communicators_evicted_total = 0;
    std::vector<v1::KernelTotals> kernels;
  };
  std::vector<Node> nodes;  // sorted by node
  // The job table (exporters/state/job_table.h), by job id, and what it could not keep.
  std::vector<JobView> jobs;
  uint64_t jobs_evicted_total = 0, jobs_dropped_total = 0, job_comm_conflicts_total = 0;
};

// One stored collective (GpuState::RecentCollectives) as the agent sent it, within GpuState's
// bounds. Times are Unix ns (0 = unknown), durations seconds, bandwidths bytes per second.
struct CollectiveRecord {
  std::string node;
  uint64_t comm_hash = 0;
  int32_t rank = 0, nranks = 0, root = 0, peer = 0, pid = 0, gpu = 0;
  uint32_t channels = 0;
  std::string func, datatype, algo, proto;
  v1::TimingSource timing_source = v1::TIMING_SOURCE_UNSPECIFIED;
  bool p2p = false, graph_captured = false;
  uint64_t seq = 0, bytes = 0, count = 0, proxy_bytes = 0;
  int64_t enqueue_start_unix_ns = 0, start_unix_ns = 0, end_unix_ns = 0;
  double duration_seconds = 0, algbw_bytes_per_second = 0, busbw_bytes_per_second = 0;
  struct ProxyPeer {
    int32_t peer;
    uint64_t bytes_sent, bytes_received;
  };
  std::vector<ProxyPeer> proxy_peers;
  // Each channel's share of its kernel (v1::Collective.channel_spans), Unix ns; empty unless the
  // plugin sends them (FABRICSCOPE_NCCL_CHANNEL_SPANS=1). At most kMaxChannelSpans.
  struct ChannelSpan {
    int64_t start_unix_ns, end_unix_ns;
    uint32_t channel;
  };
  static constexpr size_t kMaxChannelSpans = 64;
  std::vector<ChannelSpan> channel_spans;
};

// One stored CUPTI kernel or memcpy span (GpuState::RecentKernels). Times are Unix ns
// (saturated at the int64 range; 0 = unknown); duration in seconds, 0 when end <= start.
struct KernelRecord {
  std::string node;
  uint32_t device = 0, stream = 0;
  std::string name;
  bool is_nccl = false, memcpy = false;
  uint64_t bytes = 0, graph_id = 0, correlation_id = 0;
  int64_t start_unix_ns = 0, end_unix_ns = 0;
  double duration_seconds = 0;
  int32_t pid = 0;
};

}  // namespace fabricscope::exporters

#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/string_view.h"
#include "fabricscope/v1/telemetry.pb.h"
#include "prometheus/metric_family.h"

namespace fabricscope::exporters {

// The aggregator's view of the nodes' GPU timelines (Batch fields 10-12): the latest cumulative
// GpuWindow per node, recent collectives and kernel spans per node for /api/collectives and
// /api/kernels, and the Prometheus families built from them.
//
// Labels stay bounded: func comes from the agent's fixed set (agent/bus_bandwidth.h; anything
// else is "other"); comm is the first 8 hex digits of the communicator hash, for the
// max_comm_labels communicators with the most collectives (the rest fold into comm="other");
// rank pairs are the top rank_pair_top_k by bytes over all nodes.
//
// Rank imbalance (fabricscope_traffic_imbalance_ratio{scope="ranks",comm,direction}): per
// communicator, the coefficient of variation (exporters/imbalance.h) across its ranks of the
// network bytes each rank sent (transmit: its pairs as src) or received (receive: as dst) over
// each node's last imbalance_windows batches. A batch's bytes are the deltas of the node's
// cumulative rank_pairs against its previous batch: the first batch of a node (or of a new agent
// instance, after ResetNode) is only the baseline, a pair new since the previous batch counts its
// whole total, a total below the previous one (a counter reset) counts from zero. A rank
// appears when some node reported a pair of it in those batches (an idle rank shows as 0);
// absent for fewer than 2 ranks, no bytes, or a communicator beyond max_comm_labels. Ranks on
// nodes without an agent are missing from transmit and under-counted in receive. Memory: per
// node at most imbalance_windows x 2 x (its tracked pairs) entries of 24 bytes.
//
// Not thread-safe: ClusterState calls it under its own lock.
class GpuState {
 public:
  struct Options {
    size_t recent_collectives_per_node = 1024;
    size_t recent_kernels_per_node = 1024;
    size_t rank_pair_top_k = 20;
    size_t max_comm_labels = 64;
    // Batches per node summed for the rank imbalance (10 s at the agent's default 1 s window).
    size_t imbalance_windows = 10;
  };
  GpuState() : GpuState(Options{}) {}
  explicit GpuState(Options options) : options_(options) {}

  // Stores what a validated batch of `node` carries (nothing when it has no GPU fields).
  void OnBatch(const std::string& node, const v1::Batch& batch);
  // A new agent instance on `node`: its cumulative totals restart.
  void ResetNode(const std::string& node);
  void set_rank_pair_top_k(size_t k) { options_.rank_pair_top_k = k; }

  // Appends the GPU metric families (those with at least one sample).
  void Collect(std::vector<prometheus::MetricFamily>* out) const;

  // {"collectives":[{node, comm, rank, nranks, func, seq, bytes, count, datatype, algo, proto,
  // channels, root, peer, timing_source, enqueue_unix_seconds, start_unix_seconds,
  // end_unix_seconds, duration_seconds, algbw_bytes_per_second, busbw_bytes_per_second, pid,
  // gpu, p2p, graph_captured, proxy_bytes, proxy_peers:[{peer, bytes_sent, bytes_received}]},
  // ...]} oldest first; at most `limit` (0 = all kept) newest; node_filter empty = all nodes.
  std::string CollectivesJson(absl::string_view node_filter, size_t limit) const;
  // {"kernels":[{node, device, stream, name, is_nccl, memcpy, bytes, start_unix_seconds,
  // end_unix_seconds, duration_seconds, pid, graph_id, correlation_id}, ...]}, same rules.
  std::string KernelsJson(absl::string_view node_filter, size_t limit) const;

  // "0123abcd": the comm label of a communicator hash.
  static std::string CommLabel(uint64_t comm_hash);

 private:
  struct Timed {
    int64_t unix_offset_ns;
  };
  struct Collective : Timed {
    v1::Collective c;
  };
  struct Kernel : Timed {
    v1::KernelSpan k;
  };
  struct LastBusBw {
    double busbw = 0;
    double seconds = 0;
  };
  using PairKey = std::tuple<uint64_t, int32_t, int32_t>;  // comm, src rank, dst rank
  // Bytes one rank of one communicator sent (direction 0) or received (1) in one batch.
  struct RankBytes {
    uint64_t comm;
    int32_t rank;
    int32_t direction;
    uint64_t bytes;
  };
  struct NodeGpu {
    v1::GpuWindow last;
    bool have = false;
    std::deque<Collective> collectives;
    std::deque<Kernel> kernels;
    // (comm, func) -> the last window in which it ran with a known duration.
    std::map<std::pair<uint64_t, std::string>, LastBusBw> last_busbw;
    // The previous batch's cumulative rank_pairs (the delta baseline) and the per-rank bytes
    // of the last imbalance_windows batches, oldest first.
    std::map<PairKey, uint64_t> pair_totals;
    bool have_pair_totals = false;
    std::deque<std::vector<RankBytes>> rank_windows;
  };

  // Appends the per-rank bytes of `w` since n's previous batch (see the class comment).
  void AddRankWindow(NodeGpu& n, const v1::GpuWindow& w);

  Options options_;
  std::map<std::string, NodeGpu> nodes_;
};

}  // namespace fabricscope::exporters

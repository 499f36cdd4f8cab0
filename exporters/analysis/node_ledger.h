#pragma once

// The cross-rank analysis's node-level state: each node's ports, rank-pair bytes, microburst
// overlap, network share and its ranks' straggler scores (exporters/analysis/cross_rank.h
// says what each means).

#include <atomic>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "exporters/analysis/cross_rank_types.h"

namespace fabricscope::exporters {

// Thread-safe: nodes are split over kNodeShards shards by name, each behind its own lock, held
// briefly and never with another lock of the analysis.
class NodeLedger {
 public:
  static constexpr size_t kNodeShards = 16;
  explicit NodeLedger(const CrossRankOptions& options);

  // The node's ports from its Hello; its overlap ring starts over.
  void SetPorts(Name node, std::shared_ptr<const NodePorts> ports);
  // Drops the node's ports, rank pairs and straggler scores.
  void Forget(Name node);
  // The node's ports, or null before its Hello.
  std::shared_ptr<const NodePorts> Ports(Name node) const;
  // The batch's node-level parts (network share, rank pairs, overlap), under the node's shard
  // lock; returns the node's ports (none before its Hello).
  std::shared_ptr<const NodePorts> Take(Name node, const v1::Batch& batch);
  // Straggler-score updates, each under its node's shard lock (each shard's taken once).
  void ApplyBlames(const std::vector<BlameUpdate>& blames);

  // The straggler scores, network shares and overlap ratios into *s.
  void AddTo(CrossRankSnapshot* s) const;
  // (comm, src rank, dst rank) -> cumulative bytes over all nodes (the largest a node reports).
  std::map<std::tuple<uint64_t, int32_t, int32_t>, uint64_t> RankPairs() const;
  uint64_t memory_bytes() const;
  void ProbeLock() const;

 private:
  struct Score {
    std::deque<double> blame;
    double sum = 0;
  };
  // Per communicator the node's rank pairs: (src, dst) -> cumulative bytes of the latest window
  // that named the communicator (StorePairs).
  struct CommPairs {
    uint64_t seen = 0;  // NodePairs::tick when a window last named it
    std::map<std::pair<int32_t, int32_t>, uint64_t> bytes;
  };
  struct NodePairs {
    std::map<uint64_t, CommPairs> comms;
    size_t total = 0;   // pairs over all comms
    uint64_t tick = 0;  // windows stored
  };
  struct NodeInfo {
    std::shared_ptr<const NodePorts> ports = std::make_shared<const NodePorts>();
    NodePairs pairs;
    std::map<int32_t, Score> scores;  // straggler score per rank
    // The node's last overlap_window analyses, per port (collective seconds, microburst overlap
    // seconds): a ring of overlap_window x ports entries (allocated at the first analysis), the
    // sums over it per port, and per port how many entries in it are nonzero.
    std::vector<std::pair<float, float>> overlap;  // 8 bytes an entry: 16 KiB a node of 8 ports
    std::vector<std::pair<double, double>> overlap_sum;
    std::vector<uint32_t> overlap_nonzero;
    size_t overlap_next = 0, overlap_count = 0;
    double share = 0;
    bool have_share = false;
  };
  struct NodeShard {
    mutable absl::Mutex mu;
    absl::flat_hash_map<Name, NodeInfo> nodes ABSL_GUARDED_BY(mu);
  };
  NodeShard& ShardOf(Name node) const { return *shards_[absl::Hash<Name>{}(node) % kNodeShards]; }
  // One analysis's (collective seconds, microburst overlap seconds) into the node's ring.
  void AddOverlap(NodeInfo& n, const v1::Collective& c, double seconds) const;
  void StorePairs(NodePairs& np, const v1::GpuWindow& w) const;
  void Blame(NodeInfo& n, int32_t rank, double w);

  const CrossRankOptions options_;
  std::vector<std::unique_ptr<NodeShard>> shards_;
  std::atomic<uint64_t> scored_ranks_{0};  // (node, rank) scores held, against max_ranks
};

}  // namespace fabricscope::exporters

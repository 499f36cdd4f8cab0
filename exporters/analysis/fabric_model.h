#pragma once

// The aggregator's fabric model: nodes -> leaves (from the topology file, the IB fabric file
// and the agents' LLDP neighbours), each leaf's uplink capacity, and the NCCL traffic between them.
// From the rank-pair bytes the agents already send (their proxy ops' peers, GpuWindow.rank_pairs)
// and the ranks each node hosts (GpuWindow.communicators), it works out per window which bytes
// stayed inside a leaf and which crossed its uplinks:
//
//   demand ratio of leaf L = max(bytes leaving L, bytes entering L) / seconds / uplink capacity
//   local ratio of a communicator or job = bytes between ranks on one leaf / bytes it sent
//
// over the last `horizon` (10 s by default), rank pairs counted from the sender's side only.
// exporters/README.md "Fabric model" documents what each figure means and its bounds.

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "exporters/analysis/fabric_placement.h"
#include "exporters/analysis/fabric_topology.h"
#include "exporters/analysis/heatmap_model.h"
#include "fabricscope/v1/telemetry.pb.h"

namespace fabricscope::exporters {

struct FabricModelOptions {
  int64_t horizon_ns = 10'000'000'000;  // the span demand and local ratios are taken over
  int64_t bucket_ns = 1'000'000'000;    // its time resolution
  // (communicator, source node, destination node) entries one bucket holds; more are counted
  // in FabricSnapshot::dropped_bytes.
  size_t max_pairs_per_bucket = 65536;
  size_t max_comm_ranks = 1 << 20;   // (communicator, rank) -> node entries
  size_t max_ranks_per_node = 4096;  // (communicator, rank)s one node hosts
  size_t max_nodes = 16384;
  size_t max_series = 64;  // communicators and jobs with a local-ratio series each, by bytes
};

struct FabricSnapshot {
  double seconds = 0;  // the span the rates are over
  struct Leaf {
    std::string name;
    // "file", "ibnetdiscover", "file+ibnetdiscover" (FabricLeaf::source), "lldp" (a switch LLDP
    // names that no file lists)
    std::string source;
    std::string rail;  // FabricLeaf::rail, "" none
    std::vector<std::string> nodes;
    double uplink_bytes_per_second = 0;  // 0 = not stated
    double egress_bytes_per_second = 0;  // to nodes on other leaves
    double ingress_bytes_per_second = 0;
    double demand_ratio = 0;  // NaN when the capacity is not stated
  };
  std::vector<Leaf> leaves;  // by name
  // leaf_bytes[i][j]: bytes from leaf i's nodes to leaf j's over `seconds`.
  std::vector<std::vector<double>> leaf_bytes;
  struct Local {
    uint64_t comm = 0;  // scope comm; 0 for a job
    std::string job;    // scope job; "" for a communicator
    uint64_t local_bytes = 0, total_bytes = 0;
    double ratio = 0;
    // Between ranks on leaves of one rail, over the bytes whose both ends' rails are known
    // (FabricLeaf::rail); rail_ratio NaN when none are.
    uint64_t rail_local_bytes = 0, rail_total_bytes = 0;
    double rail_ratio = 0;
  };
  std::vector<Local> comms;  // at most max_series, the most bytes first
  std::vector<Local> jobs;
  // A node the topology file puts under one leaf and whose ports are cabled to another: LLDP's
  // neighbour, or the IB fabric file's switch for its HCA ports. cable_switch is the LLDP
  // chassis or the IB switch's name, cable_source "lldp" or "ibnetdiscover".
  struct Disagreement {
    std::string node, file_leaf, cable_leaf, cable_switch, cable_source;
  };
  std::vector<Disagreement> disagreements;
  // Nodes whose ports are cabled to several leaves (rails); their leaf is the one most ports
  // reach.
  std::vector<std::string> multi_leaf_nodes;
  uint64_t unplaced_bytes = 0;  // a rank or node whose leaf is unknown
  uint64_t dropped_bytes = 0;   // over the bucket bound
  // Since start: bytes of batches older than the horizon (a spool replayed after an outage),
  // and batches whose window ended more than a bucket after the aggregator's now (counted now).
  uint64_t late_bytes = 0, clock_ahead_batches = 0;
};

// Thread-safe: one lock, held for a batch's rank pairs or a snapshot.
class FabricModel {
 public:
  FabricModel(std::shared_ptr<const FabricTopology> topology, FabricModelOptions options);

  // One batch of `node`: its ports' LLDP neighbours (PortWindow.neighbor), the ranks of its
  // communicators, and its rank-pair totals, whose growth since its last batch is the window's
  // traffic (the node's first batch only sets the baseline; a total that went down, an agent
  // restart, counts whole). The batch's window end in Unix time places it in a bucket, bounded
  // by now_unix_ns, the aggregator's clock (BucketLocked).
  void OnBatch(const std::string& node, const v1::Batch& batch, int64_t now_unix_ns);
  // The node's RDMA ports (PortInfo device, port, node_guid): the HCA ports an IB fabric file
  // places (FabricTopology::leaf_of_hca_port, then leaf_of_node_desc by "<node> <device>").
  void OnHello(const v1::Hello& hello);
  // Drops the node's neighbours, ranks and totals (node expiry).
  void Forget(const std::string& node);
  // The model over the buckets of the last horizon before now_unix_ns; job_of_comm names each
  // communicator's job (the job table).
  FabricSnapshot Snapshot(int64_t now_unix_ns,
                          const std::map<uint64_t, std::string>& job_of_comm) const;

  // Each node's leaf and each leaf's capacity, as Snapshot places them; rebuilt only after a
  // node's neighbours, the nodes or the topology changed (the cross-rank rules ask for it once
  // per collective instance).
  std::shared_ptr<const FabricPlacement> Placement() const;
  // Replaces the topology (the file read again); null = LLDP alone.
  void SetTopology(std::shared_ptr<const FabricTopology> topology);

 private:
  // The destination stays a rank until a snapshot places it: a peer whose node has not yet
  // reported its ranks is placed once it has.
  struct PairKey {
    uint64_t comm;
    uint32_t src;  // node id
    int32_t src_rank, dst_rank;
    friend bool operator==(const PairKey&, const PairKey&) = default;
    template <typename H>
    friend H AbslHashValue(H h, const PairKey& k) {
      return H::combine(std::move(h), k.comm, k.src, k.src_rank, k.dst_rank);
    }
  };
  struct Bucket {
    int64_t start_unix_ns = 0;
    absl::flat_hash_map<PairKey, uint64_t> bytes;
    uint64_t dropped = 0;
  };
  struct NodeInfo {
    uint32_t id = 0;
    bool seen_pairs = false;  // a batch with GPU data set the baseline
    std::map<std::tuple<uint64_t, int32_t, int32_t>, uint64_t> totals;  // the last batch's
    std::vector<std::string> port_keys;  // by Hello port index: "device:port", at most 256
    struct Neighbor {
      uint32_t port_index = 0;  // PortWindow.port_index: the Hello's port
      std::string chassis_name, chassis_id;
      // The switch's name for people: its chassis name, else its chassis ID.
      const std::string& Label() const { return chassis_name.empty() ? chassis_id : chassis_name; }
      friend bool operator==(const Neighbor&, const Neighbor&) = default;
    };
    std::vector<Neighbor> neighbors;  // at most 64
    struct HcaPort {
      uint32_t port_index = 0;  // the Hello's port
      std::string device;
      uint32_t port = 0;
      uint64_t node_guid = 0;
      friend bool operator==(const HcaPort&, const HcaPort&) = default;
    };
    std::vector<HcaPort> hca_ports;  // from its Hello, at most 64
    // Its (comm, rank)s: when a batch last listed them (aggregator clock), and the RDMA ports
    // its process has queue pairs on (GpuProducer.rdma_ports, at most 16), as indices into
    // port_keys: a name the Hello did not announce is dropped.
    struct RankInfo {
      int64_t seen = 0;
      std::vector<uint16_t> ports;
    };
    std::map<std::pair<uint64_t, int32_t>, RankInfo> ranks;
    uint64_t ranks_refused = 0;
  };
  uint32_t NodeIdLocked(const std::string& node) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The node's entry, created (with its id) unless the node bound is reached: null then.
  NodeInfo* NodeLocked(const std::string& node) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The bucket of a batch's window end, or null for one older than the horizon.
  Bucket* BucketLocked(int64_t batch_unix_ns, int64_t now_unix_ns)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void TakeRanksLocked(NodeInfo& n, const v1::GpuWindow& w, int64_t now_unix_ns)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void TakePairsLocked(NodeInfo& n, const v1::GpuWindow& w, Bucket* b)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Where each node and rank sits: leaf indices into FabricSnapshot::leaves (file leaves
  // first, then LLDP-only ones), -1 unknown.
  struct Placed {
    std::vector<int> leaf_of_node;  // by node id
    std::vector<bool> multi_leaf;   // by node id: its ports reach several leaves
    // A rank whose ports' leaves are known; the others sit on their node's leaf, or nowhere
    // when the node reaches several (a rail-optimized node: which one is not known).
    RankLeaves leaf_of_rank;
    int LeafOf(uint64_t comm, int32_t rank, uint32_t node) const;
  };
  Placed PlaceNodesLocked(FabricSnapshot* s) const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // One port's vote for the leaf it is cabled to.
  struct CableVote {
    uint32_t port_index = 0;  // the Hello's port
    int leaf = -1;
    std::string switch_name;  // the LLDP chassis or the IB switch's leaf name
    const char* source = "";  // "lldp", "ibnetdiscover"
  };
  // The ranks of `n` whose ports have votes, onto the leaf most of them reach; a rank another
  // node now hosts (node_of_rank_) is that node's to place.
  void PlaceRanksLocked(const NodeInfo& n, const std::vector<CableVote>& port_votes,
                        RankLeaves* out) const ABSL_SHARED_LOCKS_REQUIRED(mu_);

  const FabricModelOptions options_;
  mutable absl::Mutex mu_;
  std::shared_ptr<const FabricTopology> topology_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, NodeInfo> nodes_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, uint32_t> ids_ ABSL_GUARDED_BY(mu_);  // every name seen, forgotten too
  std::vector<std::string> node_names_ ABSL_GUARDED_BY(mu_);  // by id
  std::map<std::pair<uint64_t, int32_t>, uint32_t> node_of_rank_ ABSL_GUARDED_BY(mu_);
  std::deque<Bucket> buckets_ ABSL_GUARDED_BY(mu_);  // oldest first
  uint64_t late_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t clock_ahead_batches_ ABSL_GUARDED_BY(mu_) = 0;
  mutable std::shared_ptr<const FabricPlacement> placement_ ABSL_GUARDED_BY(mu_);  // null: stale
};

// The leaf x leaf traffic of a snapshot: rows the source leaf, columns the destination, values
// bytes per second (exporters/heatmap renders it next to /heatmap/nodes).
HeatmapModel LeavesHeatmap(const FabricSnapshot& s);

}  // namespace fabricscope::exporters

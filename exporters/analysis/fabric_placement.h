#pragma once

// Which leaf each node hangs on, and each leaf's uplink capacity: the fabric model's placement
// (exporters/analysis/fabric_model.h FabricModel::Placement), as the cross-rank cause rules
// read it (the fabric_oversubscribed rule, collective_cause.h).

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace fabricscope::exporters {

using RankLeaves = std::map<std::pair<uint64_t, int32_t>, int>;  // (comm, rank) -> leaf index

// Where a rank sits: the leaf of its own ports where known, else its node's leaf where the node
// reaches one leaf (node_leaf, -1 unknown); -1 on a node reaching several (node_multi_leaf).
inline int RankLeaf(const RankLeaves& leaf_of_rank, std::pair<uint64_t, int32_t> rank,
                    int node_leaf, bool node_multi_leaf) {
  if (auto it = leaf_of_rank.find(rank); it != leaf_of_rank.end()) return it->second;
  return node_multi_leaf ? -1 : node_leaf;
}

struct FabricPlacement {
  struct Leaf {
    std::string name;
    double uplink_bytes_per_second = 0;  // one direction; 0 = not stated
  };
  std::vector<Leaf> leaves;
  std::map<std::string, int> leaf_of_node;  // index into leaves
  // (communicator, rank) -> index into leaves, for ranks whose own RDMA ports' leaves are known
  // (their process's queue pairs, GpuProducer.rdma_ports): on a rail-optimized fabric a node's
  // ranks sit on different leaves.
  RankLeaves leaf_of_rank;
  // Nodes whose ports reach several leaves: a rank there without its own placement is on one of
  // them, which is not known.
  std::set<std::string> multi_leaf_nodes;
  // The node's leaf index, -1 when unknown.
  int LeafOf(const std::string& node) const {
    auto it = leaf_of_node.find(node);
    return it != leaf_of_node.end() ? it->second : -1;
  }
  // The rank's own leaf, else its node's where the node reaches one leaf; -1 otherwise.
  int LeafOfRank(uint64_t comm, int32_t rank, const std::string& node) const {
    return RankLeaf(leaf_of_rank, {comm, rank}, LeafOf(node), multi_leaf_nodes.contains(node));
  }
};

// The placement now; null or empty when no leaf is known.
using FabricPlacementSource = std::function<std::shared_ptr<const FabricPlacement>()>;

}  // namespace fabricscope::exporters

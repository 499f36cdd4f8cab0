#pragma once

// Which leaf each node hangs on, and each leaf's uplink capacity: the fabric model's placement
// (exporters/analysis/fabric_model.h FabricModel::Placement), as the cross-rank cause rules
// read it (the fabric_oversubscribed rule, collective_cause.h).

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace fabricscope::exporters {

struct FabricPlacement {
  struct Leaf {
    std::string name;
    double uplink_bytes_per_second = 0;  // one direction; 0 = not stated
  };
  std::vector<Leaf> leaves;
  std::map<std::string, int> leaf_of_node;  // index into leaves
  // The node's leaf index, -1 when unknown.
  int LeafOf(const std::string& node) const {
    auto it = leaf_of_node.find(node);
    return it != leaf_of_node.end() ? it->second : -1;
  }
};

// The placement now; null or empty when no leaf is known.
using FabricPlacementSource = std::function<std::shared_ptr<const FabricPlacement>()>;

}  // namespace fabricscope::exporters

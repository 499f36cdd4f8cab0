#pragma once

// The fabric's switches as the operator describes them in the aggregator's topology file
// (--topology-file, YAML): the leaves the nodes are cabled to, their uplinks towards the spines
// and the spines. It says what LLDP cannot: capacities, and nodes without lldpd. The format is
// documented in exporters/README.md "Fabric topology"; an example is deploy/config/topology.yaml.
//
//   leaves:
//     - name: leaf-a             # the switch, as LLDP names its chassis (or list chassis:)
//       chassis: [00:11:22:33:44:55]   # other names or ids LLDP may give for it
//       nodes: [gpu001, gpu002]  # nodes cabled to it (LLDP says it where lldpd runs)
//       uplinks: 8               # links towards the spines ...
//       uplink_speed: 400gbit    # ... each (tc units, as --line-rate)
//       # or: downlinks: 32, downlink_speed: 400gbit, oversubscription: 3
//       spines: [spine-1]
//       rail: rail-0             # the rail this leaf belongs to (rail-optimized fabrics)
//   spines:
//     - name: spine-1

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace YAML {
class Node;
}

namespace fabricscope::exporters {

struct FabricLeaf {
  std::string name;
  // Names and ids LLDP may report for this switch (its chassis name, a MAC chassis id): the name
  // always, then the file's chassis list.
  std::vector<std::string> chassis;
  std::vector<std::string> nodes;  // from the file
  std::vector<std::string> spines;
  // Uplink capacity towards the spines, bytes per second (one direction): uplinks x
  // uplink_speed, or downlinks x downlink_speed / oversubscription; 0 = not stated (the leaf's
  // demand ratio is then unknown).
  double uplink_bytes_per_second = 0;
  uint32_t uplinks = 0;
  double oversubscription = 0;  // as stated, 0 = not stated
  // Where the leaf comes from: "file" (the topology file), "ibnetdiscover" (only the IB fabric
  // file, exporters/analysis/ib_fabric.h), "file+ibnetdiscover" (both name it).
  std::string source = "file";
  // The rail the leaf belongs to, "" none: on a rail-optimized fabric NIC i of every node is
  // cabled to a leaf of rail i, and traffic between two ranks whose NICs hang on leaves of one
  // rail stays in that rail's plane.
  std::string rail;
};

struct FabricTopology {
  // At most kMaxLeaves; names unique.
  std::vector<FabricLeaf> leaves;
  std::vector<std::string> spines;
  // node -> index into leaves, from the file's nodes lists (a node listed twice is refused).
  std::map<std::string, size_t> leaf_of_node;
  // LLDP chassis name or id -> index into leaves.
  std::map<std::string, size_t> leaf_of_chassis;
  // From an ibnetdiscover file (MergeIbFabric): (HCA node GUID, port number) -> index into
  // leaves, and "<host> <device>" node descriptions -> index into leaves.
  std::map<std::pair<uint64_t, uint32_t>, size_t> leaf_of_hca_port;
  std::map<std::string, size_t> leaf_of_node_desc;
};

inline constexpr size_t kMaxLeaves = 1024;
inline constexpr size_t kMaxTopologyNodes = 65536;

// Reads a topology document (the map above). Errors (InvalidArgument), each naming the entry:
// not a map; an unknown key (a typo must not silently drop a capacity); a leaf without a name,
// or a name given twice; a node or chassis listed under two leaves; a bad speed (ParseBitRate's
// message); uplinks or downlinks that are not a count in 1..65535; an oversubscription that is
// not a number in [1, 1000] or without downlinks and downlink_speed; both forms of capacity; a
// spine named by a leaf but not listed under spines (when spines are listed); more than
// kMaxLeaves leaves or kMaxTopologyNodes nodes.
absl::StatusOr<FabricTopology> ParseFabricTopology(const YAML::Node& root);

// The file at `path` (collectors/common/yaml_file.h LoadOneYamlDocument: one document, no key
// twice); errors are prefixed with the path. Malformed YAML: InvalidArgument with yaml-cpp's
// message (a topology file holds no secrets).
absl::StatusOr<FabricTopology> LoadFabricTopology(const std::string& path);

}  // namespace fabricscope::exporters

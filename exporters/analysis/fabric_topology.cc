#include "exporters/analysis/fabric_topology.h"

#include <yaml-cpp/yaml.h>

#include <set>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "collectors/common/bit_rate.h"
#include "collectors/common/yaml_file.h"

namespace fabricscope::exporters {
namespace {

absl::Status TopologyError(const std::string& where, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(where, ": ", what));
}

// A list of non-empty strings (a scalar is a list of one).
absl::Status ReadTopologyNames(const YAML::Node& n, const std::string& where,
                               std::vector<std::string>* out) {
  if (n.IsNull()) return absl::OkStatus();
  if (n.IsScalar()) {
    if (n.as<std::string>().empty()) return TopologyError(where, "must be a non-empty name");
    out->push_back(n.as<std::string>());
  }
  if (n.IsMap()) return TopologyError(where, "must be a name or a list of names");
  if (n.IsSequence()) {
    for (const YAML::Node& v : n) {
      if (!v.IsScalar() || v.as<std::string>().empty()) {
        return TopologyError(where, "must be a list of non-empty names");
      }
      out->push_back(v.as<std::string>());
    }
  }
  return absl::OkStatus();
}

absl::Status ReadLinkCount(const YAML::Node& n, const std::string& where, uint32_t* out) {
  uint32_t v = 0;
  if (!n.IsScalar() || !absl::SimpleAtoi(n.as<std::string>(), &v) || v < 1 || v > 65535) {
    return TopologyError(where, "must be a count in 1..65535");
  }
  *out = v;
  return absl::OkStatus();
}

absl::Status ReadLinkSpeed(const YAML::Node& n, const std::string& where,
                           double* bytes_per_second) {
  if (!n.IsScalar()) return TopologyError(where, "must be a speed such as 400gbit");
  absl::StatusOr<uint64_t> r = common::ParseBitRate(n.as<std::string>());
  if (!r.ok()) return TopologyError(where, r.status().message());
  *bytes_per_second = static_cast<double>(*r);
  return absl::OkStatus();
}

// One entry of `leaves:`.
absl::Status ReadTopologyLeaf(const YAML::Node& n, const std::string& where, FabricLeaf* leaf) {
  if (!n.IsMap()) return TopologyError(where, "must be a map with name: and the leaf's fields");
  static const std::set<std::string> kKeys = {
      "name",         "chassis",   "nodes",          "spines",           "uplinks",
      "uplink_speed", "downlinks", "downlink_speed", "oversubscription", "rail"};
  uint32_t downlinks = 0;
  double uplink_speed = 0, downlink_speed = 0;
  for (const auto& kv : n) {
    const std::string key = kv.first.as<std::string>();
    const std::string at = absl::StrCat(where, ".", key);
    const YAML::Node& v = kv.second;
    absl::Status s;
    if (!kKeys.contains(key)) {
      s = TopologyError(at,
                        "unknown key (known: name, chassis, nodes, spines, uplinks, uplink_speed, "
                        "downlinks, downlink_speed, oversubscription, rail)");
    } else if (key == "name") {
      if (!v.IsScalar() || v.as<std::string>().empty())
        s = TopologyError(at, "must be a non-empty name");
      if (s.ok()) leaf->name = v.as<std::string>();
    } else if (key == "rail") {
      if (!v.IsScalar() || v.as<std::string>().empty()) s = TopologyError(at, "must be a name");
      if (s.ok()) leaf->rail = v.as<std::string>();
    } else if (key == "chassis") {
      s = ReadTopologyNames(v, at, &leaf->chassis);
    } else if (key == "nodes") {
      s = ReadTopologyNames(v, at, &leaf->nodes);
    } else if (key == "spines") {
      s = ReadTopologyNames(v, at, &leaf->spines);
    } else if (key == "uplinks") {
      s = ReadLinkCount(v, at, &leaf->uplinks);
    } else if (key == "downlinks") {
      s = ReadLinkCount(v, at, &downlinks);
    } else if (key == "uplink_speed") {
      s = ReadLinkSpeed(v, at, &uplink_speed);
    } else if (key == "downlink_speed") {
      s = ReadLinkSpeed(v, at, &downlink_speed);
    } else if (key == "oversubscription") {
      double r = 0;
      if (!v.IsScalar() || !absl::SimpleAtod(v.as<std::string>(), &r) || !(r >= 1) || r > 1000) {
        s = TopologyError(at,
                          "must be a number in [1, 1000] (downlink capacity over uplink capacity)");
      }
      leaf->oversubscription = r;
    }
    if (!s.ok()) return s;
  }
  if (leaf->name.empty()) return TopologyError(where, "needs a name");
  const bool by_uplinks = leaf->uplinks > 0 || uplink_speed > 0;
  const bool by_ratio = leaf->oversubscription > 0 || downlinks > 0 || downlink_speed > 0;
  if (by_uplinks && by_ratio) {
    return TopologyError(where,
                         "give either uplinks and uplink_speed, or downlinks, downlink_speed and "
                         "oversubscription, not both");
  }
  if (by_uplinks) {
    if (leaf->uplinks == 0 || uplink_speed == 0) {
      return TopologyError(where, "uplinks and uplink_speed go together");
    }
    leaf->uplink_bytes_per_second = leaf->uplinks * uplink_speed;
  } else if (by_ratio) {
    if (leaf->oversubscription == 0 || downlinks == 0 || downlink_speed == 0) {
      return TopologyError(where, "downlinks, downlink_speed and oversubscription go together");
    }
    leaf->uplink_bytes_per_second = downlinks * downlink_speed / leaf->oversubscription;
  }
  leaf->chassis.insert(leaf->chassis.begin(), leaf->name);
  return absl::OkStatus();
}

absl::StatusOr<FabricTopology> ParseTopologyDocument(const YAML::Node& root) {
  FabricTopology t;
  if (root.IsNull()) return t;
  if (!root.IsMap()) return TopologyError("topology", "must be a map with leaves: and spines:");
  std::set<std::string> spines_listed;
  for (const auto& kv : root) {
    const std::string key = kv.first.as<std::string>();
    if (key == "spines") {
      if (!kv.second.IsSequence()) return TopologyError("spines", "must be a list of {name: ...}");
      for (size_t i = 0; i < kv.second.size(); ++i) {
        const YAML::Node& s = kv.second[i];
        const std::string where = absl::StrCat("spines[", i, "]");
        if (!s.IsMap() || !s["name"] || !s["name"].IsScalar() ||
            s["name"].as<std::string>().empty() || s.size() != 1) {
          return TopologyError(where, "must be {name: NAME}");
        }
        if (!spines_listed.insert(s["name"].as<std::string>()).second) {
          return TopologyError(where, "name given twice");
        }
        t.spines.push_back(s["name"].as<std::string>());
      }
    } else if (key == "leaves") {
      if (!kv.second.IsSequence()) return TopologyError("leaves", "must be a list of leaves");
      if (kv.second.size() > kMaxLeaves) {
        return TopologyError("leaves", absl::StrCat("more than ", kMaxLeaves, " leaves"));
      }
      for (size_t i = 0; i < kv.second.size(); ++i) {
        FabricLeaf leaf;
        if (absl::Status s = ReadTopologyLeaf(kv.second[i], absl::StrCat("leaves[", i, "]"), &leaf);
            !s.ok()) {
          return s;
        }
        t.leaves.push_back(std::move(leaf));
      }
    } else {
      return TopologyError(key, "unknown key (known: leaves, spines)");
    }
  }
  size_t nodes = 0;
  for (size_t i = 0; i < t.leaves.size(); ++i) {
    const FabricLeaf& leaf = t.leaves[i];
    const std::string where = absl::StrCat("leaves[", i, "] (", leaf.name, ")");
    for (const std::string& c : leaf.chassis) {
      auto [it, fresh] = t.leaf_of_chassis.emplace(c, i);
      if (!fresh && it->second != i) {
        return TopologyError(where, absl::StrCat("chassis \"", c, "\" is also leaf ",
                                                 t.leaves[it->second].name, "'s"));
      }
    }
    for (const std::string& n : leaf.nodes) {
      auto [it, fresh] = t.leaf_of_node.emplace(n, i);
      if (!fresh) {
        return TopologyError(
            where, absl::StrCat("node \"", n, "\" is also under leaf ", t.leaves[it->second].name));
      }
      if (++nodes > kMaxTopologyNodes) {
        return TopologyError("leaves", absl::StrCat("more than ", kMaxTopologyNodes, " nodes"));
      }
    }
    for (const std::string& s : leaf.spines) {
      if (!spines_listed.empty() && !spines_listed.contains(s)) {
        return TopologyError(where, absl::StrCat("spine \"", s, "\" is not listed under spines"));
      }
    }
  }
  return t;
}

}  // namespace

absl::StatusOr<FabricTopology> ParseFabricTopology(const YAML::Node& root) {
  try {
    return ParseTopologyDocument(root);
  } catch (const std::exception& e) {  // YAML::Exception: a key that is not text
    return TopologyError("topology", e.what());
  }
}

absl::StatusOr<FabricTopology> LoadFabricTopology(const std::string& path) {
  try {
    absl::StatusOr<YAML::Node> doc = common::LoadOneYamlDocument(path);
    if (!doc.ok()) return TopologyError(path, doc.status().message());
    absl::StatusOr<FabricTopology> t = ParseFabricTopology(*doc);
    if (!t.ok()) return TopologyError(path, t.status().message());
    return t;
  } catch (const std::exception& e) {  // YAML::Exception: malformed text, unreadable file
    return TopologyError(path, e.what());
  }
}

}  // namespace fabricscope::exporters

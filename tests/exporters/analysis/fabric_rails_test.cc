// Ranks placed on the leaf of their own NIC, and the rail-local share: a rail-optimized fabric
// (NIC i of every node on a leaf of rail i), where a node's ranks sit on different leaves and
// the node-level placement (the leaf most of the node's ports reach) would be wrong for half
// of them.

#include <yaml-cpp/yaml.h>

#include <cmath>
#include <functional>
#include <map>
#include <memory>

#include "collectors/common/collective_vocabulary.h"
#include "exporters/analysis/fabric_model.h"
#include "exporters/exposition/fabric_render.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace fabricscope::exporters {
namespace {

using ::testing::ElementsAre;

constexpr char kRails[] = R"(
leaves:
  - name: rail0-leaf
    uplinks: 1
    uplink_speed: 8mbit
    rail: rail-0
  - name: rail1-leaf
    uplinks: 1
    uplink_speed: 8mbit
    rail: rail-1
)";

constexpr uint64_t kComm = 0xc0ffee0012345678;
constexpr int64_t kStart = 1'800'000'000'000'000'000;

// Two nodes with two RoCE NICs each, NIC i's LLDP neighbour rail i's leaf; rank 2n+i runs on
// node n with its queue pairs on NIC i (when `qp_ports`), as agent/qp_ports.h reports them.
struct RailCluster {
  std::unique_ptr<FabricModel> m;
  // qp_port(nic): the name the agent gives the port rank 2n+nic has queue pairs on; "" none.
  explicit RailCluster(std::function<std::string(int)> qp_port) : qp_port_(std::move(qp_port)) {
    auto t = ParseFabricTopology(YAML::Load(kRails));
    EXPECT_TRUE(t.ok()) << t.status();
    m = std::make_unique<FabricModel>(std::make_shared<const FabricTopology>(*t),
                                      FabricModelOptions{});
    for (int node = 0; node < 2; ++node) {
      v1::Hello h;
      h.set_node(Name(node));
      for (int nic = 0; nic < 2; ++nic) {
        v1::PortInfo* p = h.add_ports();
        p->set_device("mlx5_" + std::to_string(nic));
        p->set_port(1);
        p->set_rdma(true);
        p->set_netdev("eth" + std::to_string(nic));
      }
      m->OnHello(h);
    }
  }
  static std::string Name(int node) { return "gpu" + std::to_string(node); }
  // One second of traffic: `pairs` (src rank, dst rank) send `bytes` each, cumulative.
  void Round(int round, const std::vector<std::pair<int, int>>& pairs, uint64_t bytes) {
    for (int node = 0; node < 2; ++node) {
      v1::Batch b;
      const int64_t end = kStart + round * 1'000'000'000LL;
      b.set_unix_offset_ns(end - 5'000'000);
      b.set_window_end_ns(5'000'000);
      for (int nic = 0; nic < 2; ++nic) {
        v1::PortWindow* p = b.add_ports();
        p->set_port_index(static_cast<uint32_t>(nic));
        p->mutable_neighbor()->set_chassis_name(nic == 0 ? "rail0-leaf" : "rail1-leaf");
      }
      v1::GpuWindow* g = b.mutable_gpu();
      for (int nic = 0; nic < 2; ++nic) {
        const int rank = 2 * node + nic;
        v1::Communicator* c = g->add_communicators();
        c->set_comm_hash(kComm);
        c->set_rank(rank);
        c->set_pid(1000 + rank);
        v1::GpuProducer* p = g->mutable_ingest()->add_producers();
        p->set_pid(1000 + rank);
        if (const std::string port = qp_port_(nic); !port.empty()) p->add_rdma_ports(port);
      }
      for (const auto& [src, dst] : pairs) {
        if (src / 2 != node) continue;
        v1::RankPairBytes* r = g->add_rank_pairs();
        r->set_comm_hash(kComm);
        r->set_src_rank(src);
        r->set_dst_rank(dst);
        r->set_bytes_total(bytes * static_cast<uint64_t>(round + 1));
      }
      m->OnBatch(Name(node), b, end);
    }
  }
  FabricSnapshot Run(const std::vector<std::pair<int, int>>& pairs, uint64_t bytes) {
    for (int round = 0; round <= 3; ++round) Round(round, pairs, bytes);
    return m->Snapshot(kStart + 4'000'000'000LL, {{kComm, "job-7"}});
  }
  std::function<std::string(int)> qp_port_;
};

std::string OwnNic(int nic) { return "mlx5_" + std::to_string(nic) + ":1"; }

TEST(FabricRailsTest, RankAlignedTrafficStaysOnItsRailAndCrossRailTrafficCrossesTheSpine) {
  // Ranks 0 and 2 are on NIC 0 (rail 0), 1 and 3 on NIC 1 (rail 1).
  RailCluster aligned(OwnNic);
  const FabricSnapshot a = aligned.Run({{0, 2}, {2, 0}, {1, 3}, {3, 1}}, 1'000'000);
  ASSERT_EQ(a.comms.size(), 1u);
  EXPECT_DOUBLE_EQ(a.comms[0].ratio, 1.0);
  EXPECT_DOUBLE_EQ(a.comms[0].rail_ratio, 1.0);
  EXPECT_EQ(a.comms[0].rail_total_bytes, 4u * 3 * 1'000'000);
  ASSERT_EQ(a.jobs.size(), 1u);
  EXPECT_DOUBLE_EQ(a.jobs[0].rail_ratio, 1.0);
  EXPECT_DOUBLE_EQ(a.leaves[0].demand_ratio, 0.0);
  // Every node reaches both leaves.
  EXPECT_THAT(a.multi_leaf_nodes, ElementsAre("gpu0", "gpu1"));

  RailCluster crossed(OwnNic);
  const FabricSnapshot c = crossed.Run({{0, 3}, {3, 0}, {1, 2}, {2, 1}}, 1'000'000);
  ASSERT_EQ(c.comms.size(), 1u);
  EXPECT_DOUBLE_EQ(c.comms[0].ratio, 0.0);
  EXPECT_DOUBLE_EQ(c.comms[0].rail_ratio, 0.0);
  // Each leaf sends 2 MB a second across (0->3, 2->1 from rail 0): 2 MB/s of 1 MB/s uplinks.
  EXPECT_DOUBLE_EQ(c.leaves[0].egress_bytes_per_second, 2e6);
  EXPECT_DOUBLE_EQ(c.leaves[0].demand_ratio, 2.0);
  std::shared_ptr<const FabricPlacement> p = crossed.m->Placement();
  EXPECT_EQ(p->LeafOfRank(kComm, 1, "gpu0"), 1);
  EXPECT_EQ(p->LeafOfRank(kComm, 2, "gpu1"), 0);
  // A rank it has no ports for: its node reaches both leaves, which one it uses is not known.
  EXPECT_EQ(p->LeafOfRank(kComm, 9, "gpu1"), -1);
}

TEST(FabricRailsTest, WithoutItsOwnPortsARankOnAMultiLeafNodeIsUnplaced) {
  // The same cross-rail traffic, but no QP table, or ports the Hello never announced (a lying
  // or confused agent): each node reaches both leaves, so which one a rank sits on is not
  // known. Its bytes are unplaced, not counted local on the node's first leaf.
  for (const auto& qp_port : std::vector<std::function<std::string(int)>>{
           [](int) { return std::string(); },
           [](int nic) { return "mlx5_" + std::to_string(nic + 7) + ":1"; },
           [](int) { return std::string(100'000, 'x'); }}) {
    RailCluster blind(qp_port);
    const FabricSnapshot s = blind.Run({{0, 3}, {3, 0}, {1, 2}, {2, 1}}, 1'000'000);
    EXPECT_TRUE(s.comms.empty());
    EXPECT_EQ(s.unplaced_bytes, 4u * 3 * 1'000'000);
    std::shared_ptr<const FabricPlacement> p = blind.m->Placement();
    EXPECT_TRUE(p->leaf_of_rank.empty());
    EXPECT_EQ(p->LeafOfRank(kComm, 1, "gpu0"), -1);
    EXPECT_GE(p->LeafOf("gpu0"), 0);  // the node is still listed under a leaf
  }
}

TEST(FabricRailsTest, RailSeriesOnlyWhereTheTopologyNamesRails) {
  RailCluster c(OwnNic);
  const FabricSnapshot s = c.Run({{0, 2}, {0, 3}}, 1'000'000);
  std::vector<prometheus::MetricFamily> out;
  AddFabricFamilies(s, &out);
  std::map<std::string, double> got;
  for (const auto& f : out) {
    if (f.name != "fabricscope_traffic_local_ratio") continue;
    for (const auto& m : f.metric) {
      std::string key;
      for (const auto& l : m.label) key += l.name + "=" + l.value + ",";
      got[key] = m.gauge.value;
    }
  }
  const std::string comm = common::CommLabel(kComm);
  ASSERT_TRUE(got.contains("scope=rail,comm=" + comm + ",")) << ::testing::PrintToString(got);
  EXPECT_DOUBLE_EQ(got.at("scope=rail,comm=" + comm + ","), 0.5);
  EXPECT_DOUBLE_EQ(got.at("scope=leaf,comm=" + comm + ","), 0.5);
  EXPECT_DOUBLE_EQ(got.at("scope=rail,job_id=job-7,"), 0.5);
  // No rails in the file: no rail series, and rail_ratio NaN in the snapshot.
  auto t = ParseFabricTopology(YAML::Load("leaves: [{name: rail0-leaf}, {name: rail1-leaf}]"));
  ASSERT_TRUE(t.ok());
  c.m->SetTopology(std::make_shared<const FabricTopology>(*t));
  const FabricSnapshot n = c.m->Snapshot(kStart + 4'000'000'000LL, {{kComm, "job-7"}});
  ASSERT_EQ(n.comms.size(), 1u);
  EXPECT_TRUE(std::isnan(n.comms[0].rail_ratio));
  out.clear();
  AddFabricFamilies(n, &out);
  for (const auto& f : out) {
    for (const auto& m : f.metric) {
      for (const auto& l : m.label) EXPECT_NE(l.value, "rail") << f.name;
    }
  }
}

TEST(FabricRailsTest, ARailNameIsRefusedWhenNotAName) {
  auto t = ParseFabricTopology(YAML::Load("leaves: [{name: a, rail: [x, y]}]"));
  ASSERT_FALSE(t.ok());
  EXPECT_THAT(std::string(t.status().message()), ::testing::HasSubstr("leaves[0].rail"));
}

}  // namespace
}  // namespace fabricscope::exporters

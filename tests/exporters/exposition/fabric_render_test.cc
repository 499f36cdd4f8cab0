// The fabric model through the aggregator's state and what it renders: batches from four nodes
// on two leaves (the topology file for one leaf, LLDP for the other), /metrics families with
// only their declared labels and the communicator's job, and /api/fabric's JSON.

#include "exporters/exposition/fabric_render.h"

#include <google/protobuf/struct.pb.h>
#include <google/protobuf/util/json_util.h>
#include <yaml-cpp/yaml.h>

#include "exporters/exposition/cluster_render.h"
#include "exporters/exposition/metric_catalog.h"
#include "exporters/state/cluster_state.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace fabricscope::exporters {
namespace {

constexpr uint64_t kComm = 0x9f3c1e0a77d2b415ULL;
constexpr int64_t kUnix = 1'800'000'000'000'000'000;

v1::Hello NodeHello(const std::string& node) {
  v1::Hello h;
  h.set_node(node);
  h.set_instance_id(1);
  h.set_resume_seq(1);
  h.set_agent_version("test");
  v1::PortInfo* p = h.add_ports();
  p->set_device("mlx5_0");
  p->set_port(1);
  return h;
}

// Node i hosts rank i of a 4-rank ring 0->1->2->3->0 of job 8812; its send total after `seq`
// batches is seq x 1 MB. Nodes 2 and 3 name their leaf over LLDP only.
v1::Batch NodeBatch(int i, uint64_t seq) {
  v1::Batch b;
  b.set_seq(seq);
  b.set_unix_offset_ns(kUnix);
  b.set_window_end_ns(static_cast<int64_t>(seq) * 1'000'000'000);
  v1::PortWindow* w = b.add_ports();
  w->set_port_index(0);
  if (i >= 2) w->mutable_neighbor()->set_chassis_name("leaf-lldp");
  v1::GpuWindow* g = b.mutable_gpu();
  v1::Communicator* c = g->add_communicators();
  c->set_comm_hash(kComm);
  c->set_rank(i);
  c->set_nranks(4);
  c->set_job_id("8812");
  g->add_jobs()->set_id("8812");
  v1::RankPairBytes* r = g->add_rank_pairs();
  r->set_comm_hash(kComm);
  r->set_src_rank(i);
  r->set_dst_rank((i + 1) % 4);
  r->set_bytes_total(seq * 1'000'000);
  return b;
}

class FabricRenderTest : public ::testing::Test {
 protected:
  FabricRenderTest() : state_(Options()) {
    for (int i = 0; i < 4; ++i) {
      const std::string node = "n" + std::to_string(i);
      EXPECT_TRUE(state_.OnHello(NodeHello(node)).ok());
      for (uint64_t seq = 1; seq <= 3; ++seq) {
        EXPECT_TRUE(state_.OnBatch(node, 1, NodeBatch(i, seq)).ok());
      }
    }
  }
  static ClusterState::Options Options() {
    ClusterState::Options o;
    auto t = ParseFabricTopology(YAML::Load(
        "leaves: [{name: leaf-file, nodes: [n0, n1], uplinks: 1, uplink_speed: 8mbit}]"));
    EXPECT_TRUE(t.ok()) << t.status();
    o.topology = std::make_shared<const FabricTopology>(*t);
    o.now = [] { return absl::FromUnixNanos(kUnix + 3'000'000'000); };
    return o;
  }
  ClusterState state_;
};

TEST_F(FabricRenderTest, MetricsCarryTheDeclaredLabelsAndTheJob) {
  const std::vector<prometheus::MetricFamily> all = ClusterFamilies(state_);
  EXPECT_TRUE(UndeclaredLabels(all).empty());
  std::map<std::string, double> got;
  for (const auto& f : all) {
    for (const auto& m : f.metric) {
      std::string key = f.name;
      for (const auto& l : m.label) key += "," + l.name + "=" + l.value;
      got[key] = m.gauge.value;
    }
  }
  // Two batches after the baseline, 1 MB per hop each, in the two buckets that hold them:
  // n1->n2 leaves leaf-file and n3->n0 enters it, 1 MB/s each way against 1 MB/s.
  EXPECT_DOUBLE_EQ(got.at("fabricscope_leaf_uplink_demand_ratio,leaf=leaf-file"), 1.0);
  EXPECT_DOUBLE_EQ(
      got.at("fabricscope_leaf_uplink_bytes_per_second,leaf=leaf-lldp,direction=transmit"), 1e6);
  EXPECT_FALSE(got.contains("fabricscope_leaf_uplink_demand_ratio,leaf=leaf-lldp"));
  EXPECT_DOUBLE_EQ(got.at("fabricscope_traffic_local_ratio,scope=leaf,comm=9f3c1e0a,job_id=8812"),
                   0.5);
  EXPECT_DOUBLE_EQ(got.at("fabricscope_traffic_local_ratio,scope=leaf,job_id=8812"), 0.5);
  EXPECT_EQ(got.at("fabricscope_topology_disagreements"), 0);
}

TEST_F(FabricRenderTest, ApiFabricIsJsonWithTheLeavesAndShares) {
  google::protobuf::Struct root;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(FabricJson(state_.Fabric()), &root).ok());
  const auto& leaves = root.fields().at("leaves").list_value().values();
  ASSERT_EQ(leaves.size(), 2);
  const auto& file = leaves[0].struct_value().fields();
  EXPECT_EQ(file.at("name").string_value(), "leaf-file");
  EXPECT_EQ(file.at("nodes").list_value().values_size(), 2);
  EXPECT_EQ(leaves[1].struct_value().fields().at("source").string_value(), "lldp");
  // No capacity: null, not 0.
  EXPECT_EQ(leaves[1].struct_value().fields().at("demand_ratio").kind_case(),
            google::protobuf::Value::kNullValue);
  const auto& local = root.fields().at("local").list_value().values();
  ASSERT_EQ(local.size(), 2);
  EXPECT_EQ(local[0].struct_value().fields().at("comm").string_value(), "9f3c1e0a");
  EXPECT_EQ(local[1].struct_value().fields().at("job").string_value(), "8812");
  EXPECT_EQ(local[1].struct_value().fields().at("total_bytes").number_value(), 8e6);
  const HeatmapModel h = LeavesHeatmap(state_.Fabric());
  EXPECT_FLOAT_EQ(h.at(0, 1), 1e6f);
}

}  // namespace
}  // namespace fabricscope::exporters

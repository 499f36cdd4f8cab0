// The fabric model: the topology file's parse, nodes placed on leaves from the file and from
// LLDP, and the leaf-local share and uplink demand worked out from rank-pair totals.

#include "exporters/analysis/fabric_model.h"

#include <yaml-cpp/yaml.h>

#include <cmath>
#include <fstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace fabricscope::exporters {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

absl::StatusOr<FabricTopology> Parse(const std::string& yaml) {
  return ParseFabricTopology(YAML::Load(yaml));
}

constexpr char kTwoLeaves[] = R"(
leaves:
  - name: leaf-a
    nodes: [n0, n1]
    uplinks: 2
    uplink_speed: 10gbit
    spines: [spine-1]
  - name: leaf-b
    chassis: ["02:00:00:00:00:0b"]
    nodes: [n2, n3]
    downlinks: 4
    downlink_speed: 10gbit
    oversubscription: 2
    spines: [spine-1]
spines:
  - name: spine-1
)";

TEST(FabricTopologyTest, ReadsLeavesCapacitiesAndChassis) {
  absl::StatusOr<FabricTopology> t = Parse(kTwoLeaves);
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_EQ(t->leaves.size(), 2u);
  EXPECT_EQ(t->leaves[0].uplink_bytes_per_second, 2 * 1.25e9);  // 2 x 10 Gb/s
  EXPECT_EQ(t->leaves[1].uplink_bytes_per_second, 4 * 1.25e9 / 2);
  EXPECT_THAT(t->leaves[1].chassis, ElementsAre("leaf-b", "02:00:00:00:00:0b"));
  EXPECT_EQ(t->leaf_of_node.at("n3"), 1u);
  EXPECT_EQ(t->leaf_of_chassis.at("02:00:00:00:00:0b"), 1u);
  EXPECT_THAT(t->spines, ElementsAre("spine-1"));
  EXPECT_TRUE(Parse("").ok());  // no file content: no leaves
}

TEST(FabricTopologyTest, RefusesWhatWouldSilentlyMisplaceOrMiscount) {
  const std::pair<const char*, const char*> cases[] = {
      {"leaves: [{name: a, uplink: 2}]", "leaves[0].uplink: unknown key"},
      {"leaves: [{name: a, nodes: [x]}, {name: b, nodes: [x]}]", "node \"x\" is also under"},
      {"leaves: [{name: a}, {name: b, chassis: [a]}]", "chassis \"a\" is also leaf a's"},
      {"leaves: [{name: a, uplinks: 2}]", "uplinks and uplink_speed go together"},
      {"leaves: [{name: a, uplinks: 2, uplink_speed: fast}]", "bad line rate"},
      {"leaves: [{name: a, uplinks: 0, uplink_speed: 1gbit}]", "count in 1..65535"},
      {"leaves: [{name: a, uplinks: 1, uplink_speed: 1g, oversubscription: 3}]", "not both"},
      {"leaves: [{name: a, oversubscription: 0.5}]", "[1, 1000]"},
      {"leaves: [{name: a, spines: [s9]}]\nspines: [{name: s1}]", "not listed under spines"},
      {"leaves: [{nodes: [x]}]", "needs a name"},
      {"leaf: []", "leaf: unknown key"},
      {"[1, 2]", "must be a map"},
  };
  for (const auto& [yaml, want] : cases) {
    absl::StatusOr<FabricTopology> t = Parse(yaml);
    ASSERT_FALSE(t.ok()) << yaml;
    EXPECT_THAT(std::string(t.status().message()), HasSubstr(want)) << yaml;
  }
}

TEST(FabricTopologyTest, LoadNamesTheFile) {
  const std::string path = ::testing::TempDir() + "/topology_bad.yaml";
  std::ofstream(path) << "leaves: [{name: a}\n";  // unclosed flow sequence
  absl::StatusOr<FabricTopology> t = LoadFabricTopology(path);
  ASSERT_FALSE(t.ok());
  EXPECT_THAT(std::string(t.status().message()), HasSubstr(path));
  EXPECT_FALSE(LoadFabricTopology(::testing::TempDir() + "/no_such_topology.yaml").ok());
}

// One node's batch: its communicators' ranks and its cumulative rank-pair totals.
struct NodeBatch {
  std::vector<std::pair<uint64_t, int32_t>> ranks;
  std::vector<std::tuple<uint64_t, int32_t, int32_t, uint64_t>> totals;
  std::string chassis;  // its one port's LLDP neighbour, "" none
  int64_t end_unix_ns = 0;
};

v1::Batch MakeBatch(const NodeBatch& nb) {
  v1::Batch b;
  b.set_unix_offset_ns(nb.end_unix_ns - 5'000'000);
  b.set_window_end_ns(5'000'000);
  v1::PortWindow* p = b.add_ports();
  if (!nb.chassis.empty()) p->mutable_neighbor()->set_chassis_name(nb.chassis);
  v1::GpuWindow* g = b.mutable_gpu();
  for (const auto& [comm, rank] : nb.ranks) {
    v1::Communicator* c = g->add_communicators();
    c->set_comm_hash(comm);
    c->set_rank(rank);
  }
  for (const auto& [comm, src, dst, bytes] : nb.totals) {
    v1::RankPairBytes* r = g->add_rank_pairs();
    r->set_comm_hash(comm);
    r->set_src_rank(src);
    r->set_dst_rank(dst);
    r->set_bytes_total(bytes);
  }
  return b;
}

constexpr int64_t kT0 = 1'800'000'000'000'000'000;
constexpr uint64_t kRing = 0xaa, kScatter = 0xbb;

// Four nodes, one rank each of two communicators: kRing in rank order 0->1->2->3->0 (two of
// four hops stay on a leaf), kScatter 0->2->1->3->0 (every hop crosses). Each hop sends
// `per_hop` bytes per round; `rounds` batches one second apart after the baseline.
std::unique_ptr<FabricModel> RunRings(std::shared_ptr<const FabricTopology> topo, uint64_t per_hop,
                                      int rounds, const std::vector<std::string>& chassis = {}) {
  auto m = std::make_unique<FabricModel>(std::move(topo), FabricModelOptions{});
  const int ring_next[4] = {1, 2, 3, 0};
  const int scatter_next[4] = {2, 3, 1, 0};
  for (int round = 0; round <= rounds; ++round) {
    for (int node = 0; node < 4; ++node) {
      NodeBatch nb;
      nb.ranks = {{kRing, node}, {kScatter, node}};
      const uint64_t total = per_hop * static_cast<uint64_t>(round + 1);
      nb.totals = {{kRing, node, ring_next[node], total},
                   {kScatter, node, scatter_next[node], total}};
      nb.chassis = chassis.empty() ? "" : chassis[node];
      nb.end_unix_ns = kT0 + round * 1'000'000'000LL + node;
      m->OnBatch("n" + std::to_string(node), MakeBatch(nb), nb.end_unix_ns);
    }
  }
  return m;
}

TEST(FabricModelTest, LocalShareAndUplinkDemandFromRankPairs) {
  auto topo = std::make_shared<FabricTopology>(*Parse(kTwoLeaves));
  const uint64_t per_hop = 1'000'000'000;  // 1 GB a second per hop
  auto m = RunRings(topo, per_hop, 4);
  const FabricSnapshot s =
      m->Snapshot(kT0 + 5'000'000'000LL, {{kRing, "job-ring"}, {kScatter, "job-scatter"}});
  ASSERT_EQ(s.leaves.size(), 2u);
  EXPECT_THAT(s.leaves[0].nodes, ElementsAre("n0", "n1"));
  // The first batch set the baseline: 4 rounds after it, in the 4 buckets that hold traffic.
  EXPECT_DOUBLE_EQ(s.seconds, 4.0);
  ASSERT_EQ(s.comms.size(), 2u);
  for (const FabricSnapshot::Local& c : s.comms) {
    EXPECT_EQ(c.total_bytes, 4 * 4 * per_hop);
    EXPECT_DOUBLE_EQ(c.ratio, c.comm == kRing ? 0.5 : 0.0) << c.comm;
  }
  ASSERT_EQ(s.jobs.size(), 2u);
  EXPECT_EQ(s.jobs[0].job, "job-ring");  // equal bytes: by name
  EXPECT_DOUBLE_EQ(s.jobs[0].ratio, 0.5);
  // Leaf a sends n1->n2 (ring) and n0->n2, n1->n3 (scatter): 3 GB a round out; receives
  // n3->n0 twice and n2->n1: 3 GB in.
  const double out = 3.0 * per_hop;
  EXPECT_DOUBLE_EQ(s.leaves[0].egress_bytes_per_second, out);
  EXPECT_DOUBLE_EQ(s.leaves[0].ingress_bytes_per_second, out);
  EXPECT_DOUBLE_EQ(s.leaves[0].demand_ratio, out / 2.5e9);
  EXPECT_DOUBLE_EQ(s.leaves[1].demand_ratio, out / 2.5e9);
  EXPECT_DOUBLE_EQ(s.leaf_bytes[0][0], 4.0 * per_hop);  // n0->n1 of the ring, 4 rounds
  const HeatmapModel h = LeavesHeatmap(s);
  EXPECT_THAT(h.rows, ElementsAre("leaf-a", "leaf-b"));
  EXPECT_FLOAT_EQ(h.at(0, 1), static_cast<float>(out));
  EXPECT_EQ(s.unplaced_bytes, 0u);
}

TEST(FabricModelTest, LldpWinsOverTheFileAndTheDifferenceIsReported) {
  auto topo = std::make_shared<FabricTopology>(*Parse(kTwoLeaves));
  // n1 is cabled to leaf-b (by its chassis id), not leaf-a as the file says.
  auto m = RunRings(topo, 1000, 2, {"leaf-a", "02:00:00:00:00:0b", "", "leaf-b"});
  const FabricSnapshot s = m->Snapshot(kT0 + 3'000'000'000LL, {});
  ASSERT_EQ(s.disagreements.size(), 1u);
  EXPECT_EQ(s.disagreements[0].node, "n1");
  EXPECT_EQ(s.disagreements[0].file_leaf, "leaf-a");
  EXPECT_EQ(s.disagreements[0].cable_leaf, "leaf-b");
  EXPECT_EQ(s.disagreements[0].cable_switch, "02:00:00:00:00:0b");
  EXPECT_EQ(s.disagreements[0].cable_source, "lldp");
  EXPECT_THAT(s.leaves[0].nodes, ElementsAre("n0"));
  EXPECT_THAT(s.leaves[1].nodes, ElementsAre("n1", "n2", "n3"));
  // The ring's local hops are now 1->2 and 2->3.
  ASSERT_EQ(s.comms.size(), 2u);
  for (const FabricSnapshot::Local& c : s.comms) {
    if (c.comm == kRing) {
      EXPECT_DOUBLE_EQ(c.ratio, 0.5);
    }
  }
}

TEST(FabricModelTest, LldpAloneNamesLeavesWithoutCapacity) {
  auto m = RunRings(nullptr, 1000, 2, {"sw1", "sw1", "sw2", "sw2"});
  const FabricSnapshot s = m->Snapshot(kT0 + 3'000'000'000LL, {});
  ASSERT_EQ(s.leaves.size(), 2u);
  EXPECT_EQ(s.leaves[0].source, "lldp");
  EXPECT_TRUE(std::isnan(s.leaves[0].demand_ratio));
  EXPECT_GT(s.leaves[0].egress_bytes_per_second, 0);
}

TEST(FabricModelTest, NodesWithoutALeafAreCountedUnplaced) {
  auto m = RunRings(nullptr, 1000, 2);
  const FabricSnapshot s = m->Snapshot(kT0 + 3'000'000'000LL, {});
  EXPECT_TRUE(s.leaves.empty());
  EXPECT_EQ(s.unplaced_bytes, 2u * 2 * 4 * 1000);
  EXPECT_TRUE(s.comms.empty());
  EXPECT_FALSE(LeavesHeatmap(s).note.empty());
}

TEST(FabricModelTest, RestartCountsWholeAndOldBucketsAgeOut) {
  auto topo = std::make_shared<FabricTopology>(*Parse(kTwoLeaves));
  FabricModel m(topo, FabricModelOptions{});
  auto send = [&](int64_t t, uint64_t total) {
    NodeBatch a{{{kRing, 0}}, {{kRing, 0, 1, total}}, "", t};
    NodeBatch b{{{kRing, 1}}, {}, "", t};
    m.OnBatch("n1", MakeBatch(b), t);
    m.OnBatch("n0", MakeBatch(a), t);
  };
  send(kT0, 5000);                  // baseline
  send(kT0 + 1'000'000'000, 8000);  // +3000
  send(kT0 + 2'000'000'000, 1000);  // the agent restarted: +1000
  FabricSnapshot s = m.Snapshot(kT0 + 3'000'000'000LL, {});
  ASSERT_EQ(s.comms.size(), 1u);
  EXPECT_EQ(s.comms[0].total_bytes, 4000u);
  EXPECT_DOUBLE_EQ(s.comms[0].ratio, 1.0);
  // 20 s later, past the 10 s horizon: nothing left.
  s = m.Snapshot(kT0 + 23'000'000'000LL, {});
  EXPECT_TRUE(s.comms.empty());
}

TEST(FabricModelTest, BoundedBucketCountsWhatItDrops) {
  auto topo = std::make_shared<FabricTopology>(*Parse(kTwoLeaves));
  FabricModelOptions o;
  o.max_pairs_per_bucket = 3;
  FabricModel m(topo, o);
  uint64_t sent = 0;
  for (int round = 0; round < 2; ++round) {
    for (int node = 0; node < 4; ++node) {
      NodeBatch nb;
      nb.end_unix_ns = kT0 + round * 10;  // one bucket
      for (uint64_t comm = 1; comm <= 5; ++comm) {
        nb.ranks.push_back({comm, node});
        nb.totals.push_back({comm, node, (node + 1) % 4, (round + 1) * 100 * comm});
        if (round == 1) sent += 100 * comm;
      }
      m.OnBatch("n" + std::to_string(node), MakeBatch(nb), nb.end_unix_ns);
    }
  }
  const FabricSnapshot s = m.Snapshot(kT0 + 1'000'000'000LL, {});
  uint64_t kept = 0;
  for (const auto& c : s.comms) kept += c.total_bytes;
  EXPECT_EQ(kept + s.dropped_bytes, sent);
  EXPECT_GT(s.dropped_bytes, 0u);
}

// One node's clock an hour ahead counts now and moves nothing; a batch older than the horizon
// (a spool replayed after an outage) is counted late, not piled into the current bucket.
TEST(FabricModelTest, TheAggregatorsClockBoundsTheAgents) {
  auto topo = std::make_shared<FabricTopology>(*Parse(kTwoLeaves));
  FabricModel m(topo, FabricModelOptions{});
  auto send = [&](const std::string& node, int rank, int64_t batch_t, uint64_t total, int64_t now) {
    NodeBatch nb{{{kRing, rank}}, {{kRing, rank, (rank + 1) % 2, total}}, "", batch_t};
    m.OnBatch(node, MakeBatch(nb), now);
  };
  send("n0", 0, kT0, 0, kT0);
  send("n1", 1, kT0, 0, kT0);
  send("n0", 0, kT0 + 3'600'000'000'000, 1000, kT0 + 1'000'000'000);  // an hour ahead
  send("n0", 0, kT0 - 60'000'000'000, 1500, kT0 + 1'000'000'000);     // a minute behind
  const FabricSnapshot s = m.Snapshot(kT0 + 2'000'000'000, {});
  ASSERT_EQ(s.comms.size(), 1u);
  EXPECT_EQ(s.comms[0].total_bytes, 1000u);
  EXPECT_EQ(s.late_bytes, 500u);
  EXPECT_EQ(s.clock_ahead_batches, 1u);
  EXPECT_DOUBLE_EQ(s.seconds, 1.0);
}

// The totals are the last batch's: a pair the agent stopped listing and lists again from 0 (its
// communicator evicted) counts whole; one listed throughout counts its growth only.
TEST(FabricModelTest, TotalsFollowWhatTheAgentLists) {
  auto topo = std::make_shared<FabricTopology>(*Parse(kTwoLeaves));
  FabricModel m(topo, FabricModelOptions{});
  auto send = [&](int64_t t, std::vector<std::tuple<uint64_t, int32_t, int32_t, uint64_t>> p) {
    m.OnBatch("n1", MakeBatch(NodeBatch{{{kRing, 1}, {kScatter, 1}}, {}, "", t}), t);
    m.OnBatch("n0", MakeBatch(NodeBatch{{{kRing, 0}, {kScatter, 0}}, p, "", t}), t);
  };
  send(kT0, {{kRing, 0, 1, 100}, {kScatter, 0, 1, 100}});
  send(kT0 + 1'000'000'000, {{kRing, 0, 1, 150}});                        // kScatter gone
  send(kT0 + 2'000'000'000, {{kRing, 0, 1, 170}, {kScatter, 0, 1, 40}});  // back, from 0
  const FabricSnapshot s = m.Snapshot(kT0 + 3'000'000'000, {});
  ASSERT_EQ(s.comms.size(), 2u);
  EXPECT_EQ(s.comms[0].comm, kRing);
  EXPECT_EQ(s.comms[0].total_bytes, 70u);
  EXPECT_EQ(s.comms[1].total_bytes, 40u);
}

// A communicator a node no longer lists stays placed for a horizon, then goes; a forgotten node
// takes its placements along; the placement follows LLDP.
TEST(FabricModelTest, PlacementsAgeOutAndFollowTheCables) {
  auto topo = std::make_shared<FabricTopology>(*Parse(kTwoLeaves));
  FabricModel m(topo, FabricModelOptions{});
  auto batch = [&](const std::string& node, std::vector<std::pair<uint64_t, int32_t>> ranks,
                   std::vector<std::tuple<uint64_t, int32_t, int32_t, uint64_t>> pairs,
                   const std::string& chassis, int64_t t) {
    m.OnBatch(node, MakeBatch(NodeBatch{ranks, pairs, chassis, t}), t);
  };
  batch("n2", {{kRing, 1}}, {}, "", kT0);
  batch("n0", {{kRing, 0}}, {{kRing, 0, 1, 0}}, "", kT0);
  EXPECT_EQ(m.Placement()->LeafOf("n2"), 1);
  batch("n2", {}, {}, "leaf-a", kT0 + 5'000'000'000);  // recabled; kRing's rank 1 left
  EXPECT_EQ(m.Placement()->LeafOf("n2"), 0);
  batch("n0", {{kRing, 0}}, {{kRing, 0, 1, 100}}, "", kT0 + 6'000'000'000);
  // Within the horizon rank 1 is still n2's; past it, unplaced.
  FabricSnapshot s = m.Snapshot(kT0 + 7'000'000'000, {});
  ASSERT_EQ(s.comms.size(), 1u);
  EXPECT_DOUBLE_EQ(s.comms[0].ratio, 1.0);  // n0 and n2 both on leaf-a now
  batch("n2", {}, {}, "leaf-a", kT0 + 17'000'000'000);
  batch("n0", {{kRing, 0}}, {{kRing, 0, 1, 300}}, "", kT0 + 17'000'000'000);
  s = m.Snapshot(kT0 + 18'000'000'000, {});
  EXPECT_TRUE(s.comms.empty());
  EXPECT_EQ(s.unplaced_bytes, 200u);
  m.Forget("n2");
  EXPECT_EQ(m.Placement()->LeafOf("n2"), 1);  // the file's leaf again
}

}  // namespace
}  // namespace fabricscope::exporters

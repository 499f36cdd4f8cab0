// The fabric_oversubscribed rule (exporters/analysis/collective_cause.h LeafUplinks): a ring
// all-reduce over two leaves whose uplinks carried its cross-leaf traffic near their capacity,
// against the same ring with room on the uplinks, a saturated host port, and no placement.

#include <memory>

#include "exporters/analysis/collective_cause.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace fabricscope::exporters {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kCauseT0 = 1'800'000'000'000'000'000;

class FabricCauseTest : public ::testing::Test {
 protected:
  // Two leaves of `capacity` bytes/s uplinks: n0, n1 on leaf-a; n2, n3 on leaf-b.
  static FabricPlacementSource TwoLeaves(double capacity) {
    auto p = std::make_shared<FabricPlacement>();
    p->leaves = {{"leaf-a", capacity}, {"leaf-b", capacity}};
    p->leaf_of_node = {{"n0", 0}, {"n1", 0}, {"n2", 1}, {"n3", 1}};
    return [p] { return p; };
  }
  // A 4-rank ring all-reduce, rank i on node `nodes[i]`, each rank sending its bus bytes
  // (S x 2(n-1)/n, nccl-tests) to rank next[i] over one second after all arrived together.
  CollectiveInstance Ring(const int next[4], const char* const nodes[4], double bus_bytes) {
    CollectiveInstance d;
    d.key.comm = 0xc0;
    d.key.func = *names_.Intern("AllReduce");
    d.key.seq = 7;
    d.nranks = 4;
    for (int i = 0; i < 4; ++i) {
      RankEntry r;
      r.rank = i;
      r.node = *names_.Intern(nodes[i]);
      r.port = *names_.Intern("mlx5_0:1");
      r.cause = v1::COLLECTIVE_CAUSE_NORMAL;
      r.start_unix_ns = kCauseT0;
      r.end_unix_ns = kCauseT0 + 1'000'000'000;
      r.bus_bytes = bus_bytes;
      r.bytes = static_cast<uint64_t>(bus_bytes * 4 / 6);
      r.send_peers = {next[i], -1};
      d.ranks.push_back(r);
    }
    d.max_duration_ns = 1'000'000'000;
    return d;
  }
  v1::CollectiveCause Classify(CollectiveInstance& d, FabricPlacementSource fabric) {
    CrossRankOptions o;
    o.fabric = std::move(fabric);
    CauseClassifier c(o);
    Diagnosis diagnosis;
    c.Classify(d, InstanceTimes{kCauseT0, kCauseT0 + 1'000'000'000, 1'000'000'000}, diagnosis);
    return d.cause;
  }
  NameTable names_{1000};
  static constexpr int kRing[4] = {1, 2, 3, 0};
  static constexpr const char* kNodes[4] = {"n0", "n1", "n2", "n3"};
};

TEST_F(FabricCauseTest, RingAcrossFullUplinksNamesTheLeaf) {
  // 1 MB/s of uplink each way per leaf; the ring's hops n1->n2 and n3->n0 carry 0.9 MB in 1 s.
  CollectiveInstance d = Ring(kRing, kNodes, 0.9e6);
  EXPECT_EQ(Classify(d, TwoLeaves(1e6)), v1::COLLECTIVE_CAUSE_FABRIC_OVERSUBSCRIBED);
  EXPECT_EQ(d.rule, EvidenceRule::kLeafUplinks);
  // Rank 1 sends across (n1 -> n2), rank 0 receives across (n3 -> n0), as much: the lower.
  ASSERT_EQ(d.bottleneck, 0);
  EXPECT_THAT(d.evidence, HasSubstr("leaf leaf-a's uplinks carried 0.0072 Gb/s"));
  EXPECT_THAT(d.evidence, HasSubstr("90% of their 0.008 Gb/s"));
}

TEST_F(FabricCauseTest, RoomOnTheUplinksOrALocalRingIsNotTheFabric) {
  CollectiveInstance d = Ring(kRing, kNodes, 0.7e6);  // 70% of capacity: below 0.8
  EXPECT_NE(Classify(d, TwoLeaves(1e6)), v1::COLLECTIVE_CAUSE_FABRIC_OVERSUBSCRIBED);
  // Every rank on one leaf: nothing crosses, however full the ring.
  const char* const one_leaf[4] = {"n0", "n1", "n0", "n1"};
  CollectiveInstance local = Ring(kRing, one_leaf, 5e6);
  EXPECT_NE(Classify(local, TwoLeaves(1e6)), v1::COLLECTIVE_CAUSE_FABRIC_OVERSUBSCRIBED);
}

TEST_F(FabricCauseTest, ASaturatedHostPortOrNoPlacementComesFirst) {
  CollectiveInstance d = Ring(kRing, kNodes, 0.9e6);
  d.ranks[2].cause = v1::COLLECTIVE_CAUSE_NETWORK_SATURATED;
  d.ranks[2].saturated_ratio = 0.6;
  EXPECT_EQ(Classify(d, TwoLeaves(1e6)), v1::COLLECTIVE_CAUSE_NETWORK_SATURATED);
  CollectiveInstance unplaced = Ring(kRing, kNodes, 0.9e6);
  EXPECT_NE(Classify(unplaced, nullptr), v1::COLLECTIVE_CAUSE_FABRIC_OVERSUBSCRIBED);
  // Leaves without a stated capacity name nothing.
  CollectiveInstance no_capacity = Ring(kRing, kNodes, 0.9e6);
  EXPECT_NE(Classify(no_capacity, TwoLeaves(0)), v1::COLLECTIVE_CAUSE_FABRIC_OVERSUBSCRIBED);
}

}  // namespace
}  // namespace fabricscope::exporters

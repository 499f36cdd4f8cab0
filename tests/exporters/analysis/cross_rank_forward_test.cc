// Sharded aggregators (issue 18): an owner matches the records a peer forwards exactly as it
// would have matched them from the nodes' own batches.

#include <algorithm>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "exporters/analysis/cross_rank.h"
#include "exporters/exposition/cross_rank_render.h"
#include "exporters/shard/peer_ring.h"
#include "gtest/gtest.h"
#include "tests/common/units.h"
#include "tests/exporters/analysis/cross_rank_test_util.h"

namespace fabricscope::exporters {
namespace {

constexpr int kRanks = 4;

std::vector<Peer> TwoPeers() {
  return {{"10.0.0.1:50051", "10.0.0.1:9400"}, {"10.0.0.2:50051", "10.0.0.2:9400"}};
}

// A communicator hash whose owner among TwoPeers() is `owner`.
uint64_t CommOwnedBy(size_t owner) {
  const PeerRing ring(TwoPeers(), 0);
  for (uint64_t label = 1;; ++label) {
    if (ring.OwnerOfLabel(static_cast<uint32_t>(label)) == owner) return label << 32 | 0x5eed;
  }
}

v1::Hello HelloOf(int node) {
  v1::Hello h;
  h.set_node(absl::StrCat("node", node));
  v1::PortInfo* p = h.add_ports();
  p->set_device(absl::StrCat("mlx5_", node));
  p->set_port(1);
  p->set_rdma(true);
  return h;
}

// Node `node`'s batch of instance `seq` of `comm` (rank = node): rank 3 starts 30 ms late (a
// persistent straggler); rank 1 is lossy on every fifth instance, and slow with a recording.
v1::Batch BatchOf(int node, uint64_t comm, uint64_t seq) {
  v1::Batch b;
  const RankSchedule schedule{.nranks = kRanks,
                              .period_ns = 300 * kMs,
                              .skew_ns = 7 * kMs,  // each node's own clock
                              .unix_base_ns = 1'000'000'000'000,
                              .late_rank = 3,
                              .late_ns = 30 * kMs};
  v1::Collective* c = AddRankCollective(schedule, node, comm, seq, &b);
  const int64_t start = c->start_ns();
  v1::CollectiveAnalysis* a = c->mutable_analysis();
  const bool lossy = node == 1 && seq % 5 == 0;
  if (lossy) a->set_cause(v1::COLLECTIVE_CAUSE_NETWORK_LOSSY);
  a->set_detail(absl::StrCat("mlx5_", node, ":1 seq ", seq));
  a->set_slow(lossy);
  a->mutable_ports(0)->set_retransmits(lossy ? 12 : 0);
  if (lossy) {
    v1::FlightRecording* r = b.add_flight_recordings();
    r->set_reason("slow_collective");
    r->set_from_ns(start - kMs);
    r->set_to_ns(start + 201 * kMs);
    r->add_time_ns(start);
    r->add_transmit_bytes(4096);
  }
  return b;
}

std::map<std::string, double> Scores(const CrossRankAnalysis& x) {
  std::vector<prometheus::MetricFamily> f;
  AddCrossRankFamilies(x.Snapshot(), &f);
  std::map<std::string, double> out;
  for (const auto& fam : f) {
    if (fam.name != "fabricscope_straggler_score") continue;
    for (const auto& m : fam.metric) {
      out[absl::StrCat(m.label[0].value, "/", m.label[1].value)] = m.gauge.value;
    }
  }
  return out;
}

// Nodes 0 and 1 stream to peer 0, nodes 2 and 3 to peer 1; the communicator is owned by one of
// them. Batches arrive in a seeded random order, and forwarded records are delivered in random
// chunks at random times (before or after the owner's own ranks), as a forwarder's queue would.
// The reference is one aggregator fed every rank's batch when the owner gets that rank (its
// own batch, or the forwarded record): instances then complete in the same order, which the
// persistent-straggler history and the scores depend on.
TEST(CrossRankForward, TheOwnerMatchesForwardedRanksAsItsOwn) {
  for (size_t owner : {0u, 1u}) {
    for (uint32_t seed = 1; seed <= 4; ++seed) {
      SCOPED_TRACE(absl::StrCat("owner ", owner, " seed ", seed));
      const uint64_t comm = CommOwnedBy(owner);
      CrossRankAnalysis all;
      CrossRankAnalysis peer[2];
      const PeerRing ring[2] = {PeerRing(TwoPeers(), 0), PeerRing(TwoPeers(), 1)};
      for (int n = 0; n < kRanks; ++n) {
        all.OnHello(HelloOf(n));
        peer[n / 2].OnHello(HelloOf(n));
      }
      std::vector<std::pair<int, uint64_t>> arrivals;  // (node, seq)
      for (uint64_t seq = 1; seq <= 40; ++seq) {
        for (int n = 0; n < kRanks; ++n) arrivals.emplace_back(n, seq);
      }
      std::mt19937 rng(seed);
      std::shuffle(arrivals.begin(), arrivals.end(), rng);
      std::vector<v1::ForwardedAnalysis> queue;      // bound for the owner
      std::vector<std::pair<int, uint64_t>> queued;  // what each holds: (node, seq)
      auto deliver = [&](size_t n) {
        v1::Batch fwd;
        for (size_t i = 0; i < n && !queue.empty(); ++i) {
          *fwd.add_forwarded() = queue.front();
          queue.erase(queue.begin());
          const auto [node, seq] = queued.front();
          queued.erase(queued.begin());
          all.OnBatch(absl::StrCat("node", node), BatchOf(node, comm, seq));
        }
        peer[owner].OnForwarded(fwd);
      };
      for (const auto& [node, seq] : arrivals) {
        const v1::Batch b = BatchOf(node, comm, seq);
        const size_t shard = static_cast<size_t>(node / 2);
        const size_t before = queue.size();
        peer[shard].OnBatch(absl::StrCat("node", node), b, &ring[shard], &queue);
        if (queue.size() > before) {
          queued.emplace_back(node, seq);
        } else {
          all.OnBatch(absl::StrCat("node", node), b);
        }
        if (rng() % 3 == 0) deliver(1 + rng() % 4);
      }
      deliver(queue.size());
      EXPECT_EQ(queued.size(), 0u);
      const size_t other = 1 - owner;
      EXPECT_EQ(peer[other].instances_total(), 0u);
      EXPECT_EQ(peer[other].pending(), 0u);
      EXPECT_EQ(peer[owner].instances_total(), 40u);
      EXPECT_EQ(peer[owner].pending(), 0u);
      EXPECT_EQ(SlowJson(peer[owner].Slowest(0)), SlowJson(all.Slowest(0)));
      EXPECT_EQ(DiagnosisJson(peer[owner].Diagnoses()), DiagnosisJson(all.Diagnoses()));
      EXPECT_EQ(Scores(peer[owner]), Scores(all));
      // The straggler and the lossy port were found, by name, through the forwarded records.
      EXPECT_NE(DiagnosisJson(all.Diagnoses()).find("node3"), std::string::npos);
      EXPECT_NE(SlowJson(all.Slowest(0)).find("\"port\":\"mlx5_1:1\""), std::string::npos);
      EXPECT_NE(SlowJson(all.Slowest(0)).find("\"recording\""), std::string::npos);
    }
  }
}

// A forwarded record with no node, or no analysis, is dropped and counted; one with an
// impossible rank likewise.
TEST(CrossRankForward, ABadForwardedRecordIsDroppedAndCounted) {
  CrossRankAnalysis x;
  v1::Batch fwd;
  v1::ForwardedAnalysis* no_node = fwd.add_forwarded();
  *no_node->mutable_collective() = BatchOf(0, 7, 1).collectives(0);
  v1::ForwardedAnalysis* no_analysis = fwd.add_forwarded();
  no_analysis->set_node("node1");
  no_analysis->mutable_collective()->set_nranks(4);
  v1::ForwardedAnalysis* bad_rank = fwd.add_forwarded();
  bad_rank->set_node("node2");
  *bad_rank->mutable_collective() = BatchOf(2, 7, 1).collectives(0);
  bad_rank->mutable_collective()->set_rank(9);
  x.OnForwarded(fwd);
  EXPECT_EQ(DroppedAnalyses(x), 3);
  EXPECT_EQ(x.pending(), 0u);
}

}  // namespace
}  // namespace fabricscope::exporters

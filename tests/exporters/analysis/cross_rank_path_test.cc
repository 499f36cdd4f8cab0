// The cross-rank analysis with the absolute evidence of the ranks' ports
// (exporters/analysis/path_evidence.h, fabric_loss.h): faults present before a job's first
// collective are named from its first instance, through the nodes' own batches and through a
// peer aggregator's forwarded records; the JSON and the diagnosis say which evidence named them.

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "collectors/counter_meaning.h"
#include "exporters/analysis/cross_rank.h"
#include "exporters/exposition/cross_rank_render.h"
#include "exporters/shard/peer_ring.h"
#include "gtest/gtest.h"
#include "tests/common/metric_family.h"
#include "tests/common/units.h"
#include "tests/exporters/analysis/cross_rank_test_util.h"

namespace fabricscope::exporters {
namespace {

constexpr int kPathRanks = 4;
constexpr uint64_t kPathComm = 0x00c0ffee00000001ULL;
constexpr uint64_t kPathLineRate = 25'000'000;  // 200 Mb/s
constexpr int64_t kPathUnix = 1'700'000'000 * kSec;

// A node: port 0 its interface (veth), port 1 the node-level TCP pseudo-port.
v1::Hello PathHello(int node) {
  v1::Hello h;
  h.set_node(absl::StrCat("n", node));
  v1::PortInfo* p = h.add_ports();
  p->set_device(absl::StrCat("veth", node));
  p->set_link_layer(v1::LINK_LAYER_ETHERNET);
  p->set_line_rate_bytes_per_second(kPathLineRate);
  v1::PortInfo* tcp = h.add_ports();
  tcp->set_device("tcp");
  tcp->set_node_level(true);
  return h;
}

// Node `node`'s 1 s window ending at end_s: 10,000 packets each way on its interface, `retrans`
// TCP retransmissions.
v1::Batch PathWindow(int end_s, uint64_t retrans) {
  v1::Batch b;
  b.set_unix_offset_ns(kPathUnix);
  b.set_window_start_ns((end_s - 1) * kSec);
  b.set_window_end_ns(end_s * kSec);
  v1::PortWindow* w = b.add_ports();
  w->set_port_index(0);
  w->mutable_transmit()->set_packets(10'000);
  w->mutable_receive()->set_packets(10'000);
  v1::PortWindow* tcp = b.add_ports();
  tcp->set_port_index(1);
  v1::CounterValue* c = tcp->add_counters();
  c->set_name("RetransSegs");
  c->set_delta(retrans);
  c->set_meaning(static_cast<uint32_t>(collectors::Meaning::kTcpRetransmit));
  return b;
}

// Node `node`'s analysed AllReduce `seq` of a 4-rank ring (rank = node, sending to rank + 1)
// as the agent sends it: 64 MiB in 200 ms at 0.5 of line rate, its port moving `extra` x the
// node's own bytes, sending at `busy` of line rate when it had data, `loss` events during it.
v1::Batch PathRank(int node, uint64_t seq, double extra = 1.04, double busy = 0.5,
                   uint64_t loss = 0) {
  v1::Batch b;
  const RankSchedule s{.nranks = kPathRanks, .period_ns = 300 * kMs, .unix_base_ns = kPathUnix};
  v1::Collective* c = AddRankCollective(s, node, kPathComm, seq, &b);
  c->set_duration_seconds(0.2);
  c->set_busbw_bytes_per_second(0.5 * static_cast<double>(kPathLineRate));
  const uint64_t own = 2 * (uint64_t{96} << 20);  // 1.5 x 64 MiB each way
  c->set_proxy_bytes(own);
  v1::ProxyPeer* peer = c->add_proxy_peers();
  peer->set_peer((node + 1) % kPathRanks);
  peer->set_bytes_sent(own / 2);
  v1::CollectiveAnalysis* a = c->mutable_analysis();
  a->set_own_bytes(own);
  a->set_detail(absl::StrCat("busiest port veth", node));
  v1::PortActivity* p = a->mutable_ports(0);
  p->set_transmit_bytes(static_cast<uint64_t>(extra * static_cast<double>(own)) / 2);
  p->set_receive_bytes(static_cast<uint64_t>(extra * static_cast<double>(own)) / 2);
  p->set_line_rate_bytes_per_second(kPathLineRate);
  p->set_transmit_busy_utilization(busy);
  p->set_retransmits(loss);
  return b;
}

// Each value of `key` in the JSON, in order.
std::vector<std::string> SlowField(const std::string& json, const std::string& key) {
  std::vector<std::string> out;
  for (size_t at = json.find("\"" + key + "\":"); at != std::string::npos;
       at = json.find("\"" + key + "\":", at + 1)) {
    const size_t from = at + key.size() + 3;
    out.push_back(json.substr(from, json.find_first_of(",}", from) - from));
  }
  return out;
}

class CrossRankPathTest : public ::testing::Test {
 protected:
  CrossRankPathTest() {
    for (int n = 0; n < kPathRanks; ++n) x_.OnHello(PathHello(n));
  }
  void Send(int node, const v1::Batch& b) { x_.OnBatch(absl::StrCat("n", node), b); }
  CrossRankAnalysis x_;
};

// Another flow on n2's link from the job's first collective: no clean instance, no history;
// named network_saturated (shared_flow) from the first instance on, with the shares and the
// ratio in its evidence, and the diagnosis says so.
TEST_F(CrossRankPathTest, ACompetingFlowFromTheFirstInstanceIsNamed) {
  for (uint64_t seq = 0; seq < 3; ++seq) {
    for (int n = 0; n < kPathRanks; ++n) {
      v1::Batch b = PathRank(n, seq, n == 2 ? 2.0 : 1.04);
      // The ring gets half of n2's link: a quarter of line rate.
      b.mutable_collectives(0)->set_busbw_bytes_per_second(0.25 *
                                                           static_cast<double>(kPathLineRate));
      Send(n, b);
    }
  }
  const std::string slow = SlowJson(x_.Slowest(0));
  EXPECT_EQ(SlowField(slow, "rule"), std::vector<std::string>(3, "\"shared_flow\"")) << slow;
  EXPECT_EQ(SlowField(slow, "cause").front(), "\"network_saturated\"");
  EXPECT_NE(slow.find("n2 veth2 carried 2.00x the collective's own bytes"), std::string::npos)
      << slow;
  EXPECT_NE(slow.find("\"line_rate_share\":0.25"), std::string::npos) << slow;
  EXPECT_NE(slow.find("\"best_share\":null"), std::string::npos) << slow;  // none known
  EXPECT_NE(slow.find("\"own_bytes\":201326592"), std::string::npos) << slow;
  const std::string diag = DiagnosisJson(x_.Diagnoses());
  EXPECT_NE(diag.find("\"rule\":\"shared_flow\""), std::string::npos) << diag;
  EXPECT_NE(diag.find("n2's port veth2 is shared with another flow in 3 of the last 3"),
            std::string::npos)
      << diag;
  std::vector<prometheus::MetricFamily> f;
  AddCrossRankFamilies(x_.Snapshot(), &f);
  const prometheus::MetricFamily* causes =
      testing::FindFamily(f, "fabricscope_collectives_by_cause_total");
  ASSERT_NE(causes, nullptr);
  for (const auto& m : causes->metric) {
    EXPECT_EQ(m.counter.value, m.label[0].value == "network_saturated" ? 3 : 0) << m.label[0].value;
  }
}

// A slow link from n1 from the start: it sends at 0.25 of line rate when it has data, the
// others at 0.5; the same job clean names nothing and teaches the kind's best, against which the
// slow job then reads its share.
// n2's agent knew from its rank's queue pairs which one port it used (ports_from_qps): the
// other communicator's bytes are said to be on that port, not the node.
TEST_F(CrossRankPathTest, ASharerOnTheRanksOwnPortIsNamedOnThatPort) {
  for (uint64_t seq = 0; seq < 3; ++seq) {
    for (int n = 0; n < kPathRanks; ++n) {
      v1::Batch b = PathRank(n, seq, n == 2 ? 2.0 : 1.04);
      b.mutable_collectives(0)->set_busbw_bytes_per_second(0.25 *
                                                           static_cast<double>(kPathLineRate));
      if (n == 2) {
        v1::CollectiveAnalysis* a = b.mutable_collectives(0)->mutable_analysis();
        a->set_ports_from_qps(true);
        v1::SharerBytes* other = a->add_sharers();
        other->set_comm_hash(0x5151);
        other->set_bytes(a->own_bytes());
        a->set_sharers_bytes_total(a->own_bytes());
      }
      Send(n, b);
    }
  }
  const std::string slow = SlowJson(x_.Slowest(0));
  EXPECT_NE(slow.find("\"shared\":\"n2 veth2 also carried communicator"), std::string::npos)
      << slow;
  EXPECT_NE(slow.find("50% of its network bytes during it"), std::string::npos) << slow;
}

TEST_F(CrossRankPathTest, ASlowLinkFromTheStartIsNamedAndACleanJobIsNot) {
  for (uint64_t seq = 0; seq < 8; ++seq) {
    for (int n = 0; n < kPathRanks; ++n) Send(n, PathRank(n, seq));
  }
  EXPECT_EQ(SlowField(SlowJson(x_.Slowest(0)), "rule"), std::vector<std::string>(8, "\"\""));
  for (uint64_t seq = 8; seq < 10; ++seq) {
    for (int n = 0; n < kPathRanks; ++n) {
      v1::Batch b = PathRank(n, seq, 1.04, n == 1 ? 0.25 : 0.5);
      // The ring at the slow link's pace: twice as long.
      b.mutable_collectives(0)->set_busbw_bytes_per_second(
          b.collectives(0).busbw_bytes_per_second() / 2);
      Send(n, b);
    }
  }
  const std::string slow = SlowJson(x_.Slowest(0));
  const std::vector<std::string> rules = SlowField(slow, "rule");
  EXPECT_EQ(std::count(rules.begin(), rules.end(), "\"slow_link\""), 2) << slow;
  EXPECT_EQ(std::count(rules.begin(), rules.end(), "\"\""), 8) << slow;
  EXPECT_NE(slow.find("\"best_share\":0.5"), std::string::npos) << slow;
  EXPECT_NE(slow.find("n1 veth1 sent at 0.25 of what its path can carry"), std::string::npos)
      << slow;
}

// n1's interface loses 5e-3 of its packets (TCP retransmissions) from the start, the fabric's
// other ports nothing: the first instance in which it lost a packet is network_lossy
// (fabric_loss), without any history of n1's port; a clean port's lone retransmission is not.
TEST_F(CrossRankPathTest, APortLossierThanTheFabricIsNamedFromItsFirstWindow) {
  for (int n = 0; n < kPathRanks; ++n) Send(n, PathWindow(1, n == 1 ? 50 : 0));
  for (int n = 0; n < kPathRanks; ++n) Send(n, PathRank(n, 0, 1.04, 0.5, n == 1 ? 2 : 0));
  for (int n = 0; n < kPathRanks; ++n) Send(n, PathRank(n, 1, 1.04, 0.5, n == 3 ? 1 : 0));
  const std::string slow = SlowJson(x_.Slowest(0));
  EXPECT_NE(slow.find("\"rule\":\"fabric_loss\""), std::string::npos) << slow;
  EXPECT_NE(slow.find("\"cause\":\"network_lossy\""), std::string::npos) << slow;
  EXPECT_NE(slow.find("n1 veth1 lost or retransmitted 0.005 of its packets in its latest "
                      "window (50 events)"),
            std::string::npos)
      << slow;
  const std::vector<std::string> rules = SlowField(slow, "rule");
  EXPECT_EQ(std::count(rules.begin(), rules.end(), "\"fabric_loss\""), 1) << slow;
  EXPECT_EQ(std::count(rules.begin(), rules.end(), "\"\""), 1) << slow;
  EXPECT_NE(slow.find("\"window_loss_events\":50"), std::string::npos);
}

// Sharded aggregators: the aggregator that received n1's windows forwards its port's fabric
// figures with the record, and the owner, which never saw them, names the port all the same.
TEST_F(CrossRankPathTest, TheFabricsFiguresTravelWithAForwardedRecord) {
  const std::vector<Peer> peers = {{"10.0.0.1:50051", "10.0.0.1:9400"},
                                   {"10.0.0.2:50051", "10.0.0.2:9400"}};
  const PeerRing here(peers, 0);
  const size_t owner = here.OwnerOfLabel(static_cast<uint32_t>(kPathComm >> 32));
  const PeerRing ring(peers, 1 - owner);  // this aggregator does not own kPathComm
  for (int n = 0; n < kPathRanks; ++n) Send(n, PathWindow(1, n == 1 ? 50 : 0));
  std::vector<v1::ForwardedAnalysis> forward;
  for (int n = 0; n < kPathRanks; ++n) {
    x_.OnBatch(absl::StrCat("n", n), PathRank(n, 0, 1.04, 0.5, n == 1 ? 2 : 0), &ring, &forward);
  }
  ASSERT_EQ(forward.size(), 4u);
  EXPECT_EQ(forward[1].fabric_loss().events(), 50u);
  EXPECT_EQ(forward[1].fabric_loss().ports(), 3u);
  EXPECT_EQ(x_.instances_total(), 0u);
  CrossRankAnalysis the_owner;
  v1::Batch fwd;
  for (const v1::ForwardedAnalysis& f : forward) *fwd.add_forwarded() = f;
  the_owner.OnForwarded(fwd);
  EXPECT_NE(SlowJson(the_owner.Slowest(0)).find("\"rule\":\"fabric_loss\""), std::string::npos)
      << SlowJson(the_owner.Slowest(0));
}

}  // namespace
}  // namespace fabricscope::exporters

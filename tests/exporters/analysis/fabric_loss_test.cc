#include "exporters/analysis/fabric_loss.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "collectors/counter_meaning.h"
#include "gtest/gtest.h"
#include "tests/common/units.h"

namespace fabricscope::exporters {
namespace {

using collectors::Meaning;

// A node's ports as its Hello announces them: port 0 an interface (veth, eth0), port 1 the
// node-level TCP pseudo-port (collectors/procfs_tcp.cc), port 2 an RDMA port of the given link
// layer.
std::vector<v1::PortInfo> FabricPorts(v1::LinkLayer rdma_layer = v1::LINK_LAYER_INFINIBAND) {
  std::vector<v1::PortInfo> p(3);
  p[0].set_device("eth0");
  p[0].set_link_layer(v1::LINK_LAYER_ETHERNET);
  p[1].set_device("tcp");
  p[1].set_node_level(true);
  p[2].set_device("mlx5_0");
  p[2].set_port(1);
  p[2].set_rdma(true);
  p[2].set_link_layer(rdma_layer);
  return p;
}

// A window's counter of the given meaning (CounterValue.meaning as the agent sets it).
void AddLossCounter(v1::PortWindow* w, const std::string& name, Meaning m, uint64_t delta) {
  v1::CounterValue* c = w->add_counters();
  c->set_name(name);
  c->set_delta(delta);
  c->set_meaning(static_cast<uint32_t>(m));
}

// One 1 s window ending at end_s: eth0 moved `packets` each way with `drops` rx drops, the
// node's TCP retransmitted `retrans` segments, mlx5_0 moved `packets` with `ib_loss` symbol
// errors.
v1::Batch LossWindow(int end_s, uint64_t packets, uint64_t drops, uint64_t retrans,
                     uint64_t ib_loss = 0) {
  v1::Batch b;
  b.set_unix_offset_ns(1'700'000'000 * kSec);
  b.set_window_start_ns((end_s - 1) * kSec);
  b.set_window_end_ns(end_s * kSec);
  v1::PortWindow* eth = b.add_ports();
  eth->set_port_index(0);
  eth->mutable_transmit()->set_packets(packets);
  eth->mutable_receive()->set_packets(packets / 2);
  AddLossCounter(eth, "rx_dropped", Meaning::kNetdevDrop, drops);
  v1::PortWindow* tcp = b.add_ports();
  tcp->set_port_index(1);
  AddLossCounter(tcp, "RetransSegs", Meaning::kTcpRetransmit, retrans);
  AddLossCounter(tcp, "OutSegs", Meaning::kTcpSent, packets);
  v1::PortWindow* ib = b.add_ports();
  ib->set_port_index(2);
  ib->mutable_transmit()->set_packets(packets);
  ib->mutable_receive()->set_packets(packets);
  AddLossCounter(ib, "port_rcv_errors", Meaning::kDiscard, ib_loss);
  return b;
}

class FabricLossTest : public ::testing::Test {
 protected:
  Name N(int i) { return *names_.Intern(absl::StrCat("n", i)); }
  NameTable names_{64};
  std::vector<v1::PortInfo> ports_ = FabricPorts();
};

// Four nodes; n2's interface loses 1e-3 of its packets (TCP retransmissions), the others 0,
// 2e-5, 5e-5. n2 is judged against the median of the three others (2e-5), and each of the
// others against a median without itself.
TEST_F(FabricLossTest, APortIsJudgedAgainstTheMedianOfTheOthersOfItsKind) {
  FabricLoss f;
  const uint64_t retrans[4] = {0, 2, 100, 5};  // of 100,000 packets
  for (int i = 0; i < 4; ++i) f.OnBatch(N(i), ports_, LossWindow(10, 100'000, 0, retrans[i]));
  const v1::FabricLossEvidence e = f.Of(N(2), 0);
  EXPECT_EQ(e.events(), 100u);
  EXPECT_DOUBLE_EQ(e.rate(), 1e-3);
  EXPECT_EQ(e.ports(), 3u);
  EXPECT_DOUBLE_EQ(e.fabric_median(), 2e-5);  // of {0, 2e-5, 5e-5}
  const v1::FabricLossEvidence clean = f.Of(N(1), 0);
  EXPECT_DOUBLE_EQ(clean.rate(), 2e-5);
  EXPECT_DOUBLE_EQ(clean.fabric_median(), 5e-5);  // the upper median of {0, 5e-5, 1e-3}
  // The InfiniBand ports are their own kind: all clean.
  EXPECT_EQ(f.Of(N(2), 2).events(), 0u);
  EXPECT_EQ(f.Of(N(2), 2).ports(), 3u);
  EXPECT_EQ(f.Of(N(2), 2).fabric_median(), 0);
  // The node-level TCP port is no port of the fabric; an unknown port or node has nothing.
  EXPECT_EQ(f.Of(N(2), 1).ports(), 0u);
  EXPECT_EQ(f.Of(N(2), 7).ports(), 0u);
  EXPECT_EQ(f.ports(), 8u);
}

// An interface's own drops and its node's TCP retransmissions add up; an RDMA port does not get
// the TCP ones (they are not its traffic); the rate is over the busier direction's packets.
TEST_F(FabricLossTest, InterfacesCarryTheirNodesTcpRetransmissions) {
  FabricLoss f;
  f.OnBatch(N(0), ports_, LossWindow(10, 10'000, 3, 4, 7));
  f.OnBatch(N(1), ports_, LossWindow(10, 10'000, 0, 0, 0));
  EXPECT_EQ(f.Of(N(0), 0).events(), 7u);
  EXPECT_DOUBLE_EQ(f.Of(N(0), 0).rate(), 7e-4);
  EXPECT_EQ(f.Of(N(0), 2).events(), 7u);  // its own port_rcv_errors only
  EXPECT_EQ(f.Of(N(0), 0).ports(), 1u);
}

// A port that moved fewer than min_packets has no rate: it is out of the median, and judged
// against nothing; a port whose node stopped reporting leaves the median after max_age.
TEST_F(FabricLossTest, IdleAndSilentPortsLeaveTheMedian) {
  FabricLossOptions o;
  o.refresh_ns = 0;
  FabricLoss f(o);
  f.OnBatch(N(0), ports_, LossWindow(10, 50, 0, 5));  // idle: 50 packets
  f.OnBatch(N(1), ports_, LossWindow(10, 10'000, 0, 1));
  f.OnBatch(N(2), ports_, LossWindow(10, 10'000, 0, 30));
  EXPECT_EQ(f.Of(N(0), 0).ports(), 0u);
  EXPECT_EQ(f.Of(N(2), 0).ports(), 1u);
  EXPECT_DOUBLE_EQ(f.Of(N(2), 0).fabric_median(), 1e-4);
  // n1 falls silent; n2 and a new n3 go on for 4 more windows: n1's old rate leaves.
  for (int s = 11; s <= 14; ++s) {
    f.OnBatch(N(2), ports_, LossWindow(s, 10'000, 0, 30));
    f.OnBatch(N(3), ports_, LossWindow(s, 10'000, 0, 0));
  }
  EXPECT_EQ(f.Of(N(2), 0).ports(), 1u);
  EXPECT_EQ(f.Of(N(2), 0).fabric_median(), 0);  // n3's
  EXPECT_EQ(f.Of(N(1), 0).ports(), 0u);         // stale itself
  f.ForgetNode(N(3));
  EXPECT_EQ(f.Of(N(2), 0).events(), 30u);
  EXPECT_EQ(f.Of(N(3), 0).events(), 0u);
}

// RoCE and InfiniBand ports are different kinds; an early batch (no port windows) changes
// nothing; a port index past the Hello's ports is skipped.
TEST_F(FabricLossTest, KindsAreComparedApartAndBadIndexesSkipped) {
  FabricLoss f;
  const std::vector<v1::PortInfo> roce = FabricPorts(v1::LINK_LAYER_ETHERNET);
  f.OnBatch(N(0), ports_, LossWindow(10, 10'000, 0, 0, 100));  // IB, lossy
  f.OnBatch(N(1), roce, LossWindow(10, 10'000, 0, 0, 0));      // RoCE, clean
  f.OnBatch(N(2), roce, LossWindow(10, 10'000, 0, 0, 0));
  EXPECT_EQ(f.Of(N(0), 2).ports(), 0u);  // no other InfiniBand port
  EXPECT_EQ(f.Of(N(1), 2).ports(), 1u);
  v1::Batch early;
  early.set_early(true);
  f.OnBatch(N(0), ports_, early);
  EXPECT_EQ(f.Of(N(0), 2).events(), 100u);
  v1::Batch bad = LossWindow(11, 10'000, 0, 0);
  bad.mutable_ports(0)->set_port_index(99);
  f.OnBatch(N(3), ports_, bad);
  EXPECT_EQ(f.ports(), 7u);  // n3: its RDMA port only, 99 skipped
}

// Bounded: beyond max_ports, new ports are not tracked.
TEST_F(FabricLossTest, PortsAreBounded) {
  FabricLossOptions o;
  o.max_ports = 5;
  FabricLoss f(o);
  for (int i = 0; i < 10; ++i) f.OnBatch(N(i), ports_, LossWindow(10, 10'000, 0, 1));
  EXPECT_EQ(f.ports(), 5u);
  EXPECT_EQ(f.Of(N(9), 0).events(), 0u);
}

}  // namespace
}  // namespace fabricscope::exporters

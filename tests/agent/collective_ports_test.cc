// A collective judged on the ports its own process has queue pairs on (CollectiveAnalyzer::
// SetProcessPorts, agent/qp_ports.h), on a two-rail node: the other rail's saturation is not
// its cause, and the jobs named as sharing its link are those on its rail.
#include <memory>
#include <vector>

#include "agent/collective_analysis.h"
#include "gtest/gtest.h"
#include "tests/agent/collective_test_util.h"

namespace fabricscope::agent {
namespace {

using namespace collective_test;  // NOLINT: the shared helpers

// mlx5_0 port 1 (index 0) and mlx5_1 port 1 (index 1): one rail each.
std::vector<PortDescriptor> TwoRails() {
  std::vector<PortDescriptor> v;
  for (const char* dev : {"mlx5_0", "mlx5_1"}) {
    PortDescriptor p;
    p.device = dev;
    p.port = 1;
    p.rdma = true;
    p.line_rate_bytes_per_second = kRate;
    v.push_back(p);
  }
  return v;
}

v1::Collective Of(uint64_t comm, int32_t pid, uint64_t seq, int64_t start_ms, int64_t end_ms,
                  uint64_t proxy_bytes) {
  v1::Collective c = Coll(seq, start_ms * kMs, end_ms * kMs);
  c.set_comm_hash(comm);
  c.set_pid(pid);
  c.set_proxy_bytes(proxy_bytes);
  return c;
}

class CollectivePortsTest : public ::testing::Test {
 protected:
  CollectivePortsTest() : recorder_(2, 10, kMs) {
    Fill(recorder_, 0, 0, 200, 0.3);   // mlx5_0: its own rail, busy but not saturated
    Fill(recorder_, 1, 0, 200, 0.97);  // mlx5_1: another job's rail, saturated
  }
  static std::shared_ptr<const ProcessPorts> Map() {
    auto m = std::make_shared<ProcessPorts>();
    (*m)[10] = {0};  // the rank under test on mlx5_0
    (*m)[20] = {1};  // job B's rank on mlx5_1
    (*m)[30] = {0};  // job C's rank beside it on mlx5_0
    return m;
  }
  FlightRecorder recorder_;
};

TEST_F(CollectivePortsTest, NodeWideTheOtherRailsSaturationIsBlamed) {
  CollectiveAnalyzer a(TwoRails(), recorder_, {});
  const v1::CollectiveAnalysis r = a.Analyze(Of(0xa, 10, 1, 50, 100, 1'000));
  EXPECT_FALSE(r.ports_from_qps());
  EXPECT_EQ(r.ports_size(), 2);
  EXPECT_EQ(r.cause(), v1::COLLECTIVE_CAUSE_NETWORK_SATURATED);
  EXPECT_EQ(r.port_index(), 1);
}

TEST_F(CollectivePortsTest, OnItsOwnRailItIsNotSaturated) {
  CollectiveAnalyzer a(TwoRails(), recorder_, {});
  a.SetProcessPorts(Map());
  const v1::CollectiveAnalysis r = a.Analyze(Of(0xa, 10, 1, 50, 100, 1'000));
  EXPECT_TRUE(r.ports_from_qps());
  ASSERT_EQ(r.ports_size(), 1);
  EXPECT_EQ(r.ports(0).port_index(), 0u);
  EXPECT_NE(r.cause(), v1::COLLECTIVE_CAUSE_NETWORK_SATURATED) << r.detail();
  // A process the map does not know (it has not connected yet) is judged node-wide.
  const v1::CollectiveAnalysis u = a.Analyze(Of(0xa, 11, 2, 50, 100, 1'000));
  EXPECT_FALSE(u.ports_from_qps());
  EXPECT_EQ(u.ports_size(), 2);
}

// Job B on the other rail moved ten times job C's bytes; on the rank's rail only C did.
TEST_F(CollectivePortsTest, SharersAreThoseOfItsRail) {
  for (const bool mapped : {false, true}) {
    CollectiveAnalysisOptions o;
    o.delay_ns = 0;
    CollectiveAnalyzer a(TwoRails(), recorder_, o);
    if (mapped) a.SetProcessPorts(Map());
    AddCollective(a, Of(0xa, 10, 1, 50, 100, 1'000));
    AddCollective(a, Of(0xb, 20, 1, 40, 110, 70'000));
    AddCollective(a, Of(0xc, 30, 1, 40, 110, 7'000));
    v1::Batch b;
    b.set_window_start_ns(0);
    b.set_window_end_ns(200 * kMs);
    a.Process(200 * kMs, &b);
    // The other two wait for 0xa's next record (TransferLedger::Settled): 0xa comes first.
    ASSERT_GE(b.collectives_size(), 1);
    const v1::CollectiveAnalysis& r = b.collectives(0).analysis();
    ASSERT_EQ(b.collectives(0).comm_hash(), 0xau);
    EXPECT_EQ(r.own_bytes(), 1'000u);
    if (mapped) {
      ASSERT_EQ(r.sharers_size(), 1) << mapped;
      EXPECT_EQ(r.sharers(0).comm_hash(), 0xcu);
      EXPECT_EQ(r.sharers(0).bytes(), 5'000u);  // 50 of its 70 ms
      EXPECT_EQ(r.sharers_bytes_total(), 5'000u);
    } else {
      ASSERT_EQ(r.sharers_size(), 2);
      EXPECT_EQ(r.sharers(0).comm_hash(), 0xbu);
      EXPECT_EQ(r.sharers(0).bytes(), 50'000u);
      EXPECT_EQ(r.sharers_bytes_total(), 55'000u);
    }
  }
}

}  // namespace
}  // namespace fabricscope::agent

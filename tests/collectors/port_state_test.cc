#include "collectors/port_state.h"

#include <gtest/gtest.h>

#include "collectors/sysfs_ports.h"
#include "tests/common/fake_tree.h"

namespace fabricscope::collectors {
namespace {

TEST(ParseStateText, RealStrings) {
  uint64_t v = 0;
  EXPECT_EQ(ParseStateText("4: ACTIVE\n", &v), ReadStatus::kOk);
  EXPECT_EQ(v, 4u);
  EXPECT_EQ(ParseStateText("5: LinkUp\n", &v), ReadStatus::kOk);
  EXPECT_EQ(v, 5u);
  EXPECT_EQ(ParseStateText("1: DOWN", &v), ReadStatus::kOk);
  EXPECT_EQ(v, 1u);
  EXPECT_EQ(ParseStateText("ACTIVE", &v), ReadStatus::kError);
  EXPECT_EQ(ParseStateText("4", &v), ReadStatus::kError);
  EXPECT_EQ(ParseStateText("", &v), ReadStatus::kError);
}

TEST(ParseRateText, AgreesWithParseIbRate) {
  for (const char* text : {"100 Gb/sec (4X EDR)\n", "25 Gb/sec (1X EDR)", "2.5 Gb/sec (1X SDR)",
                           "53.125 Gb/sec (1X HDR)", "400 Gb/sec (4X NDR)"}) {
    uint64_t v = 0;
    ASSERT_EQ(ParseRateText(text, &v), ReadStatus::kOk) << text;
    EXPECT_EQ(v, *ParseIbRate(text)) << text;
  }
  uint64_t v = 0;
  EXPECT_EQ(ParseRateText("fast", &v), ReadStatus::kError);
  EXPECT_EQ(ParseRateText("100 Mb/sec", &v), ReadStatus::kError);
}

TEST(ParseOperstateText, Rfc2863Names) {
  uint64_t v = 9;
  EXPECT_EQ(ParseOperstateText("up\n", &v), ReadStatus::kOk);
  EXPECT_EQ(v, 4u);
  EXPECT_EQ(ParseOperstateText("down\n", &v), ReadStatus::kOk);
  EXPECT_EQ(v, 1u);
  EXPECT_EQ(ParseOperstateText("lowerlayerdown\n", &v), ReadStatus::kOk);
  EXPECT_EQ(v, 1u);
  EXPECT_EQ(ParseOperstateText("unknown\n", &v), ReadStatus::kOk);
  EXPECT_EQ(v, 0u);
  EXPECT_EQ(ParseOperstateText("\n", &v), ReadStatus::kError);
}

TEST(ParseSpeedText, MegabitsAndUnknown) {
  uint64_t v = 7;
  EXPECT_EQ(ParseSpeedText("25000\n", &v), ReadStatus::kOk);
  EXPECT_EQ(v, 3'125'000'000u);
  EXPECT_EQ(ParseSpeedText("-1\n", &v), ReadStatus::kOk);
  EXPECT_EQ(v, 0u);
  EXPECT_EQ(ParseSpeedText("1000x", &v), ReadStatus::kError);
}

TEST(PortStateCollector, ReadsTheRealTreeAndFollowsChanges) {
  testing::FakeTree t;
  t.CopyTestdata("sysfs-real/class", "class");
  t.AddNetdev("eth1", "10000");
  t.Write("class/net/eth1/operstate", "up\n");
  auto rdma = DiscoverRdmaPorts(t.root());
  auto net = DiscoverNetdevs(t.root());
  ASSERT_TRUE(rdma.ok() && net.ok());
  std::vector<PortDescriptor> ports = rdma->ports;
  ports.insert(ports.end(), net->ports.begin(), net->ports.end());
  auto c = PortStateCollector::Open(t.root(), ports);
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_EQ((*c)->ports().size(), 5u);  // 4 RDMA ports + eth1
  EXPECT_EQ((*c)->counter_count(), 4u * 3 + 2);
  std::vector<uint64_t> v((*c)->counter_count());
  std::vector<ReadStatus> s((*c)->counter_count());
  (*c)->Sample(0, v.data(), s.data());
  // mlx5_0 port 1 is the fourth port: state "4: ACTIVE", phys_state "4: ACTIVE" (the fixture's
  // hand-edited value, see SOURCES.md), rate 25 Gb/s.
  EXPECT_EQ(v[9], 4u);
  EXPECT_EQ(v[10], 4u);
  EXPECT_EQ(v[11], 3'125'000'000u);
  EXPECT_EQ(v[12], 4u);              // eth1 operstate up
  EXPECT_EQ(v[13], 1'250'000'000u);  // 10000 Mb/s
  for (ReadStatus x : s) EXPECT_EQ(x, ReadStatus::kOk);

  t.Write("class/infiniband/mlx5_0/ports/1/state", "1: DOWN\n");
  t.Write("class/infiniband/mlx5_0/ports/1/rate", "10 Gb/sec (1X QDR)\n");
  t.Write("class/net/eth1/operstate", "down\n");
  (*c)->Sample(1, v.data(), s.data());
  EXPECT_EQ(v[9], 1u);
  EXPECT_EQ(v[11], 1'250'000'000u);
  EXPECT_EQ(v[12], 1u);
  t.Write("class/infiniband/mlx5_0/ports/1/state", "garbage\n");
  (*c)->Sample(2, v.data(), s.data());
  EXPECT_EQ(s[9], ReadStatus::kError);
}

}  // namespace
}  // namespace fabricscope::collectors

#include "collectors/sysfs_collector.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "collectors/sysfs_ports.h"
#include "tests/common/fake_tree.h"

namespace fabricscope::collectors {
namespace {

uint64_t FileValue(const std::string& path) {
  std::ifstream in(path);
  uint64_t v = 0;
  in >> v;
  return v;
}

class SysfsCollectorTest : public ::testing::Test {
 protected:
  void SetUp() override { tree_.CopyTestdata("sysfs-real/class", "class"); }

  std::unique_ptr<SysfsCounterCollector> OpenRdma(uint32_t divisor = 1) {
    auto r = DiscoverRdmaPorts(tree_.root(), divisor);
    EXPECT_TRUE(r.ok());
    auto c = SysfsCounterCollector::Open(r->ports);
    EXPECT_TRUE(c.ok()) << c.status();
    return std::move(*c);
  }

  testing::FakeTree tree_;
};

TEST_F(SysfsCollectorTest, ReadsEveryCounterOfTheRealTree) {
  auto c = OpenRdma();
  ASSERT_EQ(c->ports().size(), 4u);
  std::vector<uint64_t> values(c->counter_count());
  std::vector<ReadStatus> status(c->counter_count());
  c->Sample(1, values.data(), status.data());
  size_t i = 0;
  for (const PortDescriptor& p : c->ports()) {
    for (const CounterDescriptor& d : p.counters) {
      EXPECT_EQ(status[i], ReadStatus::kOk) << d.path;
      EXPECT_EQ(values[i], FileValue(d.path)) << d.path;  // raw, unscaled
      ++i;
    }
  }
  // Spot-check one value against the fixture text itself.
  EXPECT_EQ(values[c->ports()[0].counters.size() * 3], 2880761508848u);  // mlx5_0 port_xmit_data
}

TEST_F(SysfsCollectorTest, RereadsChangedFilesThroughTheSameDescriptor) {
  auto c = OpenRdma();
  std::vector<uint64_t> values(c->counter_count());
  std::vector<ReadStatus> status(c->counter_count());
  tree_.Write("class/infiniband/hfi1_0/ports/1/counters/port_xmit_data", "273558327000\n");
  c->Sample(1, values.data(), status.data());
  EXPECT_EQ(values[0], 273558327000u);
}

TEST_F(SysfsCollectorTest, EmptiedOrGarbledFileIsAReadErrorNotACrash) {
  auto c = OpenRdma();
  std::vector<uint64_t> values(c->counter_count());
  std::vector<ReadStatus> status(c->counter_count());
  tree_.Write("class/infiniband/hfi1_0/ports/1/counters/port_xmit_data", "");
  tree_.Write("class/infiniband/hfi1_0/ports/1/counters/port_rcv_data", "garbage\n");
  tree_.Write("class/infiniband/hfi1_0/ports/1/counters/port_xmit_packets", "N/A (no PMA)\n");
  tree_.Write("class/infiniband/hfi1_0/ports/1/counters/port_rcv_packets",
              std::string(200, '7') + "\n");
  c->Sample(1, values.data(), status.data());
  EXPECT_EQ(status[0], ReadStatus::kError);
  EXPECT_EQ(status[1], ReadStatus::kError);
  EXPECT_EQ(status[2], ReadStatus::kUnavailable);
  EXPECT_EQ(status[3], ReadStatus::kError);
  EXPECT_EQ(status[4], ReadStatus::kOk);
}

TEST_F(SysfsCollectorTest, SlowGroupIsReadOnlyOnItsTicks) {
  auto c = OpenRdma(/*divisor=*/4);
  std::vector<uint64_t> values(c->counter_count());
  std::vector<ReadStatus> status(c->counter_count());
  const auto& counters = c->ports()[0].counters;
  c->Sample(5, values.data(), status.data());
  for (size_t i = 0; i < counters.size(); ++i) {
    EXPECT_EQ(status[i] == ReadStatus::kNotRead, counters[i].role == CounterRole::kError)
        << counters[i].name;
  }
  c->Sample(8, values.data(), status.data());
  for (size_t i = 0; i < counters.size(); ++i) EXPECT_EQ(status[i], ReadStatus::kOk);
}

TEST_F(SysfsCollectorTest, MeasuresReadCostOnStrideTicks) {
  auto c = OpenRdma();
  std::vector<uint64_t> values(c->counter_count());
  std::vector<ReadStatus> status(c->counter_count());
  c->Sample(1, values.data(), status.data());
  EXPECT_EQ(c->ReadCostNs(0), 0.0);  // tick 1 is not measured
  c->Sample(SysfsCounterCollector::kCostTickStride, values.data(), status.data());
  EXPECT_GT(c->ReadCostNs(0), 0.0);
}

TEST_F(SysfsCollectorTest, UnopenableCounterIsDroppedWithANote) {
  auto r = DiscoverRdmaPorts(tree_.root());
  ASSERT_TRUE(r.ok());
  std::filesystem::remove(tree_.Path("class/infiniband/hfi1_0/ports/1/counters/port_xmit_data"));
  std::vector<std::string> notes;
  auto c = SysfsCounterCollector::Open(r->ports, &notes);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ((*c)->ports()[0].counters.size(), 16u);  // 16 files of counters/ but the removed one
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_NE(notes[0].find("port_xmit_data"), std::string::npos);
}

// A counter in parts (irdma: ip4InOctets + ip6InOctets) reads as the sum of its files, and as a
// read error when one of them fails.
TEST(SysfsCollector, CounterInPartsReadsAsTheirSum) {
  testing::FakeTree tree;
  tree.CopyTestdata("generated/irdma-rocev2/class", "class");
  auto r = DiscoverRdmaPorts(tree.root());
  ASSERT_TRUE(r.ok()) << r.status();
  auto c = SysfsCounterCollector::Open(r->ports);
  ASSERT_TRUE(c.ok()) << c.status();
  std::vector<uint64_t> values((*c)->counter_count());
  std::vector<ReadStatus> status((*c)->counter_count());
  size_t rx = 0;
  const std::vector<CounterDescriptor>& counters = (*c)->ports()[0].counters;
  for (size_t i = 0; i < counters.size(); ++i) {
    if (counters[i].name == "ip4InOctets+ip6InOctets") rx = i;
  }
  (*c)->Sample(0, values.data(), status.data());
  ASSERT_EQ(status[rx], ReadStatus::kOk);
  EXPECT_EQ(values[rx], 1'500'000'000'000u + 2'000'000'000u);
  const std::string hw = "class/infiniband/irdma0/ports/1/hw_counters/";
  tree.Write(hw + "ip6InOctets", "2000000100\n");
  (*c)->Sample(1, values.data(), status.data());
  EXPECT_EQ(values[rx], 1'500'000'000'000u + 2'000'000'100u);
  tree.Write(hw + "ip6InOctets", "garbage\n");
  (*c)->Sample(2, values.data(), status.data());
  EXPECT_EQ(status[rx], ReadStatus::kError);
}

TEST(SysfsCollector, NothingOpenableIsAnError) {
  PortDescriptor p;
  p.device = "gone";
  CounterDescriptor d;
  d.name = "tx_bytes";
  d.path = "/nonexistent/fabricscope/tx_bytes";
  p.counters.push_back(d);
  auto c = SysfsCounterCollector::Open({p});
  EXPECT_EQ(c.status().code(), absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace fabricscope::collectors

namespace fabricscope::collectors {
namespace {

TEST_F(SysfsCollectorTest, ReplugIsReopenedOntoTheSameDescriptor) {
  auto c = OpenRdma();
  std::vector<uint64_t> values(c->counter_count());
  std::vector<ReadStatus> status(c->counter_count());
  EXPECT_EQ(c->ReopenReplaced(), 0u);  // nothing changed
  const std::string dir = "class/infiniband/hfi1_0/ports/1/counters/";
  const std::string path = tree_.Path(dir + "port_xmit_data");
  // Unplug: the file goes; the old descriptor keeps the old inode, and nothing is reopened.
  std::filesystem::remove(path);
  EXPECT_EQ(c->ReopenReplaced(), 0u);
  c->Sample(1, values.data(), status.data());
  EXPECT_EQ(values[0], 273558326543u);  // the removed inode's content
  // Re-plug: a new file (new inode) with a restarted counter.
  tree_.Write(dir + "port_xmit_data", "17\n");
  EXPECT_EQ(c->ReopenReplaced(), 1u);
  c->Sample(2, values.data(), status.data());
  EXPECT_EQ(status[0], ReadStatus::kOk);
  EXPECT_EQ(values[0], 17u);
  EXPECT_EQ(c->ReopenReplaced(), 0u);
}

}  // namespace
}  // namespace fabricscope::collectors

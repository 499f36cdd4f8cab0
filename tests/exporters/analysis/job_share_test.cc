// One job's share of a link's network bytes per time bucket, and the links heat map scaled to it
// (exporters/analysis/job_share.h, /heatmap/links?job=).
#include "exporters/analysis/job_share.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace fabricscope::exporters {
namespace {

constexpr int64_t kMs = 1'000'000;
constexpr int64_t kT0 = 1'800'000'000'000'000'000;  // Unix ns: 2027
constexpr uint64_t kJob = 0xa, kOther = 0xb;

NodeTransfer T(uint64_t comm, double start_ms, double end_ms, uint64_t bytes,
               std::vector<std::string> ports = {}) {
  return {comm, kT0 + static_cast<int64_t>(start_ms * kMs),
          kT0 + static_cast<int64_t>(end_ms * kMs), bytes, std::move(ports)};
}

NodeTransfers Held(std::vector<NodeTransfer> t, bool truncated = false) {
  return {std::move(t), truncated};
}

// Bytes pro rata to each transfer's overlap with a bucket, a long transfer spread evenly over
// the buckets it spans: the job's 100 bytes/ms over [2.5, 17.5) ms against another
// communicator's 100 bytes/ms over [0, 20) ms.
TEST(JobShare, BytesProRataPerBucket) {
  const std::vector<float> s = JobShareColumns(
      Held({T(kJob, 2.5, 17.5, 1'500), T(kOther, 0, 20, 2'000)}), {kJob}, kT0, 5 * kMs, 5);
  ASSERT_EQ(s.size(), 5u);
  EXPECT_NEAR(s[0], 250.0 / 750, 1e-6);
  EXPECT_NEAR(s[1], 0.5, 1e-6);
  EXPECT_NEAR(s[2], 0.5, 1e-6);
  EXPECT_NEAR(s[3], 250.0 / 750, 1e-6);
  EXPECT_EQ(s[4], 0.0f);  // nothing moved: not the job's
}

// When the node dropped older records, buckets before the earliest end it kept are unknown
// (NaN), not 0, however early a long record began; when it dropped none, a bucket without a
// transfer is 0. A transfer of no duration counts whole in its bucket.
TEST(JobShare, UnknownBeforeWhatATruncatedNodeKeptAndInstantsWhole) {
  const std::vector<NodeTransfer> held = {T(kOther, 10, 12, 300), T(kJob, 11, 11, 100)};
  const std::vector<float> s = JobShareColumns(Held(held, true), {kJob}, kT0, 5 * kMs, 4);
  EXPECT_TRUE(std::isnan(s[0]));
  EXPECT_TRUE(std::isnan(s[1]));  // ends at 10 ms, before the earliest end kept (11 ms)
  EXPECT_NEAR(s[2], 100.0 / 400, 1e-6);
  EXPECT_EQ(s[3], 0.0f);
  const std::vector<float> whole = JobShareColumns(Held(held), {kJob}, kT0, 5 * kMs, 4);
  EXPECT_EQ(whole[0], 0.0f);
  EXPECT_NEAR(whole[2], 100.0 / 400, 1e-6);
  const std::vector<float> long_one = JobShareColumns(
      Held({T(kOther, 0, 20, 2'000), T(kJob, 14, 16, 10)}, true), {kJob}, kT0, 5 * kMs, 4);
  EXPECT_TRUE(std::isnan(long_one[0]) && std::isnan(long_one[1]) && std::isnan(long_one[2]));
  EXPECT_NEAR(long_one[3], 5.0 / (500 + 5), 1e-6);
  for (float v : JobShareColumns(Held({}, true), {kJob}, kT0, kMs, 3)) EXPECT_TRUE(std::isnan(v));
}

// Unknown (0) and impossible times are skipped, not counted from the epoch, and cannot overflow.
TEST(JobShare, BadTimesAreSkipped) {
  const std::vector<float> bad = JobShareColumns(Held({{kOther, 0, kT0 + 1, 999, {}},
                                                       {kOther, kT0 + 9 * kMs, kT0 + kMs, 999, {}},
                                                       {kOther, INT64_MIN, kT0, 999, {}},
                                                       {kOther, kT0, INT64_MAX, 999, {}},
                                                       T(kJob, 0, 5, 10)}),
                                                 {kJob}, kT0, 5 * kMs, 2);
  EXPECT_NEAR(bad[0], 1.0, 1e-6);
  EXPECT_EQ(bad[1], 0.0f);
}

// Each link's cells times its node's share; a node where the job moved nothing leaves.
TEST(JobShare, WeighByJobScalesRowsAndDropsOtherNodes) {
  HeatmapModel m;
  m.rows = {"n1/eth0 tx", "n1/eth0 rx", "n2/eth0 tx"};
  m.row_nodes = {"n1", "n1", "n2"};
  m.start_unix_ns = kT0;
  m.bucket_ns = 10 * kMs;
  m.cols = 2;
  m.values = {0.8f, 0.6f, 0.4f, NAN, 0.9f, 0.9f};
  const std::map<std::string, NodeTransfers> by_node = {
      {"n1", Held({T(kJob, 0, 10, 300), T(kOther, 0, 20, 200)})},  // 300 of 400, then 0 of 100
      {"n2", Held({T(kOther, 0, 20, 500)})}};
  EXPECT_EQ(WeighByJob(&m, by_node, {kJob}), 2u);
  ASSERT_EQ(m.rows, (std::vector<std::string>{"n1/eth0 tx", "n1/eth0 rx"}));
  EXPECT_EQ(m.row_nodes, (std::vector<std::string>{"n1", "n1"}));
  ASSERT_EQ(m.values.size(), 4u);
  EXPECT_NEAR(m.at(0, 0), 0.8 * 0.75, 1e-6);
  EXPECT_EQ(m.at(0, 1), 0.0f);
  EXPECT_NEAR(m.at(1, 0), 0.4 * 0.75, 1e-6);
  EXPECT_TRUE(std::isnan(m.at(1, 1)));  // no utilization there stays no data
  // A dropped row before kept ones: they move up with their own values.
  HeatmapModel first;
  first.rows = {"n2/eth0 tx", "n1/eth0 tx"};
  first.row_nodes = {"n2", "n1"};
  first.start_unix_ns = kT0;
  first.bucket_ns = 10 * kMs;
  first.cols = 2;
  first.values = {0.9f, 0.9f, 0.8f, 0.6f};
  EXPECT_EQ(WeighByJob(&first, by_node, {kJob}), 1u);
  EXPECT_EQ(first.rows, (std::vector<std::string>{"n1/eth0 tx"}));
  ASSERT_EQ(first.values.size(), 2u);
  EXPECT_NEAR(first.at(0, 0), 0.8 * 0.75, 1e-6);
  EXPECT_EQ(first.at(0, 1), 0.0f);
}

// A multi-rail node: the job on mlx5_0:1 (its QPs), another job on mlx5_1:1, a third spread over
// both, a fourth whose ports are unknown (spread over the 2 ports the known ones used). On
// mlx5_0:1 the job moved 100 of 100 + 50 + 50 bytes; on mlx5_1:1 nothing; node-wide 100 of 400.
TEST(JobShare, EachPortCountsTheTransfersOfTheProcessesWithQueuePairsOnIt) {
  const NodeTransfers node =
      Held({T(kJob, 0, 10, 100, {"mlx5_0:1"}), T(kOther, 0, 10, 100, {"mlx5_1:1"}),
            T(0xc, 0, 10, 100, {"mlx5_0:1", "mlx5_1:1"}), T(0xd, 0, 10, 100)});
  EXPECT_NEAR(JobShareColumns(node, {kJob}, kT0, 10 * kMs, 1, "mlx5_0:1")[0], 0.5, 1e-6);
  EXPECT_EQ(JobShareColumns(node, {kJob}, kT0, 10 * kMs, 1, "mlx5_1:1")[0], 0.0f);
  EXPECT_NEAR(JobShareColumns(node, {kJob}, kT0, 10 * kMs, 1)[0], 0.25, 1e-6);
  // A port no known transfer used carries only the unknown one's part: none of it the job's.
  EXPECT_EQ(JobShareColumns(node, {kJob}, kT0, 10 * kMs, 1, "eth0:1")[0], 0.0f);
  EXPECT_NEAR(JobShareColumns(node, {0xd}, kT0, 10 * kMs, 1, "eth0:1")[0], 1.0, 1e-6);
  // With no port known anywhere every port gets the node's share.
  const NodeTransfers blind = Held({T(kJob, 0, 10, 100), T(kOther, 0, 10, 300)});
  EXPECT_NEAR(JobShareColumns(blind, {kJob}, kT0, 10 * kMs, 1, "mlx5_1:1")[0], 0.25, 1e-6);
}

// The heat map's rows name their port: the job's rail keeps its share, the other rail leaves.
TEST(JobShare, WeighByJobWeighsEachRowOnItsOwnPort) {
  HeatmapModel m;
  m.rows = {"n1/mlx5_0:1 tx", "n1/mlx5_1:1 tx"};
  m.row_nodes = {"n1", "n1"};
  m.row_ports = {"mlx5_0:1", "mlx5_1:1"};
  m.start_unix_ns = kT0;
  m.bucket_ns = 10 * kMs;
  m.cols = 1;
  m.values = {0.8f, 0.9f};
  const std::map<std::string, NodeTransfers> by_node = {
      {"n1", Held({T(kJob, 0, 10, 300, {"mlx5_0:1"}), T(kOther, 0, 10, 100, {"mlx5_0:1"}),
                   T(kOther, 0, 10, 900, {"mlx5_1:1"})})}};
  EXPECT_EQ(WeighByJob(&m, by_node, {kJob}), 1u);
  EXPECT_EQ(m.rows, (std::vector<std::string>{"n1/mlx5_0:1 tx"}));
  EXPECT_EQ(m.row_ports, (std::vector<std::string>{"mlx5_0:1"}));
  ASSERT_EQ(m.values.size(), 1u);
  EXPECT_NEAR(m.at(0, 0), 0.8 * 0.75, 1e-6);
}

}  // namespace
}  // namespace fabricscope::exporters

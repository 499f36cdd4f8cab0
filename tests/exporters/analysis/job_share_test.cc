// One job's share of a node's network bytes per time bucket, and the links heat map scaled to it
// (exporters/analysis/job_share.h, /heatmap/links?job=).
#include "exporters/analysis/job_share.h"

#include <gtest/gtest.h>

#include <cmath>

namespace fabricscope::exporters {
namespace {

constexpr int64_t kMs = 1'000'000;
constexpr uint64_t kJob = 0xa, kOther = 0xb;

NodeTransfer T(uint64_t comm, double start_ms, double end_ms, uint64_t bytes) {
  return {comm, static_cast<int64_t>(start_ms * kMs), static_cast<int64_t>(end_ms * kMs), bytes};
}

// Bytes pro rata to each transfer's overlap with a bucket, a long transfer spread evenly over
// the buckets it spans: the job's 100 bytes/ms over [2.5, 17.5) ms against another
// communicator's 100 bytes/ms over [0, 20) ms.
TEST(JobShare, BytesProRataPerBucket) {
  const std::vector<float> s =
      JobShareColumns({T(kJob, 2.5, 17.5, 1'500), T(kOther, 0, 20, 2'000)}, {kJob}, 0, 5 * kMs, 5);
  ASSERT_EQ(s.size(), 5u);
  EXPECT_NEAR(s[0], 250.0 / 750, 1e-6);
  EXPECT_NEAR(s[1], 0.5, 1e-6);
  EXPECT_NEAR(s[2], 0.5, 1e-6);
  EXPECT_NEAR(s[3], 250.0 / 750, 1e-6);
  EXPECT_EQ(s[4], 0.0f);  // nothing moved: not the job's
}

// Before the oldest record held the share is unknown (NaN), not 0; a transfer of no duration
// counts whole in its bucket; none at all: all unknown.
TEST(JobShare, UnknownBeforeTheRecordsAndInstantsWhole) {
  const std::vector<float> s =
      JobShareColumns({T(kOther, 10, 12, 300), T(kJob, 11, 11, 100)}, {kJob}, 0, 5 * kMs, 4);
  EXPECT_TRUE(std::isnan(s[0]));
  EXPECT_TRUE(std::isnan(s[1]));  // ends at 10 ms, where the oldest begins
  EXPECT_NEAR(s[2], 100.0 / 400, 1e-6);
  EXPECT_EQ(s[3], 0.0f);
  for (float v : JobShareColumns({}, {kJob}, 0, kMs, 3)) EXPECT_TRUE(std::isnan(v));
}

// Each link's cells times its node's share; a node where the job moved nothing leaves.
TEST(JobShare, WeighByJobScalesRowsAndDropsOtherNodes) {
  HeatmapModel m;
  m.rows = {"n1/eth0 tx", "n1/eth0 rx", "n2/eth0 tx"};
  m.row_nodes = {"n1", "n1", "n2"};
  m.start_unix_ns = 0;
  m.bucket_ns = 10 * kMs;
  m.cols = 2;
  m.values = {0.8f, 0.6f, 0.4f, NAN, 0.9f, 0.9f};
  const std::map<std::string, std::vector<NodeTransfer>> by_node = {
      {"n1", {T(kJob, 0, 10, 300), T(kOther, 0, 20, 200)}},  // 300 of 400, then 0 of 100
      {"n2", {T(kOther, 0, 20, 500)}}};
  EXPECT_EQ(WeighByJob(&m, by_node, {kJob}), 2u);
  ASSERT_EQ(m.rows, (std::vector<std::string>{"n1/eth0 tx", "n1/eth0 rx"}));
  EXPECT_EQ(m.row_nodes, (std::vector<std::string>{"n1", "n1"}));
  ASSERT_EQ(m.values.size(), 4u);
  EXPECT_NEAR(m.at(0, 0), 0.8 * 0.75, 1e-6);
  EXPECT_EQ(m.at(0, 1), 0.0f);
  EXPECT_NEAR(m.at(1, 0), 0.4 * 0.75, 1e-6);
  EXPECT_TRUE(std::isnan(m.at(1, 1)));  // no utilization there stays no data
}

}  // namespace
}  // namespace fabricscope::exporters

#include "agent/utilization_series.h"

#include <gtest/gtest.h>

#include "collectors/common/utilization_codec.h"
#include "tests/common/units.h"

namespace fabricscope::agent {
namespace {

constexpr uint64_t kRate = 1'000'000'000;  // 1 GB/s: 1,000,000 bytes per ms = utilization 1

std::vector<double> Decode(const std::string& s) {
  std::vector<double> out;
  for (char c : s) out.push_back(common::DecodeUtilization(static_cast<uint8_t>(c)));
  return out;
}

TEST(UtilizationCodec, RoundsToQuarterPercentStepsAndMarksMissing) {
  EXPECT_EQ(common::EncodeUtilization(0.5), 125);
  EXPECT_EQ(common::EncodeUtilization(0.0021), 1);
  EXPECT_EQ(common::EncodeUtilization(1.0), 250);
  EXPECT_EQ(common::EncodeUtilization(3.0), 254);
  EXPECT_EQ(common::EncodeUtilization(-0.1), 0);
  EXPECT_EQ(common::EncodeUtilization(NAN), common::kUtilizationMissing);
  EXPECT_DOUBLE_EQ(common::DecodeUtilization(125), 0.5);
  EXPECT_TRUE(std::isnan(common::DecodeUtilization(255)));
}

TEST(UtilizationSeries, SamplesOnTheBucketGridFillOneBucketEach) {
  UtilizationSeriesBuilder b(10 * kMs, kMs);
  b.Reset(100 * kMs);
  EXPECT_EQ(b.buckets(), 10u);
  b.Add(101 * kMs, kMs, 500'000);    // bucket 0 at 0.5
  b.Add(102 * kMs, kMs, 1'000'000);  // bucket 1 at 1.0
  b.Add(104 * kMs, kMs, 100'000);    // bucket 3 at 0.1; bucket 2 not covered
  std::string out;
  b.Encode(kRate, 110 * kMs, &out);
  const std::vector<double> u = Decode(out);
  ASSERT_EQ(u.size(), 10u);
  EXPECT_DOUBLE_EQ(u[0], 0.5);
  EXPECT_DOUBLE_EQ(u[1], 1.0);
  EXPECT_TRUE(std::isnan(u[2]));
  EXPECT_DOUBLE_EQ(u[3], 0.1);
  EXPECT_TRUE(std::isnan(u[9]));
}

TEST(UtilizationSeries, ALongSampleSpreadsOverTheBucketsItCovers) {
  UtilizationSeriesBuilder b(10 * kMs, kMs);
  b.Reset(0);
  // 2.5 ms ending at 4 ms: covers half of bucket 1 and all of 2 and 3, at 0.8 throughout.
  b.Add(4 * kMs, 2'500'000, 2'000'000);
  // Short samples (100 us) within bucket 5: their utilization is the bytes over covered time.
  b.Add(5'100'000, 100'000, 20'000);
  b.Add(5'200'000, 100'000, 40'000);
  std::string out;
  b.Encode(kRate, 6 * kMs, &out);  // a partial window: 6 buckets
  const std::vector<double> u = Decode(out);
  ASSERT_EQ(u.size(), 6u);
  EXPECT_TRUE(std::isnan(u[0]));
  EXPECT_NEAR(u[1], 0.8, 0.004);
  EXPECT_NEAR(u[2], 0.8, 0.004);
  EXPECT_NEAR(u[3], 0.8, 0.004);
  EXPECT_NEAR(u[5], 0.3, 0.004);
}

TEST(UtilizationSeries, AStraddlingSampleFillsTheLeadBucketAndOlderPartsAreDropped) {
  UtilizationSeriesBuilder b(4 * kMs, kMs);
  b.Reset(10 * kMs);
  b.Add(11 * kMs, 3 * kMs, 3'000'000);  // [8, 11) ms: 8-9 dropped, 9-10 is the lead bucket
  b.Add(16 * kMs, 3 * kMs, 3'000'000);  // [13, 16) ms: 14-16 after the window end, dropped
  std::string out;
  EXPECT_EQ(b.Encode(kRate, 14 * kMs, &out), 9 * kMs);
  std::vector<double> u = Decode(out);
  ASSERT_EQ(u.size(), 5u);  // lead + 4
  EXPECT_NEAR(u[0], 1.0, 0.004);
  EXPECT_NEAR(u[1], 1.0, 0.004);
  EXPECT_TRUE(std::isnan(u[2]));
  EXPECT_TRUE(std::isnan(u[3]));
  EXPECT_NEAR(u[4], 1.0, 0.004);
  b.Reset(14 * kMs);
  out.clear();
  EXPECT_EQ(b.Encode(kRate, 18 * kMs, &out), 14 * kMs);  // no lead data: starts on time
  u = Decode(out);
  ASSERT_EQ(u.size(), 4u);
  for (double v : u) EXPECT_TRUE(std::isnan(v));
}

}  // namespace
}  // namespace fabricscope::agent

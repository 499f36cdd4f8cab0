#include "exporters/analysis/temporal.h"

#include <gtest/gtest.h>

#include <cmath>
#include <numbers>
#include <random>

namespace fabricscope::exporters {
namespace {

// A training-like traffic pattern: a burst of `on` buckets every `period` buckets, with noise.
std::vector<double> Steps(size_t n, double period, double on, double noise, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> gauss(0, noise);
  std::vector<double> x(n);
  for (size_t i = 0; i < n; ++i) {
    const double phase = std::fmod(static_cast<double>(i), period);
    x[i] = (phase < on ? 100.0 : 5.0) + gauss(rng);
  }
  return x;
}

TEST(DetectPeriod, FindsTheStepPeriodOfNoisyBursts) {
  // 20 s at 10 ms: a 350 ms step (35 buckets) with a 60 ms all-reduce burst.
  for (uint32_t seed : {1u, 2u, 3u}) {
    const auto p = DetectPeriod(Steps(2000, 35, 6, 20, seed), 0.01);
    ASSERT_TRUE(p.has_value()) << seed;
    EXPECT_NEAR(p->period_seconds, 0.35, 0.35 * 0.02) << seed;
    EXPECT_GT(p->strength, 0.5);
  }
}

TEST(DetectPeriod, NonIntegerPeriodIsRefinedBetweenLags) {
  std::vector<double> x(2000);
  for (size_t i = 0; i < x.size(); ++i) {
    x[i] = std::sin(2 * std::numbers::pi * static_cast<double>(i) / 47.5);
  }
  const auto p = DetectPeriod(x, 0.001);
  ASSERT_TRUE(p.has_value());
  EXPECT_NEAR(p->period_seconds, 0.0475, 0.0003);
}

TEST(DetectPeriod, PrefersTheFundamentalOverItsMultiples) {
  const auto p = DetectPeriod(Steps(3000, 20, 3, 2, 7), 0.01);
  ASSERT_TRUE(p.has_value());
  EXPECT_NEAR(p->period_seconds, 0.2, 0.004);
}

TEST(DetectPeriod, WhiteNoiseHasNoPeriod) {
  std::mt19937 rng(42);
  std::normal_distribution<double> gauss(50, 10);
  for (int trial = 0; trial < 5; ++trial) {
    std::vector<double> x(2000);
    for (double& v : x) v = gauss(rng);
    EXPECT_FALSE(DetectPeriod(x, 0.01).has_value()) << trial;
  }
}

TEST(DetectPeriod, ConstantTrendAndShortSeriesHaveNoPeriod) {
  EXPECT_FALSE(DetectPeriod(std::vector<double>(500, 3.0), 0.01).has_value());
  std::vector<double> ramp(500);
  for (size_t i = 0; i < ramp.size(); ++i) ramp[i] = static_cast<double>(i);
  // A ramp's autocorrelation crosses zero but has no later peak above the threshold.
  EXPECT_FALSE(DetectPeriod(ramp, 0.01).has_value());
  EXPECT_FALSE(DetectPeriod(Steps(10, 3, 1, 0, 1), 0.01).has_value());
  EXPECT_FALSE(DetectPeriod(Steps(500, 10, 2, 0, 1), 0).has_value());
}

TEST(DetectPeriod, MissingBucketsCountAsTheMean) {
  auto x = Steps(2000, 25, 4, 5, 9);
  for (size_t i = 300; i < 340; ++i) x[i] = NAN;
  const auto p = DetectPeriod(x, 0.01);
  ASSERT_TRUE(p.has_value());
  EXPECT_NEAR(p->period_seconds, 0.25, 0.005);
}

TEST(RobustZScore, ModifiedZScoreOfIglewiczAndHoaglin) {
  // Baseline 10, 11, 12, 13, 14: median 12, MAD 1 -> z(20) = 0.6745 x 8 = 5.396.
  const RobustZ z = RobustZScore({10, 11, 12, 13, 14}, 20);
  EXPECT_DOUBLE_EQ(z.median, 12);
  EXPECT_DOUBLE_EQ(z.scale, 1);
  EXPECT_NEAR(z.z, 5.396, 1e-9);
  EXPECT_NEAR(RobustZScore({10, 11, 12, 13, 14}, 11).z, -0.6745, 1e-9);
  // An outlier in the baseline does not move it (unlike mean/stddev).
  EXPECT_NEAR(RobustZScore({10, 11, 12, 13, 1e9}, 20).z, 0.6745 * 8, 1e-9);
  // Even count: median of the two middle values.
  EXPECT_DOUBLE_EQ(RobustZScore({1, 2, 3, 4}, 0).median, 2.5);
}

TEST(RobustZScore, ZeroMadFallsBackToMeanDeviationThenToTheCap) {
  // MAD 0 (most values equal), mean absolute deviation (0+0+0+0+5)/5 = 1.
  const RobustZ z = RobustZScore({7, 7, 7, 7, 12}, 9.506628);
  EXPECT_DOUBLE_EQ(z.median, 7);
  EXPECT_NEAR(z.scale, 1.253314, 1e-9);
  EXPECT_NEAR(z.z, 2.0, 1e-6);
  EXPECT_EQ(RobustZScore({0, 0, 0}, 0).z, 0);
  EXPECT_EQ(RobustZScore({0, 0, 0}, 1).z, kRobustZCap);
  EXPECT_EQ(RobustZScore({0, 0, 0}, -1).z, -kRobustZCap);
  EXPECT_EQ(RobustZScore({}, 5).z, 0);
}

}  // namespace
}  // namespace fabricscope::exporters

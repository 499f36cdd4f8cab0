#include "agent/microburst.h"

#include <gtest/gtest.h>

#include <vector>

#include "tests/common/units.h"

namespace fabricscope::agent {
namespace {

// Feeds utilizations as consecutive 1 ms samples (sample k ends at (k+1) ms, bytes = 1000 x
// utilization) and returns the bursts that ended.
std::vector<MicroburstEvent> Feed(MicroburstDetector& d, const std::vector<double>& utils,
                                  int64_t first_end_ns = kMs) {
  std::vector<MicroburstEvent> out;
  int64_t t = first_end_ns;
  for (double u : utils) {
    if (auto e = d.Add(t, kMs, u, static_cast<uint64_t>(u * 1000))) out.push_back(*e);
    t += kMs;
  }
  return out;
}

TEST(MicroburstDetector, OneBurstWithExactEdges) {
  MicroburstDetector d;
  auto bursts = Feed(d, {0.1, 0.2, 0.95, 1.0, 0.92, 0.3, 0.1});
  ASSERT_EQ(bursts.size(), 1u);
  EXPECT_EQ(bursts[0].start_ns, 2 * kMs);  // start of the third sample's interval
  EXPECT_EQ(bursts[0].duration_ns, 3 * kMs);
  EXPECT_DOUBLE_EQ(bursts[0].peak_utilization, 1.0);
  EXPECT_EQ(bursts[0].bytes, 950u + 1000u + 920u);
  EXPECT_EQ(bursts[0].samples, 3u);
  EXPECT_FALSE(d.in_burst());
}

TEST(MicroburstDetector, EnterThresholdIsInclusive) {
  MicroburstDetector d;
  EXPECT_EQ(Feed(d, {0.9, 0.1}).size(), 1u);
  MicroburstDetector d2;
  EXPECT_TRUE(Feed(d2, {0.8999, 0.1}).empty());
}

TEST(MicroburstDetector, HysteresisKeepsTheBurstBetweenThresholds) {
  MicroburstDetector d;
  // 0.75 and 0.71 are below enter but not below exit: the burst goes on.
  auto bursts = Feed(d, {0.95, 0.75, 0.71, 0.96, 0.69});
  ASSERT_EQ(bursts.size(), 1u);
  EXPECT_EQ(bursts[0].duration_ns, 4 * kMs);
}

TEST(MicroburstDetector, BetweenThresholdsNeverStartsABurst) {
  MicroburstDetector d;
  EXPECT_TRUE(Feed(d, {0.8, 0.85, 0.89, 0.8, 0.1}).empty());
}

TEST(MicroburstDetector, ExitIsStrictlyBelow) {
  MicroburstDetector d;
  auto bursts = Feed(d, {0.95, 0.7, 0.69});
  ASSERT_EQ(bursts.size(), 1u);
  EXPECT_EQ(bursts[0].samples, 2u);  // 0.7 is not below 0.7
}

TEST(MicroburstDetector, TwoSeparateBursts) {
  MicroburstDetector d;
  auto bursts = Feed(d, {0.95, 0.1, 0.1, 1.2, 1.1, 0.0});
  ASSERT_EQ(bursts.size(), 2u);
  EXPECT_EQ(bursts[0].start_ns, 0);
  EXPECT_EQ(bursts[1].start_ns, 3 * kMs);
  EXPECT_DOUBLE_EQ(bursts[1].peak_utilization, 1.2);
}

TEST(MicroburstDetector, OpenBurstIsNotReportedUntilItEnds) {
  MicroburstDetector d;
  EXPECT_TRUE(Feed(d, {0.95, 0.96, 0.97}).empty());
  EXPECT_TRUE(d.in_burst());
  auto e = d.Break();
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->duration_ns, 3 * kMs);
  EXPECT_FALSE(d.Break().has_value());
}

TEST(MicroburstDetector, CustomThresholds) {
  MicroburstDetector d(MicroburstThresholds{0.5, 0.4});
  auto bursts = Feed(d, {0.5, 0.45, 0.39});
  ASSERT_EQ(bursts.size(), 1u);
  EXPECT_EQ(bursts[0].samples, 2u);
}

TEST(MicroburstDetector, UnevenIntervalsAddUp) {
  MicroburstDetector d;
  EXPECT_FALSE(d.Add(100'000, 100'000, 0.95, 10).has_value());
  EXPECT_FALSE(d.Add(350'000, 250'000, 0.95, 20).has_value());
  auto e = d.Add(450'000, 100'000, 0.0, 0);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->start_ns, 0);
  EXPECT_EQ(e->duration_ns, 350'000);
  EXPECT_EQ(e->bytes, 30u);
}

}  // namespace
}  // namespace fabricscope::agent

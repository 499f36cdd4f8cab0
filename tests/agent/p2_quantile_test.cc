// P2Quantile (agent/p2_quantile.h): the streaming quantile estimate the slow-collective
// rule compares each collective with.
#include "agent/p2_quantile.h"

#include <algorithm>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace fabricscope::agent {
namespace {

TEST(P2QuantileTest, TracksTheQuantileOfAStream) {
  std::mt19937 rng(1);
  std::exponential_distribution<double> exp(1.0);
  P2Quantile q(0.99);
  std::vector<double> all;
  for (int i = 0; i < 20000; ++i) {
    const double x = exp(rng);
    q.Add(x);
    all.push_back(x);
  }
  std::sort(all.begin(), all.end());
  const double exact = all[static_cast<size_t>(0.99 * all.size())];
  EXPECT_NEAR(q.Value(), exact, 0.05 * exact);
  P2Quantile few(0.5);
  for (double x : {3.0, 1.0, 2.0}) few.Add(x);
  EXPECT_EQ(few.Value(), 2.0);
}

}  // namespace
}  // namespace fabricscope::agent

#include "exporters/analysis/loss_patterns.h"

#include <gtest/gtest.h>

#include <random>

namespace fabricscope::exporters {
namespace {

TEST(LossCounters, NamesAndWindowEvents) {
  EXPECT_TRUE(IsLossCounter("hw_counters", "out_of_sequence"));
  EXPECT_TRUE(IsLossCounter("ethtool", "rx_prio3_discards"));
  EXPECT_TRUE(IsLossCounter("statistics", "rx_dropped"));
  EXPECT_TRUE(IsLossCounter("ethtool", "rx_out_of_buffer"));
  EXPECT_TRUE(IsLossCounter("hw_counters", "ip4InDiscards"));  // irdma
  EXPECT_FALSE(IsLossCounter("hw_counters", "np_cnp_sent"));
  EXPECT_FALSE(IsLossCounter("hw_counters", "cnpSent"));
  EXPECT_FALSE(IsLossCounter("statistics", "rx_bytes"));
  v1::PortWindow w;
  auto* e = w.add_errors();
  e->set_kind("symbol_error");
  e->set_delta(3);
  auto* c = w.add_counters();
  c->set_group("hw_counters");
  c->set_name("packet_seq_err");
  c->set_delta(4);
  c = w.add_counters();
  c->set_group("hw_counters");
  c->set_name("np_cnp_sent");  // congestion, not loss
  c->set_delta(100);
  c = w.add_counters();
  c->set_group("tcp");
  c->set_name("RetransSegs");
  c->set_delta(5);
  EXPECT_EQ(LossEventsInWindow(w), 12u);
}

// One mlx5 buffer drop raises rx_discards_phy and rx_prio<p>_discards of its priority: counted
// once, from rx_discards_phy; without it the per-priority counters are the port's count.
TEST(LossCounters, APerPriorityDiscardIsNotCountedAgainWithTheDiscardsOfThePort) {
  auto counter = [](v1::PortWindow& w, const char* name, uint64_t delta) {
    v1::CounterValue* c = w.add_counters();
    c->set_group("ethtool");
    c->set_name(name);
    c->set_delta(delta);
  };
  v1::PortWindow both;
  counter(both, "rx_discards_phy", 7);
  counter(both, "rx_prio3_discards", 5);
  counter(both, "rx_prio4_discards", 2);
  counter(both, "rx_out_of_buffer", 1);  // a later stage (receive queue): its own drops
  EXPECT_EQ(LossEventsInWindow(both), 8u);
  v1::PortWindow prio_only;
  counter(prio_only, "rx_prio3_discards", 5);
  counter(prio_only, "rx_prio4_discards", 2);
  EXPECT_EQ(LossEventsInWindow(prio_only), 7u);
  // rx_discards_phy read but still (delta 0): its presence decides, not its delta.
  v1::PortWindow quiet_phy;
  counter(quiet_phy, "rx_discards_phy", 0);
  counter(quiet_phy, "rx_prio3_discards", 0);
  EXPECT_EQ(LossEventsInWindow(quiet_phy), 0u);
}

TEST(Gini, EvenIsZeroAllInOneIsNMinusOneOverN) {
  EXPECT_DOUBLE_EQ(Gini({5, 5, 5, 5}), 0);
  EXPECT_DOUBLE_EQ(Gini({0, 0, 0, 8}), 0.75);
  EXPECT_NEAR(Gini({1, 2, 3, 4}), 0.25, 1e-12);  // sum (2i-5) x_i / (4 x 10) = 10 / 40
  EXPECT_DOUBLE_EQ(Gini({3}), 0);
  EXPECT_DOUBLE_EQ(Gini({0, 0}), 0);
}

TEST(Rayleigh, PhaseLockedEventsAreSignificantUniformOnesAreNot) {
  const double period = 0.5;
  std::vector<int64_t> locked, uniform;
  std::mt19937 rng(3);
  std::uniform_int_distribution<int64_t> any(0, 100'000'000'000);
  std::normal_distribution<double> jitter(0, 0.01);
  for (int i = 0; i < 40; ++i) {
    locked.push_back(1'000'000'000'000 + int64_t{i} * 500'000'000 +
                     static_cast<int64_t>((0.1 + jitter(rng)) * 1e9));
    uniform.push_back(any(rng));
  }
  const Rayleigh l = RayleighTest(locked, period);
  EXPECT_GT(l.resultant, 0.9);
  EXPECT_LT(l.p_value, 1e-6);
  const Rayleigh u = RayleighTest(uniform, period);
  EXPECT_LT(u.resultant, 0.4);
  EXPECT_GT(u.p_value, 0.01);
  EXPECT_DOUBLE_EQ(RayleighTest({5}, period).p_value, 1);
  EXPECT_DOUBLE_EQ(RayleighTest(locked, 0).p_value, 1);
}

TEST(ConcentratedGroup, OneLinkHoldingMostLossIsSystematic) {
  EXPECT_EQ(ConcentratedGroup({2, 40, 3, 1}), 1);
  EXPECT_EQ(ConcentratedGroup({10, 11, 9, 10}), -1);  // spread evenly
  EXPECT_EQ(ConcentratedGroup({2, 3, 1}), -1);        // too few events
  EXPECT_EQ(ConcentratedGroup({100}), -1);            // one link: nothing to compare
  EXPECT_EQ(ConcentratedGroup({30, 30}), -1);         // two links: needs all on one
  EXPECT_EQ(ConcentratedGroup({0, 30}), 1);
  EXPECT_EQ(ConcentratedGroup({20, 15, 15}), -1);  // 0.4 < 0.5
}

}  // namespace
}  // namespace fabricscope::exporters

#include "exporters/analysis/loss_patterns.h"

#include <gtest/gtest.h>

#include <random>

#include "tests/common/agent_counter.h"

namespace fabricscope::exporters {
namespace {

using testing::AddAgentCounter;

bool Loss(const char* group, const char* name) {
  v1::PortWindow w;
  return IsLossCounter(*AddAgentCounter(&w, group, name, 1));
}

TEST(LossCounters, NamesAndWindowEvents) {
  EXPECT_TRUE(Loss("hw_counters", "out_of_sequence"));
  EXPECT_TRUE(Loss("ethtool", "rx_prio3_discards"));
  EXPECT_TRUE(Loss("statistics", "rx_dropped"));
  EXPECT_TRUE(Loss("ethtool", "rx_out_of_buffer"));
  EXPECT_TRUE(Loss("hw_counters", "ip4InDiscards"));  // irdma
  EXPECT_FALSE(Loss("hw_counters", "np_cnp_sent"));
  EXPECT_FALSE(Loss("hw_counters", "cnpSent"));
  EXPECT_FALSE(Loss("statistics", "rx_bytes"));
  v1::PortWindow w;
  auto* e = w.add_errors();
  e->set_kind("symbol_error");
  e->set_delta(3);
  AddAgentCounter(&w, "hw_counters", "packet_seq_err", 4);
  AddAgentCounter(&w, "hw_counters", "np_cnp_sent", 100);  // congestion, not loss
  AddAgentCounter(&w, "tcp", "RetransSegs", 5);
  EXPECT_EQ(LossEventsInWindow(w), 12u);
}

// The aggregator reads the meaning the agent set at discovery, not the name: a counter sent
// without one is no loss whatever its name, and a value outside collectors::Meaning (a newer
// or hostile producer) counts as none.
TEST(LossCounters, TheMeaningOnTheWireDecidesNotTheName) {
  v1::PortWindow w;
  v1::CounterValue* named = w.add_counters();
  named->set_group("hw_counters");
  named->set_name("out_of_sequence");
  named->set_delta(9);
  EXPECT_FALSE(IsLossCounter(*named));
  v1::CounterValue* bogus = AddAgentCounter(&w, "hw_counters", "packet_seq_err", 4);
  bogus->set_meaning(static_cast<uint32_t>(collectors::kMeaningCount));
  EXPECT_FALSE(IsLossCounter(*bogus));
  v1::CounterValue* renamed = AddAgentCounter(&w, "hw_counters", "out_of_sequence", 2);
  renamed->set_name("a_name_no_table_knows");
  EXPECT_TRUE(IsLossCounter(*renamed));
  EXPECT_EQ(LossEventsInWindow(w), 2u);
}

// One mlx5 buffer drop raises rx_discards_phy and rx_prio<p>_discards of its priority: counted
// once, from rx_discards_phy; without it the per-priority counters are the port's count.
TEST(LossCounters, APerPriorityDiscardIsNotCountedAgainWithTheDiscardsOfThePort) {
  auto counter = [](v1::PortWindow& w, const char* name, uint64_t delta) {
    AddAgentCounter(&w, "ethtool", name, delta);
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

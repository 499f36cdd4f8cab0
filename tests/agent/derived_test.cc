#include "agent/derived.h"

#include <gtest/gtest.h>

#include <deque>

namespace fabricscope::agent {
namespace {

// Holds the strings CounterWindow points to; each counter's meaning is what discovery sets
// (collectors::MeaningOf of its group and name).
struct Counters {
  void Add(const std::string& group, const std::string& name, uint64_t total, uint64_t delta) {
    names.push_back(name);
    list.push_back(
        CounterWindow{&names.back(), collectors::MeaningOf(group, name).meaning, total, delta});
  }
  std::deque<std::string> names;
  std::vector<CounterWindow> list;
};

TEST(ComputeDerived, RdmaTransportSignalsByHand) {
  Counters c;
  c.Add("hw_counters", "out_of_sequence", 1000, 5);
  c.Add("hw_counters", "packet_seq_err", 40, 2);
  c.Add("hw_counters", "local_ack_timeout_err", 7, 1);
  c.Add("hw_counters", "duplicate_request", 3, 0);
  c.Add("hw_counters", "roce_adp_retrans", 50, 7);
  c.Add("hw_counters", "np_cnp_sent", 900, 30);
  c.Add("hw_counters", "rp_cnp_handled", 800, 20);
  c.Add("hw_counters", "np_ecn_marked_roce_packets", 5000, 250);
  c.Add("hw_counters", "out_of_buffer", 12, 0);
  v1::DerivedSignals d;
  ComputeDerived(c.list, /*rx_packets_delta=*/10'000, /*window_seconds=*/2.0, 0, &d);
  EXPECT_DOUBLE_EQ(d.loss_ratio(), 5.0 / 10'000);  // 0.05 %
  EXPECT_EQ(d.out_of_sequence_total(), 1000u);
  EXPECT_EQ(d.retransmits_total(), 40u + 7 + 3 + 50);
  EXPECT_DOUBLE_EQ(d.retransmits_per_second(), (2.0 + 1 + 0 + 7) / 2.0);
  EXPECT_EQ(d.cnp_sent_total(), 900u);
  EXPECT_DOUBLE_EQ(d.cnp_sent_per_second(), 15.0);
  EXPECT_EQ(d.cnp_handled_total(), 800u);
  EXPECT_DOUBLE_EQ(d.cnp_handled_per_second(), 10.0);
  EXPECT_EQ(d.ecn_marked_total(), 5000u);
  EXPECT_DOUBLE_EQ(d.ecn_marked_ratio(), 0.025);
  ASSERT_EQ(d.discards_size(), 1);
  EXPECT_EQ(d.discards(0).reason(), "out_of_buffer");
  EXPECT_EQ(d.discards(0).total(), 12u);
  EXPECT_FALSE(d.has_bit_error_ratio());
  EXPECT_FALSE(d.has_tcp_retransmitted_ratio());
}

TEST(ComputeDerived, NoTrafficMeansZeroRatiosNotNaN) {
  Counters c;
  c.Add("hw_counters", "out_of_sequence", 3, 0);
  c.Add("hw_counters", "np_ecn_marked_roce_packets", 3, 0);
  v1::DerivedSignals d;
  ComputeDerived(c.list, 0, 1.0, 0, &d);
  EXPECT_EQ(d.loss_ratio(), 0.0);
  EXPECT_EQ(d.ecn_marked_ratio(), 0.0);
}

TEST(ComputeDerived, EthtoolPauseDiscardsAndBitErrorRatio) {
  Counters c;
  // mlx5 counters.rst: pause durations in microseconds.
  c.Add("ethtool", "rx_prio3_pause_duration", 2'500'000, 250'000);  // 0.25 s paused in 1 s
  c.Add("ethtool", "tx_prio0_pause_duration", 1'000, 0);
  c.Add("ethtool", "rx_prio3_pause", 99, 9);  // a count, not a duration: ignored here
  c.Add("ethtool", "rx_discards_phy", 17, 1);
  c.Add("ethtool", "rx_prio3_discards", 4, 0);
  c.Add("ethtool", "rx_corrected_bits_phy", 1'000, 30);
  c.Add("ethtool", "rx_bits_phy", 1'000'000'000'000, 100'000'000'000);
  v1::DerivedSignals d;
  ComputeDerived(c.list, 0, 1.0, 0, &d);
  ASSERT_EQ(d.pause_size(), 2);
  EXPECT_EQ(d.pause(0).priority(), 3u);
  EXPECT_EQ(d.pause(0).direction(), v1::DIRECTION_RECEIVE);
  EXPECT_DOUBLE_EQ(d.pause(0).seconds_total(), 2.5);
  EXPECT_DOUBLE_EQ(d.pause(0).time_ratio(), 0.25);
  EXPECT_EQ(d.pause(1).priority(), 0u);
  EXPECT_EQ(d.pause(1).direction(), v1::DIRECTION_TRANSMIT);
  EXPECT_DOUBLE_EQ(d.pause(1).seconds_total(), 0.001);
  ASSERT_EQ(d.discards_size(), 2);
  EXPECT_EQ(d.discards(0).reason(), "rx_discards_phy");
  EXPECT_EQ(d.discards(1).reason(), "rx_prio3_discards");
  EXPECT_DOUBLE_EQ(d.bit_error_ratio(), 3e-10);
}

TEST(ComputeDerived, NetdevLossFromDropsOverReceived) {
  Counters c;
  c.Add("statistics", "rx_dropped", 10, 2);
  c.Add("statistics", "rx_missed_errors", 5, 1);
  v1::DerivedSignals d;
  ComputeDerived(c.list, 997, 1.0, 0, &d);
  EXPECT_DOUBLE_EQ(d.loss_ratio(), 3.0 / 1000);
}

TEST(ComputeDerived, TcpRetransmittedRatio) {
  Counters c;
  c.Add("tcp", "OutSegs", 594855, 2000);
  c.Add("tcp", "RetransSegs", 348, 5);
  v1::DerivedSignals d;
  ComputeDerived(c.list, 0, 1.0, 0, &d);
  EXPECT_EQ(d.tcp_sent_segments_total(), 594855u);
  EXPECT_EQ(d.tcp_retransmitted_segments_total(), 348u);
  EXPECT_DOUBLE_EQ(d.tcp_retransmitted_ratio(), 0.0025);
  EXPECT_FALSE(d.has_loss_ratio());
}

TEST(ComputeDerived, NothingKnownSetsNothing) {
  Counters c;
  c.Add("counters", "symbol_error", 1, 1);
  v1::DerivedSignals d;
  ComputeDerived(c.list, 100, 1.0, 0, &d);
  EXPECT_EQ(d.ByteSizeLong(), 0u);
}

// PortXmitWait as time: a 4X EDR port (100 Gb/s = 12.5e9 bytes/s) has a symbol time of
// 4 / 12.5e9 = 0.32 ns per tick; 1.5e9 ticks in a 2 s window are 0.48 s, 24% of it.
TEST(ComputeDerived, TransmitWaitTicksBecomeSecondsAndAShareOfTheWindow) {
  EXPECT_DOUBLE_EQ(XmitWaitTickSeconds(4, 12'500'000'000), 3.2e-10);
  EXPECT_DOUBLE_EQ(XmitWaitTickSeconds(1, 5'000'000'000), 2e-10);
  EXPECT_EQ(XmitWaitTickSeconds(0, 12'500'000'000), 0);  // no "4X" in the rate text
  EXPECT_EQ(XmitWaitTickSeconds(4, 0), 0);               // rate unknown
  Counters c;
  c.Add("counters", "port_xmit_wait", 2'000'000'000, 1'500'000'000);
  v1::DerivedSignals d;
  ComputeDerived(c.list, 0, 2.0, XmitWaitTickSeconds(4, 12'500'000'000), &d);
  EXPECT_DOUBLE_EQ(d.transmit_wait_seconds_total(), 0.64);
  EXPECT_DOUBLE_EQ(d.transmit_wait_ratio(), 0.24);
  v1::DerivedSignals unknown;
  ComputeDerived(c.list, 0, 2.0, 0, &unknown);
  EXPECT_FALSE(unknown.has_transmit_wait_seconds_total());
}

}  // namespace
}  // namespace fabricscope::agent

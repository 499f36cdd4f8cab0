#include "collectors/counter_meaning.h"

#include <gtest/gtest.h>

namespace fabricscope::collectors {
namespace {

Meaning Of(const char* group, const char* name) { return MeaningOf(group, name).meaning; }

TEST(CounterMeaning, Mlx5AndIrdmaNamesMeanTheSameThing) {
  EXPECT_EQ(Of("hw_counters", "np_cnp_sent"), Meaning::kCnpSent);
  EXPECT_EQ(Of("hw_counters", "cnpSent"), Meaning::kCnpSent);
  EXPECT_EQ(Of("hw_counters", "rp_cnp_handled"), Meaning::kCnpHandled);
  EXPECT_EQ(Of("hw_counters", "cnpHandled"), Meaning::kCnpHandled);
  EXPECT_EQ(Of("hw_counters", "np_ecn_marked_roce_packets"), Meaning::kEcnMarked);
  EXPECT_EQ(Of("hw_counters", "RxECNMrkd"), Meaning::kEcnMarked);
  EXPECT_EQ(Of("hw_counters", "packet_seq_err"), Meaning::kRetransmit);
  EXPECT_EQ(Of("hw_counters", "tcpRetransSegs"), Meaning::kRetransmit);
  EXPECT_EQ(Of("hw_counters", "cnpIgnored"), Meaning::kNone);  // ignored: no rate change
  EXPECT_EQ(Of("hw_counters", "iwInRdmaWrites"), Meaning::kNone);
}

TEST(CounterMeaning, IrdmaTrafficCountersAreSixtyFourBitBytesAndPackets) {
  for (const char* n : {"ip4InOctets", "ip6InOctets"}) {
    EXPECT_EQ(Of("hw_counters", n), Meaning::kReceiveBytes) << n;
  }
  for (const char* n : {"ip4OutOctets", "ip6OutOctets"}) {
    EXPECT_EQ(Of("hw_counters", n), Meaning::kTransmitBytes) << n;
  }
  EXPECT_EQ(Of("hw_counters", "ip4InPkts"), Meaning::kReceivePackets);
  EXPECT_EQ(Of("hw_counters", "ip6OutPkts"), Meaning::kTransmitPackets);
  EXPECT_EQ(MeaningOf("hw_counters", "ip4InOctets").width_bits, 64);
  EXPECT_EQ(MeaningOf("hw_counters", "cnpSent").width_bits, 64);
  EXPECT_EQ(MeaningOf("hw_counters", "out_of_sequence").width_bits, 32);
  // Names the table does not hold: mlx5's rule (congestion counters 64-bit, Q counters 32).
  EXPECT_EQ(MeaningOf("hw_counters", "rp_cnp_ignored").width_bits, 64);
  EXPECT_EQ(MeaningOf("hw_counters", "np_ecn_marked_roce_packets_x").width_bits, 64);
  EXPECT_EQ(MeaningOf("hw_counters", "rx_icrc_encapsulated").width_bits, 64);
  EXPECT_EQ(MeaningOf("hw_counters", "req_cqe_error").width_bits, 32);
  EXPECT_EQ(MeaningOf("hw_counters", "resp_cqe_flush_error").meaning, Meaning::kNone);
  EXPECT_EQ(MeaningOf("ethtool", "rx_vport_unicast_bytes").width_bits, 0);  // other groups
  // The PFC storm guard and the PMA's transmit wait.
  EXPECT_EQ(Of("ethtool", "tx_pause_storm_error_events"), Meaning::kPauseStorm);
  EXPECT_EQ(Of("pma", "port_xmit_wait"), Meaning::kTransmitWait);
  EXPECT_TRUE(KeptAtBasicProfile(Meaning::kPauseStorm));
  EXPECT_FALSE(KeptAtBasicProfile(Meaning::kDiscard));
  // The wire's value: every meaning round-trips; beyond the last one is none.
  for (size_t v = 0; v < kMeaningCount; ++v) {
    EXPECT_EQ(static_cast<size_t>(MeaningFromWire(static_cast<uint32_t>(v))), v);
  }
  EXPECT_EQ(MeaningFromWire(static_cast<uint32_t>(kMeaningCount)), Meaning::kNone);
  EXPECT_EQ(MeaningFromWire(0xffffffffu), Meaning::kNone);
  // Multicast octets are not a second count of the port's bytes.
  EXPECT_EQ(Of("hw_counters", "ip4InMcastOctets"), Meaning::kNone);
  // The group decides: a netdev's rx_bytes is not a driver traffic counter of this table.
  EXPECT_EQ(Of("statistics", "rx_bytes"), Meaning::kNone);
}

TEST(CounterMeaning, PerPriorityNamesAndTheDropFallback) {
  EXPECT_EQ(Of("ethtool", "rx_prio3_pause_duration"), Meaning::kPauseMicroseconds);
  EXPECT_EQ(Of("ethtool", "tx_prio0_pause_duration"), Meaning::kPauseMicroseconds);
  EXPECT_EQ(Of("ethtool", "rx_prio3_discards"), Meaning::kPriorityDiscard);
  EXPECT_EQ(Of("ethtool", "rx_prio3_buf_discard"), Meaning::kDiscard);
  EXPECT_EQ(Of("ethtool", "rx_prio3_pause"), Meaning::kNone);
  EXPECT_EQ(Of("ethtool", "rx_discards_phy"), Meaning::kDiscard);
  EXPECT_EQ(Of("ethtool", "rx_xdp_drop"), Meaning::kDrop);  // by name
  EXPECT_EQ(Of("statistics", "rx_dropped"), Meaning::kNetdevDrop);
  EXPECT_EQ(Of("statistics", "tx_dropped"), Meaning::kDrop);
  EXPECT_EQ(Of("tcp", "RetransSegs"), Meaning::kTcpRetransmit);
  EXPECT_EQ(Of("counters", "port_xmit_wait"), Meaning::kTransmitWait);
  EXPECT_EQ(Of("counters", "port_xmit_data"), Meaning::kNone);
}

TEST(CounterMeaning, LossAndFeedbackClasses) {
  EXPECT_TRUE(IsLoss(Meaning::kOutOfSequence));
  EXPECT_TRUE(IsLoss(Meaning::kPriorityDiscard));
  EXPECT_TRUE(IsLoss(Meaning::kTcpRetransmit));
  EXPECT_FALSE(IsLoss(Meaning::kCnpSent));
  EXPECT_FALSE(IsLoss(Meaning::kPauseMicroseconds));
  EXPECT_TRUE(IsCongestionFeedback(Meaning::kEcnMarked));
  EXPECT_FALSE(IsCongestionFeedback(Meaning::kDrop));
  EXPECT_TRUE(IsLossBreakdown(Meaning::kPriorityDiscard, true));
  EXPECT_FALSE(IsLossBreakdown(Meaning::kPriorityDiscard, false));
  EXPECT_FALSE(IsLossBreakdown(Meaning::kDiscard, true));
}

}  // namespace
}  // namespace fabricscope::collectors

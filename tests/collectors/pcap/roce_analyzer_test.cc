#include "collectors/pcap/roce_analyzer.h"

#include <gtest/gtest.h>

#include "tests/collectors/pcap/pcap_test_util.h"
#include "tests/collectors/pcap/roce_scenarios.h"

namespace fabricscope::testing {
namespace {

using pcap::RoceAnalyzer;
using pcap::RoceFlowStats;

// The stats of `key`, or all zero if the flow is unknown.
RoceFlowStats Stats(const RoceAnalyzer& a, const pcap::FlowKey& key) {
  auto it = a.flows().find(key);
  return it == a.flows().end() ? RoceFlowStats() : it->second;
}

TEST(RoceAnalyzer, PsnGapsAreLossUpstream) {
  RoceAnalyzer a;
  ASSERT_EQ(RunCapture(LossScenario(), &a), 7u);
  a.Flush();
  ASSERT_EQ(a.flows().size(), 1u);
  const pcap::FlowKey data = RoceKey(kQ, kR, kQpR);
  EXPECT_EQ(StatsString(Stats(a, data)),
            "packets=7 data=7 retx=0 gap_packets=3 gaps=2 acks=0 nak_seq=0 rnr=0 nak_other=0 "
            "ack_timeouts=0 cnps=0 ce=0");
  // Ethernet 14 + IPv4 20 + UDP 8 + BTH 12 + 64 payload + ICRC 4.
  EXPECT_EQ(Stats(a, data).bytes, 7u * 122);
  EXPECT_EQ(EventStrings(a.TakeEvents()),
            (std::vector<std::string>{"psn_gap 10.0.0.1>10.0.0.2/0xb31 [0x67,0x68]",
                                      "psn_gap 10.0.0.1>10.0.0.2/0xb31 [0x6b,0x6b]"}));
  EXPECT_TRUE(a.TakeEvents().empty());
}

class GoBackN : public ::testing::TestWithParam<bool> {};

TEST_P(GoBackN, AfterNakSequenceError) {
  const bool v6 = GetParam();
  const std::string q = v6 ? kQ6 : kQ, r = v6 ? kR6 : kR;
  RoceAnalyzer a;
  ASSERT_EQ(RunCapture(GoBackNScenario(q, r), &a), 12u);
  a.Flush();
  const pcap::FlowKey data = RoceKey(q, r, kQpR), ack = RoceKey(r, q, kQpQ);
  ASSERT_EQ(a.flows().size(), 2u);
  // 1002 lost upstream (a gap), NAKed, then 1002-1004 resent: go-back-N, no ACK timeout. The
  // NAK and the ACKs also count on the data flow they concern.
  EXPECT_EQ(StatsString(Stats(a, data)),
            "packets=9 data=9 retx=3 gap_packets=1 gaps=1 acks=2 nak_seq=1 rnr=0 nak_other=0 "
            "ack_timeouts=0 cnps=0 ce=0");
  EXPECT_EQ(StatsString(Stats(a, ack)),
            "packets=3 data=0 retx=0 gap_packets=0 gaps=0 acks=2 nak_seq=1 rnr=0 nak_other=0 "
            "ack_timeouts=0 cnps=0 ce=0");
  EXPECT_EQ(StatsString(a.totals()),
            "packets=12 data=9 retx=3 gap_packets=1 gaps=1 acks=2 nak_seq=1 rnr=0 nak_other=0 "
            "ack_timeouts=0 cnps=0 ce=0");
  ASSERT_NE(a.PairedDataFlow(ack), nullptr);
  EXPECT_EQ(*a.PairedDataFlow(ack), data);
  EXPECT_EQ(a.PairedDataFlow(data), nullptr);
  EXPECT_EQ(a.unpaired_naks(), 0u);
  const std::string f = FlowString(data);
  EXPECT_EQ(EventStrings(a.TakeEvents()),
            (std::vector<std::string>{"psn_gap " + f + " [0x3ea,0x3ea]",
                                      "nak_sequence_error " + f + " [0x3ea,0x3ea]",
                                      "go_back_n " + f + " [0x3ea,0x3ec]"}));
  if (v6) {
    EXPECT_EQ(f, "fd00::1>fd00::2/0xb31");
  }
}

INSTANTIATE_TEST_SUITE_P(Ipv4AndIpv6, GoBackN, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "Ipv6" : "Ipv4"; });

TEST(RoceAnalyzer, RetransmissionWithoutNakIsAnAckTimeoutPerEpisode) {
  RoceAnalyzer a;
  RunCapture(AckTimeoutScenario(), &a);
  a.Flush();
  const pcap::FlowKey data = RoceKey(kQ, kR, kQpR), ack = RoceKey(kR, kQ, kQpQ);
  // Three episodes (502-504, 505-506, 508), six packets: three ACK timeouts, not six. The NAK of
  // 508 was resolved by the ACK of 508, so the last resend is a timeout too.
  EXPECT_EQ(StatsString(Stats(a, data)),
            "packets=16 data=16 retx=6 gap_packets=0 gaps=0 acks=2 nak_seq=1 rnr=0 nak_other=0 "
            "ack_timeouts=3 cnps=0 ce=0");
  EXPECT_EQ(StatsString(Stats(a, ack)),
            "packets=3 data=0 retx=0 gap_packets=0 gaps=0 acks=2 nak_seq=1 rnr=0 nak_other=0 "
            "ack_timeouts=0 cnps=0 ce=0");
  const std::string f = FlowString(data);
  EXPECT_EQ(EventStrings(a.TakeEvents()),
            (std::vector<std::string>{
                "ack_timeout " + f + " [0x1f6,0x1f6]", "go_back_n " + f + " [0x1f6,0x1f8]",
                "ack_timeout " + f + " [0x1f9,0x1f9]", "go_back_n " + f + " [0x1f9,0x1fa]",
                "nak_sequence_error " + f + " [0x1fc,0x1fc]", "ack_timeout " + f + " [0x1fc,0x1fc]",
                "go_back_n " + f + " [0x1fc,0x1fc]"}));
}

TEST(RoceAnalyzer, RnrNakThenResend) {
  RoceAnalyzer a;
  RunCapture(RnrScenario(), &a);
  a.Flush();
  const pcap::FlowKey data = RoceKey(kQ, kR, kQpR), ack = RoceKey(kR, kQ, kQpQ);
  EXPECT_EQ(StatsString(Stats(a, data)),
            "packets=3 data=3 retx=1 gap_packets=0 gaps=0 acks=1 nak_seq=0 rnr=1 nak_other=0 "
            "ack_timeouts=0 cnps=0 ce=0");
  EXPECT_EQ(StatsString(Stats(a, ack)),
            "packets=2 data=0 retx=0 gap_packets=0 gaps=0 acks=1 nak_seq=0 rnr=1 nak_other=0 "
            "ack_timeouts=0 cnps=0 ce=0");
  const std::string f = FlowString(data);
  EXPECT_EQ(EventStrings(a.TakeEvents()),
            (std::vector<std::string>{"rnr_nak " + f + " [0x7d0,0x7d0]",
                                      "go_back_n " + f + " [0x7d0,0x7d0]"}));
}

TEST(RoceAnalyzer, OtherNaksAndReservedSyndromes) {
  RoceAnalyzer a;
  RunCapture(OtherNakScenario(), &a);
  a.Flush();
  const pcap::FlowKey data = RoceKey(kQ, kR, kQpR), ack = RoceKey(kR, kQ, kQpQ);
  EXPECT_EQ(StatsString(Stats(a, data)),
            "packets=3 data=3 retx=0 gap_packets=0 gaps=0 acks=0 nak_seq=0 rnr=0 nak_other=3 "
            "ack_timeouts=0 cnps=0 ce=0");
  EXPECT_EQ(StatsString(Stats(a, ack)),
            "packets=5 data=0 retx=0 gap_packets=0 gaps=0 acks=0 nak_seq=0 rnr=0 nak_other=3 "
            "ack_timeouts=0 cnps=0 ce=0");
  EXPECT_EQ(a.reserved_syndromes(), 2u);
  const std::string f = FlowString(data);
  EXPECT_EQ(EventStrings(a.TakeEvents()),
            (std::vector<std::string>{"nak_other " + f + " [0xbb8,0xbb8]",
                                      "nak_other " + f + " [0xbb9,0xbb9]",
                                      "nak_other " + f + " [0xbba,0xbba]"}));
}

TEST(RoceAnalyzer, CnpsAndCeMarks) {
  RoceAnalyzer a;
  RunCapture(CongestionScenario(), &a);
  a.Flush();
  const pcap::FlowKey data = RoceKey(kQ, kR, kQpR), cnp = RoceKey(kR, kQ, kQpQ);
  EXPECT_EQ(StatsString(Stats(a, data)),
            "packets=6 data=6 retx=0 gap_packets=0 gaps=0 acks=0 nak_seq=0 rnr=0 nak_other=0 "
            "ack_timeouts=0 cnps=0 ce=3");
  EXPECT_EQ(StatsString(Stats(a, cnp)),
            "packets=3 data=0 retx=0 gap_packets=0 gaps=0 acks=0 nak_seq=0 rnr=0 nak_other=0 "
            "ack_timeouts=0 cnps=3 ce=0");
  EXPECT_EQ(Stats(a, data).bytes, 6u * (14 + 20 + 8 + 12 + 1024 + 4));
  EXPECT_EQ(Stats(a, cnp).bytes, 3u * (14 + 20 + 8 + 12 + 16 + 4));
  EXPECT_EQ(a.totals().cnps, 3u);
  EXPECT_EQ(a.totals().ecn_ce_packets, 3u);
  EXPECT_TRUE(a.TakeEvents().empty());
}

TEST(RoceAnalyzer, PsnWrapAround) {
  RoceAnalyzer a;
  RunCapture(WrapScenario(), &a);
  a.Flush();
  EXPECT_EQ(StatsString(Stats(a, RoceKey(kQ, kR, 0x10))),
            "packets=6 data=6 retx=0 gap_packets=0 gaps=0 acks=0 nak_seq=0 rnr=0 nak_other=0 "
            "ack_timeouts=0 cnps=0 ce=0");
  EXPECT_EQ(StatsString(Stats(a, RoceKey(kQ, kR, 0x20))),
            "packets=4 data=4 retx=0 gap_packets=2 gaps=1 acks=0 nak_seq=0 rnr=0 nak_other=0 "
            "ack_timeouts=0 cnps=0 ce=0");
  EXPECT_EQ(StatsString(Stats(a, RoceKey(kQ, kR, 0x30))),
            "packets=8 data=8 retx=4 gap_packets=3 gaps=1 acks=0 nak_seq=0 rnr=0 nak_other=0 "
            "ack_timeouts=1 cnps=0 ce=0");
  EXPECT_EQ(EventStrings(a.TakeEvents()),
            (std::vector<std::string>{"psn_gap 10.0.0.1>10.0.0.2/0x20 [0,0x1]",
                                      "psn_gap 10.0.0.1>10.0.0.2/0x30 [0xfffffe,0]",
                                      "ack_timeout 10.0.0.1>10.0.0.2/0x30 [0xffffff,0xffffff]",
                                      "go_back_n 10.0.0.1>10.0.0.2/0x30 [0xffffff,0x2]"}));
}

TEST(RoceAnalyzer, MultipleQpsAndIpPairsPairByPsn) {
  RoceAnalyzer a;
  RunCapture(MultiQpScenario(), &a);
  a.Flush();
  ASSERT_EQ(a.flows().size(), 6u);
  struct Conn {
    std::string q, r;
    uint32_t qp_q, qp_r, base;
  };
  const Conn conns[] = {{kQ, kR, 0x100, 0x200, 0x10000},
                        {kQ, kR, 0x101, 0x201, 0x500000},
                        {"10.0.1.1", "10.0.1.2", 0x102, 0x202, 0x7000}};
  std::vector<std::string> want_gaps, want_naks, want_retx;
  for (const Conn& c : conns) {
    const pcap::FlowKey data = RoceKey(c.q, c.r, c.qp_r), ack = RoceKey(c.r, c.q, c.qp_q);
    SCOPED_TRACE(FlowString(data));
    EXPECT_EQ(StatsString(Stats(a, data)),
              "packets=10 data=10 retx=4 gap_packets=1 gaps=1 acks=1 nak_seq=1 rnr=0 "
              "nak_other=0 ack_timeouts=0 cnps=0 ce=0");
    EXPECT_EQ(StatsString(Stats(a, ack)),
              "packets=2 data=0 retx=0 gap_packets=0 gaps=0 acks=1 nak_seq=1 rnr=0 "
              "nak_other=0 ack_timeouts=0 cnps=0 ce=0");
    ASSERT_NE(a.PairedDataFlow(ack), nullptr);
    EXPECT_EQ(FlowString(*a.PairedDataFlow(ack)), FlowString(data));
    char r[64];
    std::snprintf(r, sizeof(r), " [%#x,%#x]", c.base + 2, c.base + 2);
    want_gaps.push_back("psn_gap " + FlowString(data) + r);
    want_naks.insert(want_naks.begin(), "nak_sequence_error " + FlowString(data) + r);
    std::snprintf(r, sizeof(r), " [%#x,%#x]", c.base + 2, c.base + 5);
    want_retx.push_back("go_back_n " + FlowString(data) + r);
  }
  std::vector<std::string> want = want_gaps;
  want.insert(want.end(), want_naks.begin(), want_naks.end());
  want.insert(want.end(), want_retx.begin(), want_retx.end());
  EXPECT_EQ(EventStrings(a.TakeEvents()), want);
}

TEST(RoceAnalyzer, ReadResponsesHaveTheirOwnPsnStream) {
  RoceAnalyzer a;
  RunCapture(ReadScenario(), &a);
  const pcap::FlowKey data = RoceKey(kQ, kR, kQpR), resp = RoceKey(kR, kQ, kQpQ);
  // The READ at 300 used PSNs 300-303, so the SEND at 304 is no gap. The lost response 302 is
  // a gap on the response stream; Q's re-issued READ (302) and resent SEND (304) are go-back-N
  // after that gap, not an ACK timeout.
  EXPECT_EQ(StatsString(Stats(a, data)),
            "packets=5 data=5 retx=2 gap_packets=0 gaps=0 acks=2 nak_seq=0 rnr=0 nak_other=0 "
            "ack_timeouts=0 cnps=0 ce=0");
  EXPECT_EQ(StatsString(Stats(a, resp)),
            "packets=7 data=5 retx=2 gap_packets=1 gaps=1 acks=2 nak_seq=0 rnr=0 nak_other=0 "
            "ack_timeouts=0 cnps=0 ce=0");
  ASSERT_NE(a.PairedDataFlow(resp), nullptr);
  EXPECT_EQ(*a.PairedDataFlow(resp), data);
  EXPECT_EQ(EventStrings(a.TakeEvents()),
            (std::vector<std::string>{"psn_gap " + FlowString(resp) + " [0x12e,0x12e]",
                                      "go_back_n " + FlowString(data) + " [0x12e,0x130]"}));
  // The response stream's episode is still open: Flush() ends it.
  a.Flush();
  EXPECT_EQ(EventStrings(a.TakeEvents()),
            (std::vector<std::string>{"go_back_n " + FlowString(resp) + " [0x12e,0x12f]"}));
  a.Flush();
  EXPECT_TRUE(a.TakeEvents().empty());
}

TEST(RoceAnalyzer, UcRepeatIsNeverAnAckTimeout) {
  std::vector<RoceFrame> frames;
  for (uint32_t psn : {10u, 11u, 12u, 11u, 12u, 13u}) {
    frames.push_back(Req(kQ, kR, kQpR, psn, roce_op::kUc | roce_op::kSendOnly));
  }
  RoceAnalyzer a;
  RunCapture(frames, &a);
  const pcap::FlowKey data = RoceKey(kQ, kR, kQpR);
  EXPECT_EQ(StatsString(Stats(a, data)),
            "packets=6 data=6 retx=2 gap_packets=0 gaps=0 acks=0 nak_seq=0 rnr=0 nak_other=0 "
            "ack_timeouts=0 cnps=0 ce=0");
  EXPECT_EQ(EventStrings(a.TakeEvents()),
            (std::vector<std::string>{"go_back_n " + FlowString(data) + " [0xb,0xc]"}));
}

TEST(RoceAnalyzer, RepeatGoingBackAgainStartsANewEpisode) {
  RoceAnalyzer a;
  std::vector<RoceFrame> frames;
  for (uint32_t psn : {1u, 2u, 3u, 4u, 5u, 2u, 3u, 3u, 4u, 5u, 6u}) {
    frames.push_back(Req(kQ, kR, kQpR, psn));
  }
  RunCapture(frames, &a);
  const pcap::FlowKey data = RoceKey(kQ, kR, kQpR);
  EXPECT_EQ(Stats(a, data).retransmitted_packets, 5u);
  EXPECT_EQ(Stats(a, data).ack_timeouts, 2u);
  const std::string f = FlowString(data);
  EXPECT_EQ(EventStrings(a.TakeEvents()),
            (std::vector<std::string>{
                "ack_timeout " + f + " [0x2,0x2]", "go_back_n " + f + " [0x2,0x3]",
                "ack_timeout " + f + " [0x3,0x3]", "go_back_n " + f + " [0x3,0x5]"}));
}

TEST(RoceAnalyzer, NakWithoutItsDataFlowIsCountedOnItsOwnFlow) {
  RoceAnalyzer a;
  RunCapture({Ack(kR, kQ, kQpQ, 77, 0x60), Ack(kR, kQ, kQpQ, 77, 0x22)}, &a);
  const pcap::FlowKey ack = RoceKey(kR, kQ, kQpQ);
  EXPECT_EQ(StatsString(Stats(a, ack)),
            "packets=2 data=0 retx=0 gap_packets=0 gaps=0 acks=0 nak_seq=1 rnr=1 nak_other=0 "
            "ack_timeouts=0 cnps=0 ce=0");
  EXPECT_EQ(a.unpaired_naks(), 2u);
  EXPECT_EQ(a.PairedDataFlow(ack), nullptr);
  EXPECT_EQ(EventStrings(a.TakeEvents()),
            (std::vector<std::string>{"nak_sequence_error " + FlowString(ack) + " [0x4d,0x4d]",
                                      "rnr_nak " + FlowString(ack) + " [0x4d,0x4d]"}));
}

TEST(RoceAnalyzer, FlowAndEventLimits) {
  RoceAnalyzer::Options o;
  o.max_flows = 2;
  o.max_events = 3;
  RoceAnalyzer a(o);
  std::vector<RoceFrame> frames;
  for (uint32_t qp = 1; qp <= 4; ++qp) {
    for (uint32_t psn : {0u, 2u, 4u}) frames.push_back(Req(kQ, kR, qp, psn));
  }
  RunCapture(frames, &a);
  ASSERT_EQ(a.flows().size(), 2u);
  EXPECT_EQ(a.flows().count(RoceKey(kQ, kR, 1)), 1u);
  EXPECT_EQ(a.flows().count(RoceKey(kQ, kR, 2)), 1u);
  EXPECT_EQ(a.untracked_packets(), 6u);
  EXPECT_EQ(a.totals().packets, 12u);
  EXPECT_EQ(a.totals().psn_gaps, 4u);  // only tracked flows have PSN streams
  EXPECT_EQ(a.TakeEvents().size(), 3u);
  EXPECT_EQ(a.dropped_events(), 1u);
  RunCapture({Req(kQ, kR, 1, 9)}, &a);
  EXPECT_EQ(a.TakeEvents().size(), 1u);  // room again after a take
}

TEST(RoceAnalyzer, IgnoresNonRoceAndUntrackedTransports) {
  RoceAnalyzer a;
  pcap::ParsedPacket tcp;
  tcp.l4_proto = 6;
  a.Add(tcp);
  EXPECT_TRUE(a.flows().empty());
  EXPECT_EQ(a.totals().packets, 0u);
  // UD sends count as packets but carry no tracked PSN stream.
  std::vector<RoceFrame> frames;
  for (uint32_t psn : {5u, 9u, 5u}) frames.push_back(Req(kQ, kR, 0x1, psn, roce_op::kUd | 0x04));
  RunCapture(frames, &a);
  EXPECT_EQ(StatsString(Stats(a, RoceKey(kQ, kR, 0x1))),
            "packets=3 data=0 retx=0 gap_packets=0 gaps=0 acks=0 nak_seq=0 rnr=0 nak_other=0 "
            "ack_timeouts=0 cnps=0 ce=0");
  EXPECT_TRUE(a.TakeEvents().empty());
}

}  // namespace
}  // namespace fabricscope::testing

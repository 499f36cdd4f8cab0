// TcpAnalyzer: hand-built segment sequences (tcp_test_packets.h) for each rule of the Wireshark
// User's Guide section "TCP Analysis" (7.5), per-direction counters, bounds and flag names.
// (tshark as the oracle, and recorded captures: tcp_analyzer_tshark_test.cc. Real captures with
// real loss: tcp_real_loss_test.cc.)

#include "collectors/pcap/tcp_analyzer.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "collectors/pcap/flow.h"
#include "collectors/pcap/packet.h"
#include "tests/collectors/pcap/tcp_test_packets.h"
#include "tests/collectors/pcap/tcp_tshark.h"

namespace fabricscope::testing {
namespace {

std::string EventString(const pcap::LossEvent& e) {
  return std::string(pcap::LossKindName(e.kind)) + " " + pcap::FormatAddress(e.flow.src) + ":" +
         std::to_string(e.flow.sport) + ">" + pcap::FormatAddress(e.flow.dst) + ":" +
         std::to_string(e.flow.dport) + " [" + std::to_string(e.first) + "," +
         std::to_string(e.last) + "]";
}
std::vector<std::string> EventStrings(const std::vector<pcap::LossEvent>& events) {
  std::vector<std::string> out;
  for (const pcap::LossEvent& e : events) out.push_back(EventString(e));
  return out;
}

// --- Each rule -----------------------------------------------------------------------------

TEST(TcpAnalyzer, PlainRetransmission) {
  TcpAnalyzer a;
  const Script s = PlainRetransmission();
  Play(s, &a);
  EXPECT_EQ(EventStrings(a.TakeEvents()),
            std::vector<std::string>{"retransmission 10.0.0.1:40000>10.0.0.2:5201 [1101,1200]"});
  const pcap::TcpFlowStats st = a.flows().at(s.client_flow());
  EXPECT_EQ(st.retransmissions, 1u);
  EXPECT_EQ(st.fast_retransmissions + st.spurious_retransmissions + st.out_of_order, 0u);
}

TEST(TcpAnalyzer, FastRetransmissionAfterThreeDuplicateAcks) {
  for (bool v6 : {false, true}) {
    TcpAnalyzer a;
    const Script s = FastRetransmission(v6);
    Play(s, &a);
    const std::vector<pcap::LossEvent> events = a.TakeEvents();
    ASSERT_EQ(events.size(), 1u);
    EXPECT_EQ(events[0].kind, pcap::LossKind::kTcpFastRetransmission);
    EXPECT_EQ(events[0].flow, s.client_flow());
    EXPECT_EQ(events[0].first, 1101u);
    EXPECT_EQ(events[0].last, 1200u);
    EXPECT_EQ(events[0].ts_ns, kEpochNs + 404'000);
    const std::map<pcap::FlowKey, pcap::TcpFlowStats> flows = a.flows();
    // Counted as tshark counts: a fast retransmission is also a retransmission.
    EXPECT_EQ(flows.at(s.client_flow()).fast_retransmissions, 1u);
    EXPECT_EQ(flows.at(s.client_flow()).retransmissions, 1u);
    EXPECT_EQ(flows.at(s.server_flow()).duplicate_acks, 3u);
  }
}

TEST(TcpAnalyzer, FastRetransmissionConditions) {
  TcpAnalyzer a;
  Play(FastRetransmissionConditions(), &a);
  EXPECT_EQ(a.totals().all.fast_retransmissions, 1u);
  EXPECT_EQ(a.totals().all.retransmissions, 4u);
}

TEST(TcpAnalyzer, OutOfOrderWithinTheInitialRtt) {
  TcpAnalyzer a;
  Play(OutOfOrderWithinRtt(), &a);
  EXPECT_EQ(a.totals().all.out_of_order, 2u);
  EXPECT_EQ(a.totals().all.retransmissions, 2u);  // out-of-order frames are not retransmissions
  const std::vector<pcap::LossEvent> events = a.TakeEvents();
  ASSERT_EQ(events.size(), 4u);
  EXPECT_EQ(events[0].kind, pcap::LossKind::kTcpOutOfOrder);
  EXPECT_EQ(events[0].first, 1001u);
  EXPECT_EQ(events[0].last, 1100u);
}

TEST(TcpAnalyzer, OutOfOrderWithoutHandshakeUsesThreeMilliseconds) {
  TcpAnalyzer a;
  Play(OutOfOrderDefaultThreshold(), &a);
  pcap::TcpAnalyzerOptions o;
  o.default_ooo_threshold_ns = 5'000'000;  // configurable: both are now within it
  TcpAnalyzer b(o);
  const Script s = OutOfOrderDefaultThreshold();
  for (const pcap::ParsedPacket& p : s.frames()) b.Add(p);
  EXPECT_EQ(b.totals().all.out_of_order, 2u);
}

TEST(TcpAnalyzer, SpuriousRetransmissionOfAcknowledgedData) {
  TcpAnalyzer a;
  const Script s = SpuriousRetransmission();
  Play(s, &a);
  EXPECT_EQ(a.flows().at(s.client_flow()).spurious_retransmissions, 3u);
  EXPECT_EQ(a.flows().at(s.client_flow()).retransmissions, 4u);
  EXPECT_EQ(EventStrings(a.TakeEvents()),
            (std::vector<std::string>{
                "spurious_retransmission 10.0.0.1:40000>10.0.0.2:5201 [1001,1100]",
                "spurious_retransmission 10.0.0.1:40000>10.0.0.2:5201 [1101,1200]",
                "retransmission 10.0.0.1:40000>10.0.0.2:5201 [1151,1250]",
                "spurious_retransmission 10.0.0.1:40000>10.0.0.2:5201 [1351,1400]"}));
}

TEST(TcpAnalyzer, KeepAlivesAreNotCounted) {
  TcpAnalyzer a;
  Play(KeepAlive(), &a);
  const pcap::TcpFlowStats& t = a.totals().all;
  EXPECT_EQ(t.retransmissions + t.out_of_order + t.duplicate_acks + t.spurious_retransmissions, 0u);
  EXPECT_TRUE(a.TakeEvents().empty());
}

TEST(TcpAnalyzer, ZeroWindowProbesAndUpdate) {
  TcpAnalyzer a;
  const Script s = ZeroWindow();
  Play(s, &a);
  EXPECT_EQ(a.flows().at(s.server_flow()).zero_windows, 3u);
  EXPECT_EQ(a.totals().all.retransmissions, 0u);  // probes are not retransmissions
  EXPECT_TRUE(a.TakeEvents().empty());
}

TEST(TcpAnalyzer, SynAndFinRetransmissions) {
  TcpAnalyzer a;
  const Script s = SynFinRetransmission();
  Play(s, &a);
  EXPECT_EQ(EventStrings(a.TakeEvents()),
            (std::vector<std::string>{"retransmission 10.0.0.1:40000>10.0.0.2:5201 [1000,1000]",
                                      "retransmission 10.0.0.2:5201>10.0.0.1:40000 [5000,5000]",
                                      "retransmission 10.0.0.1:40000>10.0.0.2:5201 [1101,1101]",
                                      "retransmission 10.0.0.2:5201>10.0.0.1:40000 [5001,5001]"}));
}

TEST(TcpAnalyzer, SequenceNumbersWrapAt2To32) {
  TcpAnalyzer a;
  Play(WrapAround(), &a);
  EXPECT_EQ(EventStrings(a.TakeEvents()),
            (std::vector<std::string>{
                "out_of_order 10.0.0.1:40000>10.0.0.2:5201 [4294967201,104]",
                "spurious_retransmission 10.0.0.1:40000>10.0.0.2:5201 [4294967101,4]",
                "retransmission 10.0.0.1:40000>10.0.0.2:5201 [105,304]"}));
  TcpAnalyzer b;
  Play(EndsAtTwoToThe32(), &b);
}

TEST(TcpAnalyzer, DuplicateAckRules) {
  TcpAnalyzer a;
  const Script s = DuplicateAckRules();
  Play(s, &a);
  EXPECT_EQ(a.flows().at(s.server_flow()).duplicate_acks, 3u);
}

TEST(TcpAnalyzer, ReusedPortsStartAfresh) {
  TcpAnalyzer a;
  Play(PortsReused(), &a);
  EXPECT_EQ(a.totals().connections, 2u);
  EXPECT_EQ(a.flows().size(), 2u);  // the same two directional flows, counted on
  EXPECT_EQ(a.totals().all.retransmissions, 0u);
}

TEST(TcpAnalyzer, CaptureStartingMidConnection) {
  TcpAnalyzer a;
  Play(MidConnection(), &a);
}

TEST(TcpAnalyzer, PacketsAndBytesPerDirection) {
  TcpAnalyzer a;
  const Script s = FastRetransmission();
  uint64_t client_wire = 0, server_wire = 0;
  for (const pcap::ParsedPacket& p : s.frames()) {
    a.Add(p);
    (p.sport == 40000 ? client_wire : server_wire) += p.wire_len;
  }
  const std::map<pcap::FlowKey, pcap::TcpFlowStats> flows = a.flows();
  ASSERT_EQ(flows.size(), 2u);
  const pcap::TcpFlowStats& c = flows.at(s.client_flow());
  const pcap::TcpFlowStats& sv = flows.at(s.server_flow());
  EXPECT_EQ(c.packets, 8u);
  EXPECT_EQ(c.payload_bytes, 600u);  // 5 segments of 100 and one retransmitted
  EXPECT_EQ(c.bytes, client_wire);
  EXPECT_EQ(sv.packets, 6u);
  EXPECT_EQ(sv.payload_bytes, 0u);
  EXPECT_EQ(sv.bytes, server_wire);
  EXPECT_EQ(a.totals().all.packets, 14u);
  EXPECT_EQ(a.totals().all.bytes, client_wire + server_wire);
  EXPECT_EQ(a.totals().tcp_frames, 14u);
  EXPECT_EQ(a.totals().connections, 1u);
}

TEST(TcpAnalyzer, NonTcpFramesAreOnlyCounted) {
  TcpAnalyzer a;
  pcap::ParsedPacket udp;
  udp.l4_proto = 17;
  udp.src = V4(1);
  udp.dst = V4(2);
  EXPECT_EQ(a.Add(udp), 0u);
  EXPECT_EQ(a.totals().frames, 1u);
  EXPECT_EQ(a.totals().tcp_frames, 0u);
  EXPECT_TRUE(a.flows().empty());
}

TEST(TcpAnalyzer, BoundedFlowsAndEvents) {
  pcap::TcpAnalyzerOptions o;
  o.max_flows = 2;
  o.max_events = 1;
  TcpAnalyzer a(o);
  // Three connections, each with one retransmission; the third is not tracked.
  for (uint16_t port : {40001, 40002, 40003}) {
    Script s("bounded", port);
    s.c(0, "PA", 1001, 5001, 100).c(100'000, "PA", 1001, 5001, 100, kRT);
    const uint32_t want_second = port == 40003 ? 0 : kRT;
    EXPECT_EQ(a.Add(s.frames()[0]), 0u);
    EXPECT_EQ(a.Add(s.frames()[1]), want_second) << port;
  }
  EXPECT_EQ(a.totals().connections, 2u);
  EXPECT_EQ(a.totals().untracked_frames, 2u);
  EXPECT_EQ(a.totals().tcp_frames, 4u);
  EXPECT_EQ(a.flows().size(), 2u);
  EXPECT_EQ(a.totals().events_dropped, 1u);
  EXPECT_EQ(a.TakeEvents().size(), 1u);
  EXPECT_TRUE(a.TakeEvents().empty());  // taken
}

TEST(TcpAnalyzer, FlagNamesAreTsharkFields) {
  EXPECT_STREQ(A::FlagName(0), "retransmission");
  EXPECT_STREQ(A::FlagName(4), "duplicate_ack");
  EXPECT_STREQ(A::FlagName(A::kFlagCount - 1), "reused_ports");
  EXPECT_STREQ(A::FlagName(A::kFlagCount), "unknown");
  for (int i = 0; i < A::kFlagCount; ++i) EXPECT_NE(std::string(A::FlagName(i)), "unknown");
}

}  // namespace
}  // namespace fabricscope::testing

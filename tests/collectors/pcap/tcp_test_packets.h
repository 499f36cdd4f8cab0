#pragma once

// The hand-built TCP conversations of the TcpAnalyzer tests (tcp_analyzer_test.cc,
// tcp_analyzer_tshark_test.cc): Script, a conversation written frame by frame with the flags
// tshark gives each frame, and one sequence per rule of the Wireshark User's Guide section
// "TCP Analysis" (7.5).

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "collectors/pcap/flow.h"
#include "collectors/pcap/packet.h"
#include "collectors/pcap/tcp_analyzer.h"
#include "tests/collectors/pcap/tcp_tshark.h"

namespace fabricscope::testing {

namespace pcap = collectors::pcap;
using A = TcpAnalyzer;

inline constexpr uint32_t kRT = A::kRetransmission;
inline constexpr uint32_t kFR = A::kFastRetransmission;
inline constexpr uint32_t kSP = A::kSpuriousRetransmission;
inline constexpr uint32_t kOO = A::kOutOfOrder;
inline constexpr uint32_t kDA = A::kDuplicateAck;
inline constexpr uint32_t kZW = A::kZeroWindow;
inline constexpr uint32_t kKA = A::kKeepAlive;
inline constexpr uint32_t kKAA = A::kKeepAliveAck;
inline constexpr uint32_t kWU = A::kWindowUpdate;
inline constexpr uint32_t kLS = A::kPreviousSegmentNotCaptured;
inline constexpr uint32_t kZWP = A::kZeroWindowProbe;
inline constexpr uint32_t kZWPA = A::kZeroWindowProbeAck;
inline constexpr uint32_t kRP = A::kPortsReused;

// Capture times start here: tshark takes a time of 0 for "not set" (no iRTT from a SYN at 0).
inline constexpr int64_t kEpochNs = int64_t{1'700'000'000} * 1'000'000'000;

inline pcap::IpAddress V4(uint8_t last) {
  pcap::IpAddress a;
  a.bytes = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, last};
  return a;
}
inline pcap::IpAddress V6(uint8_t last) {
  pcap::IpAddress a;
  a.bytes = {0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, last};
  return a;
}

inline uint8_t TcpFlags(const std::string& letters) {
  uint8_t f = 0;
  for (char ch : letters) {
    if (ch == 'S') f |= pcap::kTcpSyn;
    if (ch == 'A') f |= pcap::kTcpAck;
    if (ch == 'F') f |= pcap::kTcpFin;
    if (ch == 'R') f |= pcap::kTcpRst;
    if (ch == 'P') f |= pcap::kTcpPsh;
  }
  return f;
}

// A TCP conversation written frame by frame, each with the flags tshark gives it (determined
// with tshark 4.0; TsharkAgreesWithEveryHandBuiltSequence checks them again). Client
// 10.0.0.1:port <-> server 10.0.0.2:5201 (fd00::1 / fd00::2 with v6).
class Script {
 public:
  explicit Script(std::string name, uint16_t client_port = 40000, bool v6 = false)
      : name_(std::move(name)), port_(client_port), v6_(v6) {}

  // A frame from the client (c) or the server (s) at t_us microseconds; flags as letters
  // ("S", "SA", "A", "PA", "FA", "R"); the flags tshark sets on it in `expect`.
  Script& c(int64_t t_us, const std::string& flags, uint32_t seq, uint32_t ack, uint32_t len,
            uint32_t expect = 0, uint16_t win = 502, int8_t ws = -1) {
    return Add(true, t_us, flags, seq, ack, len, expect, win, ws);
  }
  Script& s(int64_t t_us, const std::string& flags, uint32_t seq, uint32_t ack, uint32_t len,
            uint32_t expect = 0, uint16_t win = 502, int8_t ws = -1) {
    return Add(false, t_us, flags, seq, ack, len, expect, win, ws);
  }

  const std::string& name() const { return name_; }
  const std::vector<pcap::ParsedPacket>& frames() const { return frames_; }
  const std::vector<uint32_t>& expected() const { return expected_; }
  pcap::FlowKey client_flow() const {
    pcap::FlowKey k;
    k.src = v6_ ? V6(1) : V4(1);
    k.dst = v6_ ? V6(2) : V4(2);
    k.proto = 6;
    k.sport = port_;
    k.dport = 5201;
    return k;
  }
  pcap::FlowKey server_flow() const { return client_flow().Reversed(); }

 private:
  Script& Add(bool client, int64_t t_us, const std::string& flags, uint32_t seq, uint32_t ack,
              uint32_t len, uint32_t expect, uint16_t win, int8_t ws) {
    pcap::ParsedPacket p;
    p.ts_ns = kEpochNs + t_us * 1000;
    p.ip_version = v6_ ? 6 : 4;
    p.l4_proto = 6;
    const pcap::FlowKey k = client ? client_flow() : server_flow();
    p.src = k.src;
    p.dst = k.dst;
    p.sport = k.sport;
    p.dport = k.dport;
    p.tcp_seq = seq;
    p.tcp_ack = ack;
    p.tcp_flags = TcpFlags(flags);
    p.tcp_window = win;
    p.tcp_window_scale = (p.tcp_flags & pcap::kTcpSyn) ? ws : -1;
    p.tcp_payload_len = len;
    p.wire_len = static_cast<uint32_t>(TcpFrame(p).size());
    frames_.push_back(p);
    expected_.push_back(expect);
    return *this;
  }

  std::string name_;
  uint16_t port_;
  bool v6_;
  std::vector<pcap::ParsedPacket> frames_;
  std::vector<uint32_t> expected_;
};

// Feeds the script to `a` and checks each frame's flags.
inline void Play(const Script& s, TcpAnalyzer* a) {
  for (size_t i = 0; i < s.frames().size(); ++i) {
    EXPECT_EQ(FlagNames(a->Add(s.frames()[i])), FlagNames(s.expected()[i]))
        << s.name() << ", frame " << i + 1;
  }
}

// Client SYN at 0, SYN-ACK at irtt/2, ACK at irtt: the iRTT (client ISN 1000, server 5000).
inline Script& Handshake(Script& s, int64_t irtt_us) {
  return s.c(0, "S", 1000, 0, 0, 0, 64240)
      .s(irtt_us / 2, "SA", 5000, 1001, 0, 0, 65160)
      .c(irtt_us, "A", 1001, 5001, 0);
}

// --- The sequences, one per rule ------------------------------------------------------------

// Retransmission: data below the next expected sequence number, no dup ACKs, past the RTT.
inline Script PlainRetransmission() {
  Script s("plain_retransmission");
  Handshake(s, 200)
      .c(300, "PA", 1001, 5001, 100)
      .c(310, "PA", 1101, 5001, 100)
      .s(400, "A", 5001, 1101, 0)
      .c(50'000, "PA", 1101, 5001, 100, kRT)  // the RTO fired: 49.7 ms after, iRTT 0.2 ms
      .s(50'100, "A", 5001, 1201, 0);
  return s;
}

// Fast retransmission: the original ACK and three duplicates of it, then the segment they ask
// for within 20 ms. tshark marks it tcp.analysis.fast_retransmission AND retransmission.
inline Script FastRetransmission(bool v6 = false) {
  Script s(v6 ? "fast_retransmission_v6" : "fast_retransmission", 40000, v6);
  Handshake(s, 200)
      .c(300, "PA", 1001, 5001, 100)
      .c(301, "PA", 1101, 5001, 100)  // lost after the capture point
      .c(302, "PA", 1201, 5001, 100)
      .c(303, "PA", 1301, 5001, 100)
      .s(400, "A", 5001, 1101, 0)
      .s(401, "A", 5001, 1101, 0, kDA)
      .s(402, "A", 5001, 1101, 0, kDA)
      .s(403, "A", 5001, 1101, 0, kDA)
      .c(404, "PA", 1101, 5001, 100, kFR | kRT)
      .s(500, "A", 5001, 1401, 0)
      .c(600, "PA", 1401, 5001, 100);
  return s;
}

// The fast-retransmission conditions one by one: two duplicates suffice ("more than two
// duplicate ACKs" counts the original), one does not; 20 ms after the last ACK is too late; a
// new ACK number restarts the count.
inline Script FastRetransmissionConditions() {
  Script s("fast_retransmission_conditions");
  s.c(0, "PA", 1001, 5001, 100)
      .c(100, "PA", 1101, 5001, 100)
      .s(200, "A", 5001, 1101, 0)
      .s(210, "A", 5001, 1101, 0, kDA)
      .c(5'000, "PA", 1101, 5001, 100, kRT)  // one duplicate: a plain retransmission
      .s(5'100, "A", 5001, 1101, 0, kDA)
      .c(5'200, "PA", 1101, 5001, 100, kFR | kRT)  // two duplicates
      .c(25'100, "PA", 1101, 5001, 100, kRT)       // 20 ms after the last ACK
      .c(25'200, "PA", 1201, 5001, 100)
      .s(25'300, "A", 5001, 1201, 0)  // a new ACK number: the count restarts
      .s(25'400, "A", 5001, 1201, 0, kDA)
      .c(29'000, "PA", 1201, 5001, 100, kRT);
  return s;
}

// Out-of-order: below nextseq, less than the iRTT (here 10 ms) after nextseq last advanced, and
// not ending where nextseq is; at the iRTT or later it is a retransmission.
inline Script OutOfOrderWithinRtt() {
  Script s("out_of_order_within_rtt");
  Handshake(s, 10'000)
      .c(11'000, "PA", 1001, 5001, 100)
      .c(12'000, "PA", 1101, 5001, 100)
      .c(17'000, "PA", 1001, 5001, 100, kOO)  // 5 ms after 12 ms
      .c(21'999, "PA", 1001, 5001, 100, kOO)  // 9.999 ms
      .c(22'000, "PA", 1001, 5001, 100, kRT)  // 10 ms: not within
      .c(22'001, "PA", 1201, 5001, 100)
      .c(22'002, "PA", 1201, 5001, 100, kRT);  // a copy of the last segment: ends at nextseq
  return s;
}

// Without a handshake the threshold is Wireshark's default of 3 ms.
inline Script OutOfOrderDefaultThreshold() {
  Script s("out_of_order_default_threshold");
  s.c(0, "PA", 1001, 5001, 100)
      .c(1'000, "PA", 1101, 5001, 100)
      .c(3'999, "PA", 1001, 5001, 100, kOO)
      .c(4'000, "PA", 1001, 5001, 100, kRT);
  return s;
}

// Spurious retransmission: all of it acknowledged already by the other side. tshark adds
// tcp.analysis.retransmission; it applies even where the segment is not below nextseq.
inline Script SpuriousRetransmission() {
  Script s("spurious_retransmission");
  s.s(0, "A", 5001, 1001, 0)
      .c(100, "PA", 1001, 5001, 100)
      .c(200, "PA", 1101, 5001, 100)
      .s(300, "A", 5001, 1201, 0)
      .c(400, "PA", 1001, 5001, 100, kSP | kRT)
      .c(50'000, "PA", 1101, 5001, 100, kSP | kRT)
      .c(50'100, "PA", 1151, 5001, 100, kRT)  // partly new: not spurious
      .c(50'200, "PA", 1251, 5001, 100)
      .s(50'300, "A", 5001, 1401, 0)                // acknowledges data the capture never saw
      .c(50'400, "PA", 1351, 5001, 50, kSP | kRT);  // at nextseq, yet acknowledged
  return s;
}

// Keep-alives (seq = nextseq - 1, 0 or 1 byte) are no retransmissions, and their ACKs are
// Keep-Alive ACKs, not duplicate ACKs.
inline Script KeepAlive() {
  Script s("keep_alive");
  s.c(0, "PA", 1001, 5001, 100)
      .s(100, "A", 5001, 1101, 0)
      .c(60'000'000, "A", 1100, 5001, 0, kKA)
      .s(60'000'100, "A", 5001, 1101, 0, kKAA)
      .c(120'000'000, "A", 1100, 5001, 1, kKA)
      .s(120'000'100, "A", 5001, 1101, 0, kKAA)
      .c(120'000'200, "PA", 1101, 5001, 100);
  return s;
}

// Zero window: the receiver's window 0 (not on SYN/FIN/RST); the sender's one-byte probes do
// not advance nextseq; the probes' ACKs; the window opening again is a window update.
inline Script ZeroWindow() {
  Script s("zero_window");
  s.c(0, "PA", 1001, 5001, 100)
      .s(100, "A", 5001, 1101, 0, kZW, 0)
      .c(200'000, "A", 1101, 5001, 1, kZWP)
      .s(200'100, "A", 5001, 1101, 0, kZW | kZWPA, 0)
      .c(600'000, "A", 1101, 5001, 1, kZWP)
      .s(600'100, "A", 5001, 1101, 0, kZW | kZWPA, 0)
      .s(700'000, "A", 5001, 1101, 0, kWU, 502)
      .c(700'100, "PA", 1101, 5001, 100)  // the probe byte again, with more
      .s(700'200, "A", 5001, 1201, 0)
      .s(700'300, "R", 5001, 0, 0, 0, 0);  // window 0 on a RST: no zero window
  return s;
}

// SYN, SYN-ACK and FIN retransmissions (a SYN or FIN counts as one sequence number).
inline Script SynFinRetransmission() {
  Script s("syn_fin_retransmission");
  s.c(0, "S", 1000, 0, 0, 0, 64240)
      .c(1'000'000, "S", 1000, 0, 0, kRT, 64240)
      .s(1'000'100, "SA", 5000, 1001, 0, 0, 65160)
      .s(1'000'150, "SA", 5000, 1001, 0, kRT, 65160)
      .c(1'000'200, "A", 1001, 5001, 0)
      .c(1'000'300, "PA", 1001, 5001, 100)
      .s(1'001'000, "A", 5001, 1101, 0)
      .c(1'002'000, "FA", 1101, 5001, 0)
      .c(1'010'000, "FA", 1101, 5001, 0, kRT)
      .s(1'010'100, "FA", 5001, 1102, 0)
      .c(1'010'200, "A", 1102, 5002, 0)
      .s(1'020'000, "FA", 5001, 1102, 0, kRT)
      .c(1'020'100, "A", 1102, 5002, 0, kDA);
  return s;
}

// Sequence numbers wrap at 2^32 (RFC 9293 3.4): no loss is seen across the wrap, and
// retransmissions and out-of-order segments are found on both sides of it.
inline Script WrapAround() {
  Script s("wrap_around");
  s.c(0, "S", 4294967000u, 0, 0, 0, 64240)
      .s(5'000, "SA", 7000, 4294967001u, 0, 0, 65160)
      .c(10'000, "A", 4294967001u, 7001, 0)                // iRTT 10 ms
      .c(11'000, "PA", 4294967001u, 7001, 200)             // .. 4294967200
      .c(12'000, "PA", 4294967201u, 7001, 200)             // .. 104, across the wrap
      .c(13'000, "PA", 105, 7001, 200)                     // .. 304
      .c(14'000, "PA", 4294967201u, 7001, 200, kOO)        // within the iRTT
      .s(14'100, "A", 7001, 105, 0)                        // acknowledges across the wrap
      .c(60'000, "PA", 4294967101u, 7001, 200, kSP | kRT)  // all acknowledged
      .c(60'100, "PA", 105, 7001, 200, kRT)                // past the iRTT
      .c(60'200, "PA", 305, 7001, 100)                     // new data
      .c(60'300, "PA", 505, 7001, 100, kLS);               // 100 bytes not captured
  return s;
}

// A segment ending exactly at 2^32 leaves nextseq 0, which Wireshark (and TcpAnalyzer, to
// agree with it) takes for "not set": its copy is not flagged, the next segment starts afresh.
inline Script EndsAtTwoToThe32() {
  Script s("ends_at_2_32");
  s.c(0, "PA", 4294967096u, 5001, 100)
      .c(100, "PA", 4294967196u, 5001, 100)
      .c(10'000, "PA", 4294967196u, 5001, 100)
      .c(10'100, "PA", 0, 5001, 100)
      .c(20'000, "PA", 0, 5001, 100, kRT);
  return s;
}

// Duplicate ACKs need the same ACK number, window, and seq = nextseq, no data and none of
// SYN/FIN/RST; a new window is a window update; data with the same ACK is no duplicate ACK.
inline Script DuplicateAckRules() {
  Script s("duplicate_ack_rules");
  s.c(0, "PA", 1001, 5001, 100)
      .s(100, "A", 5001, 1101, 0)
      .s(200, "A", 5001, 1101, 0, kDA)
      .s(300, "A", 5001, 1101, 0, kWU, 600)
      .s(400, "A", 5001, 1101, 0, kDA, 600)
      .s(500, "PA", 5001, 1101, 10, 0, 600)
      .s(600, "A", 5011, 1101, 0, kDA, 600)
      .s(700, "A", 5001, 1101, 0, 0, 600)  // seq not nextseq
      .s(800, "A", 5011, 1101, 0, kZW, 0);
  return s;
}

// A new SYN with another initial sequence number on the same addresses and ports starts a new
// conversation (tcp.analysis.reused_ports); its segments are not compared with the old one's.
inline Script PortsReused() {
  Script s("ports_reused");
  Handshake(s, 200)
      .c(300, "PA", 1001, 5001, 100)
      .s(400, "A", 5001, 1101, 0)
      .c(500, "FA", 1101, 5001, 0)
      .s(600, "FA", 5001, 1102, 0)
      .c(700, "A", 1102, 5002, 0)
      .c(1'000'000, "S", 9000, 0, 0, kRP, 64240)
      .s(1'000'100, "SA", 7000, 9001, 0, 0, 65160)
      .c(1'000'200, "A", 9001, 7001, 0)
      .c(1'000'300, "PA", 9001, 7001, 100)
      .s(1'000'400, "A", 7001, 9101, 0);
  return s;
}

// A capture that starts mid-connection: the first segments set the state; what is below the
// first sequence number seen is a retransmission, a jump forward is a segment not captured.
inline Script MidConnection() {
  Script s("mid_connection");
  s.c(0, "PA", 81001, 9001, 1448)
      .s(50, "A", 9001, 82449, 0)
      .c(100, "PA", 82449, 9001, 1448)
      .c(200, "PA", 85345, 9001, 1448, kLS)
      .s(300, "A", 9001, 83897, 0)
      .s(310, "A", 9001, 83897, 0, kDA)
      .s(320, "A", 9001, 83897, 0, kDA)
      .c(400, "PA", 83897, 9001, 1448, kFR | kRT)
      .c(500, "PA", 79553, 9001, 1448, kSP | kRT);
  return s;
}

inline std::vector<Script> AllScripts() {
  return {PlainRetransmission(),
          FastRetransmission(),
          FastRetransmission(true),
          FastRetransmissionConditions(),
          OutOfOrderWithinRtt(),
          OutOfOrderDefaultThreshold(),
          SpuriousRetransmission(),
          KeepAlive(),
          ZeroWindow(),
          SynFinRetransmission(),
          WrapAround(),
          EndsAtTwoToThe32(),
          DuplicateAckRules(),
          PortsReused(),
          MidConnection()};
}

}  // namespace fabricscope::testing

// TcpAnalyzer with tshark as the oracle: every hand-built sequence (tcp_test_packets.h), and
// thousands of frames of generated conversations, are written to pcap files and must be flagged
// by tshark exactly as by TcpAnalyzer, frame by frame; and recorded real captures with tshark's
// recorded flags. (Hand-built sequences, rule by rule: tcp_analyzer_test.cc. Real captures with
// real loss: tcp_real_loss_test.cc.) The tshark comparisons are skipped when tshark is not
// installed (deploy/install-deps.sh installs it).

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <initializer_list>
#include <iostream>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_split.h"
#include "collectors/pcap/packet.h"
#include "collectors/pcap/tcp_analyzer.h"
#include "tests/common/fake_tree.h"
#include "tests/collectors/pcap/tcp_test_packets.h"
#include "tests/collectors/pcap/tcp_tshark.h"

namespace fabricscope::testing {
namespace {

// --- Recorded real captures (tests/testdata/pcap/PROVENANCE.md) -----------------------------

// tshark's recorded flags of a capture: one mask per frame, from "N<TAB>name,name" lines.
std::vector<uint32_t> RecordedTsharkFlags(const std::string& path) {
  std::vector<uint32_t> out;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    const size_t tab = line.find('\t');
    if (tab == std::string::npos) continue;
    uint32_t mask = 0;
    for (absl::string_view name : absl::StrSplit(line.substr(tab + 1), ',')) {
      for (int i = 0; i < A::kFlagCount; ++i) {
        if (name == A::FlagName(i)) mask |= 1u << i;
      }
    }
    out.push_back(mask);
  }
  return out;
}

const std::string kRecorded = std::string(FABRICSCOPE_TESTDATA) + "/pcap/tcp-loss-";

TEST(TcpAnalyzer, RecordedLossyCapturesMatchTsharksRecordedFlags) {
  for (const std::string side : {"sender", "receiver"}) {
    SCOPED_TRACE(side);
    const std::vector<uint32_t> recorded = RecordedTsharkFlags(kRecorded + side + ".tshark");
    ASSERT_GT(recorded.size(), 600u);
    TcpAnalyzer a;
    std::vector<uint32_t> ours;
    ASSERT_TRUE(AnalyzeCapture(kRecorded + side + ".pcap", &a, &ours));
    ASSERT_EQ(ours.size(), recorded.size());
    size_t differing = 0;
    for (size_t i = 0; i < ours.size(); ++i) {
      if (ours[i] != recorded[i] && ++differing <= 20) {
        ADD_FAILURE() << "frame " << i + 1 << ": tshark " << FlagNames(recorded[i]) << ", ours "
                      << FlagNames(ours[i]);
      }
    }
    EXPECT_EQ(differing, 0u);
    EXPECT_EQ(FlagCounts(ours), FlagCounts(recorded));
  }
  // The sender's capture: 49 frames of the sender flagged retransmission or out-of-order, the
  // kernel's RetransSegs delta of that transfer; and the counters of its flow say the same.
  TcpAnalyzer a;
  std::vector<uint32_t> flags;
  ASSERT_TRUE(AnalyzeCapture(kRecorded + "sender.pcap", &a, &flags));
  uint64_t retransmissions = 0, out_of_order = 0;
  for (const auto& [key, st] : a.flows()) {
    if (pcap::FormatAddress(key.src) != "10.215.0.1") continue;
    retransmissions += st.retransmissions;
    out_of_order += st.out_of_order;
  }
  EXPECT_EQ(retransmissions, 45u);
  EXPECT_EQ(out_of_order, 4u);
  EXPECT_EQ(a.totals().all.fast_retransmissions, 1u);
  EXPECT_EQ(a.totals().connections, 2u);  // the refused SYN's port, and the transfer's
  EXPECT_EQ(flags.size(), 667u);          // two ARP frames and an ICMPv6 one do not parse
  EXPECT_EQ(a.totals().tcp_frames, 664u);
}

// --- tshark as the oracle ------------------------------------------------------------------

// Every hand-built sequence, written to one pcap file (each on its own client port, interleaved
// by time): tshark flags each frame as the sequence expects, and TcpAnalyzer gives the same
// flags on the frames read back through libpcap and the parser.
TEST(TcpAnalyzerTshark, TsharkAgreesWithEveryHandBuiltSequence) {
  const std::string tshark = FindProgram("tshark");
  if (tshark.empty()) GTEST_SKIP() << "tshark not installed (deploy/install-deps.sh installs it)";
  SCOPED_TRACE(TsharkVersion(tshark));
  struct Frame {
    pcap::ParsedPacket p;
    uint32_t expect;
    std::string where;
  };
  std::vector<Frame> frames;
  const std::vector<Script> scripts = AllScripts();
  for (size_t i = 0; i < scripts.size(); ++i) {
    const Script& s = scripts[i];
    const uint16_t port = static_cast<uint16_t>(40100 + i);
    for (size_t j = 0; j < s.frames().size(); ++j) {
      pcap::ParsedPacket p = s.frames()[j];
      (p.sport == 5201 ? p.dport : p.sport) = port;
      frames.push_back({p, s.expected()[j], s.name() + " frame " + std::to_string(j + 1)});
    }
  }
  std::stable_sort(frames.begin(), frames.end(),
                   [](const Frame& a, const Frame& b) { return a.p.ts_ns < b.p.ts_ns; });
  std::vector<pcap::ParsedPacket> packets;
  for (const Frame& f : frames) packets.push_back(f.p);
  FakeTree dir;
  const std::string path = dir.Path("hand_built.pcap");
  ASSERT_TRUE(WriteTcpCapture(path, packets));
  std::vector<TsharkFrame> rows;
  std::string error;
  ASSERT_TRUE(RunTsharkTcp(tshark, path, &rows, &error)) << error;
  ASSERT_EQ(rows.size(), frames.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    EXPECT_EQ(FlagNames(rows[i].flags), FlagNames(frames[i].expect)) << frames[i].where;
  }
  TcpAnalyzer a;
  std::vector<uint32_t> ours;
  ASSERT_TRUE(AnalyzeCapture(path, &a, &ours));
  std::string report;
  EXPECT_EQ(DiffFlags(ours, rows, &report), 0u) << report;
  EXPECT_EQ(a.totals().connections, scripts.size() + 1);  // one reuses its ports
}

// Generated conversations: random, but what a TCP stack and a capture can produce. A client
// sends segments of 0-1448 bytes (some never reach the capture, some are sent again, keep-
// alives, zero-window probes, FIN, RST, a new connection on the same ports); the server
// acknowledges with duplicate ACKs, window changes, zero windows, its own data and
// retransmissions; the times between frames straddle the thresholds (3 ms, the iRTT, 20 ms);
// initial sequence numbers are random or just below 2^32. ACK numbers never go back and never
// pass the contiguous data the capture saw from the other side: tshark 4.0 behaves in ways the
// User's Guide does not describe once an ACK acknowledges unseen data (it then takes later
// retransmissions for fast retransmissions without duplicate ACKs), which a complete capture
// never shows. Nor does a SYN or SYN-ACK come again once its side has sent anything else.
class ConversationGenerator {
 public:
  ConversationGenerator(uint64_t seed, uint16_t client_port)
      : rng_(seed), script_("generated", client_port) {}

  Script Run(int steps) {
    NewConnection(true);
    for (int i = 0; i < steps; ++i) Step();
    return script_;
  }

 private:
  static constexpr uint64_t kMod = uint64_t{1} << 32;
  struct Dir {
    uint32_t next = 0;   // next sequence number to send
    uint32_t acked = 0;  // what this side acknowledges of the other
    uint16_t win = 502;
    bool fin = false;
    uint32_t fin_seq = 0;
    std::vector<std::pair<uint32_t, uint32_t>> sent;  // (seq, len) of data segments
    bool seen = false;
    uint32_t highest = 0, contiguous = 0;  // as a capture at the sender sees them
    int last_win = -1;                     // the window of the last frame sent
    bool past_syn = false;                 // sent a frame without SYN
  };

  uint32_t Uniform(uint64_t lo, uint64_t hi) {  // [lo, hi)
    return static_cast<uint32_t>(lo + rng_() % (hi - lo));
  }
  bool Chance(double p) { return std::uniform_real_distribution<double>(0, 1)(rng_) < p; }
  template <typename T>
  T Pick(std::initializer_list<T> v) {
    return *(v.begin() + rng_() % v.size());
  }
  int64_t Gap() {
    switch (rng_() % 8) {
      case 0:
        return Uniform(1, 50);
      case 1:
        return Uniform(50, 500);
      case 2:
        return Uniform(500, 4000);
      case 3:
        return 3000;
      case 4:
        return Uniform(4000, 25000);
      case 5:
        return 20000;
      case 6:
        return Uniform(25000, 60000);
      default:
        return 0;
    }
  }
  static bool After(uint32_t a, uint32_t b) { return static_cast<int32_t>(a - b) > 0; }
  // A value in [a, b] (modulo 2^32), or a when b is not after a.
  uint32_t Between(uint32_t a, uint32_t b) {
    const uint32_t span = b - a;
    return span < (1u << 31) ? a + static_cast<uint32_t>(rng_() % (uint64_t{span} + 1)) : a;
  }

  void Emit(bool client, int64_t gap_us, const std::string& flags, uint32_t seq, uint32_t ack,
            uint16_t win, uint32_t len, int8_t ws = -1) {
    t_us_ += gap_us;
    Dir& d = client ? c_ : s_;
    const Dir& other = client ? s_ : c_;
    const uint32_t nxt = seq + len + (flags.find_first_of("SF") != std::string::npos ? 1 : 0);
    // A zero-window probe's byte may be dropped: the other side acknowledges it only as part of
    // later data.
    const bool probe = len == 1 && d.seen && seq == d.highest && other.last_win == 0;
    d.last_win = win;
    if (flags.find('S') == std::string::npos) d.past_syn = true;
    if (flags.find('R') == std::string::npos && !probe) {
      if (!d.seen || After(nxt, d.highest)) d.highest = nxt;
      if (!d.seen || seq == d.contiguous) d.contiguous = d.highest;
      d.seen = true;
    }
    if (client) {
      script_.c(t_us_, flags, seq, ack, len, 0, win, ws);
    } else {
      script_.s(t_us_, flags, seq, ack, len, 0, win, ws);
    }
  }

  void NewConnection(bool first) {
    c_ = Dir();
    s_ = Dir();
    switch (rng_() % 3) {
      case 0:
        cisn_ = static_cast<uint32_t>(rng_());
        break;
      case 1:
        cisn_ = static_cast<uint32_t>(kMod - Uniform(1, 3000));
        break;
      default:
        cisn_ = Uniform(1, 5000);
    }
    sisn_ = Chance(0.5) ? static_cast<uint32_t>(rng_())
                        : static_cast<uint32_t>(kMod - Uniform(1, 3000));
    c_.next = cisn_ + 1;
    s_.next = sisn_ + 1;
    c_.acked = s_.next;
    s_.acked = c_.next;
    cws_ = Pick<int8_t>({-1, 7, 2});
    sws_ = Pick<int8_t>({-1, 7, 0});
    if (first && Chance(0.2)) {  // the capture starts mid-connection, with client data
      Emit(true, Gap(), "PA", c_.next, c_.acked, c_.win, 100);
      c_.sent.push_back({c_.next, 100});
      c_.next += 100;
      return;
    }
    Emit(true, Gap(), "S", cisn_, 0, Pick<uint16_t>({64240, 65535}), 0, cws_);
    if (Chance(0.2)) Emit(true, Gap(), "S", cisn_, 0, 64240, 0, cws_);
    if (Chance(0.95)) {
      Emit(false, Gap(), "SA", sisn_, c_.next, 65160, 0, sws_);
      if (Chance(0.15)) Emit(false, Gap(), "SA", sisn_, c_.next, 65160, 0, sws_);
      if (Chance(0.95)) Emit(true, Gap(), "A", c_.next, s_.next, c_.win, 0);
    }
  }

  void Step() {
    const double r = std::uniform_real_distribution<double>(0, 1)(rng_);
    if (r < 0.30 && !c_.fin) {  // new data
      const uint32_t len = Pick<uint32_t>({1448, 1448, 100, 1, 0, 50});
      Emit(true, Gap(), Chance(0.5) ? "A" : "PA", c_.next, c_.acked, c_.win, len);
      c_.sent.push_back({c_.next, len});
      c_.next += len;
    } else if (r < 0.38 && !c_.sent.empty()) {  // a retransmission
      const size_t from = c_.sent.size() > 8 ? c_.sent.size() - 8 : 0;
      auto [seq, len] = c_.sent[from + rng_() % (c_.sent.size() - from)];
      if (Chance(0.3)) {
        seq = s_.acked;
        len = Pick<uint32_t>({1448, 100});
      }
      Emit(true, Gap(), "A", seq, c_.acked, c_.win, len);
    } else if (r < 0.41) {  // keep-alive
      Emit(true, Gap(), "A", c_.next - 1, c_.acked, c_.win, Pick<uint32_t>({0, 1}));
    } else if (r < 0.44 && !c_.fin) {  // one byte (a zero-window probe when the window is 0)
      Emit(true, Gap(), "A", c_.next, c_.acked, c_.win, 1);
      if (Chance(0.5)) c_.next += 1;
    } else if (r < 0.70) {  // the server acknowledges
      const uint32_t limit = c_.seen ? c_.contiguous : s_.acked;
      const double ch = std::uniform_real_distribution<double>(0, 1)(rng_);
      if (ch < 0.5) {
        s_.acked = Between(s_.acked, limit);
      } else if (ch < 0.7 && !After(s_.acked, limit)) {
        s_.acked = limit;
      }
      if (Chance(0.1)) s_.win = Pick<uint16_t>({0, 0, 502, 600, 100});
      Emit(false, Gap(), "A", s_.next, s_.acked, s_.win, 0);
    } else if (r < 0.76 && !s_.fin) {  // server data
      const uint32_t len = Pick<uint32_t>({100, 1448, 0});
      Emit(false, Gap(), "A", s_.next, s_.acked, s_.win, len);
      s_.sent.push_back({s_.next, len});
      s_.next += len;
    } else if (r < 0.80) {  // the client acknowledges
      const uint32_t limit = s_.seen ? s_.contiguous : c_.acked;
      if (Chance(0.5)) c_.acked = Between(c_.acked, limit);
      if (Chance(0.1)) c_.win = Pick<uint16_t>({0, 502, 700});
      Emit(true, Gap(), "A", c_.next, c_.acked, c_.win, 0);
    } else if (r < 0.82 && !s_.sent.empty()) {  // a server retransmission
      const size_t from = s_.sent.size() > 4 ? s_.sent.size() - 4 : 0;
      const auto [seq, len] = s_.sent[from + rng_() % (s_.sent.size() - from)];
      Emit(false, Gap(), "A", seq, s_.acked, s_.win, len);
    } else if (r < 0.84) {  // client FIN, or its retransmission
      if (!c_.fin) {
        Emit(true, Gap(), "FA", c_.next, c_.acked, c_.win, Pick<uint32_t>({0, 0, 100}));
        c_.fin_seq = c_.next;
        c_.next += 1;
        c_.fin = true;
      } else {
        Emit(true, Gap(), "FA", c_.fin_seq, c_.acked, c_.win, 0);
      }
    } else if (r < 0.85) {  // server FIN
      if (!s_.fin) {
        Emit(false, Gap(), "FA", s_.next, s_.acked, s_.win, 0);
        s_.fin_seq = s_.next;
        s_.next += 1;
        s_.fin = true;
      } else {
        Emit(false, Gap(), "FA", s_.fin_seq, s_.acked, s_.win, 0);
      }
    } else if (r < 0.86) {  // a reset, then a new connection on the same ports
      const bool client = Chance(0.5);
      const Dir& d = client ? c_ : s_;
      Emit(client, Gap(), "RA", d.next, d.acked, 0, 0);
      NewConnection(false);
    } else if (r < 0.87 && !c_.past_syn) {  // SYN again
      Emit(true, Gap(), "S", cisn_, 0, 64240, 0, cws_);
    } else if (r < 0.88 && !s_.past_syn) {  // SYN-ACK again
      Emit(false, Gap(), "SA", sisn_, cisn_ + 1, 65160, 0, sws_);
    } else if (r < 0.92 && !c_.fin) {  // a segment the capture does not see
      const uint32_t len = Pick<uint32_t>({1448, 100});
      c_.sent.push_back({c_.next, len});
      c_.next += len;
    } else {  // duplicate ACKs in a burst
      for (int k = Uniform(1, 5); k > 0; --k) {
        Emit(false, Pick<int64_t>({5, 50, 300}), "A", s_.next, s_.acked, s_.win, 0);
      }
    }
  }

  std::mt19937_64 rng_;
  Script script_;
  int64_t t_us_ = 1000;
  Dir c_, s_;
  uint32_t cisn_ = 0, sisn_ = 0;
  int8_t cws_ = -1, sws_ = -1;
};

// The recorded tshark flags are what tshark gives on the recorded captures.
TEST(TcpAnalyzerTshark, RecordedFlagsAreTsharks) {
  const std::string tshark = FindProgram("tshark");
  if (tshark.empty()) GTEST_SKIP() << "tshark not installed (deploy/install-deps.sh installs it)";
  SCOPED_TRACE(TsharkVersion(tshark));
  for (const std::string side : {"sender", "receiver"}) {
    std::vector<TsharkFrame> rows;
    std::string error;
    ASSERT_TRUE(RunTsharkTcp(tshark, kRecorded + side + ".pcap", &rows, &error)) << error;
    std::vector<uint32_t> live;
    for (const TsharkFrame& f : rows) live.push_back(f.flags);
    EXPECT_EQ(live, RecordedTsharkFlags(kRecorded + side + ".tshark")) << side;
  }
}

TEST(TcpAnalyzerTshark, GeneratedConversationsAgreeFrameByFrame) {
  const std::string tshark = FindProgram("tshark");
  if (tshark.empty()) GTEST_SKIP() << "tshark not installed (deploy/install-deps.sh installs it)";
  SCOPED_TRACE(TsharkVersion(tshark));
  // 60 conversations on different client ports, interleaved by time in one capture (more with
  // FABRICSCOPE_TCP_CONVERSATIONS=N, up to 20000, for a longer search).
  int conversations = 60;
  if (const char* env = std::getenv("FABRICSCOPE_TCP_CONVERSATIONS"); env != nullptr) {
    conversations = std::clamp(std::atoi(env), 1, 20000);
  }
  std::vector<pcap::ParsedPacket> frames;
  for (int i = 0; i < conversations; ++i) {
    const Script s = ConversationGenerator(1000 + i, static_cast<uint16_t>(30000 + i)).Run(150);
    frames.insert(frames.end(), s.frames().begin(), s.frames().end());
  }
  std::stable_sort(
      frames.begin(), frames.end(),
      [](const pcap::ParsedPacket& a, const pcap::ParsedPacket& b) { return a.ts_ns < b.ts_ns; });
  FakeTree dir;
  const std::string path = dir.Path("generated.pcap");
  ASSERT_TRUE(WriteTcpCapture(path, frames));
  std::vector<TsharkFrame> rows;
  std::string error;
  ASSERT_TRUE(RunTsharkTcp(tshark, path, &rows, &error)) << error;
  TcpAnalyzer a;
  std::vector<uint32_t> ours;
  ASSERT_TRUE(AnalyzeCapture(path, &a, &ours));
  std::string report;
  EXPECT_EQ(DiffFlags(ours, rows, &report,
                      [&](size_t i) {
                        const pcap::ParsedPacket& p = frames[i];
                        return "conversation " +
                               std::to_string((p.sport == 5201 ? p.dport : p.sport) - 30000);
                      }),
            0u)
      << report;
  // FABRICSCOPE_TCP_DUMP=N prints conversation N as "t_us c|s flags seq ack window len [ws]".
  if (const char* env = std::getenv("FABRICSCOPE_TCP_DUMP"); env != nullptr) {
    const Script s =
        ConversationGenerator(1000 + std::atoi(env), static_cast<uint16_t>(30000)).Run(150);
    for (const pcap::ParsedPacket& p : s.frames()) {
      std::string f;
      if (p.tcp_flags & pcap::kTcpSyn) f += "S";
      if (p.tcp_flags & pcap::kTcpFin) f += "F";
      if (p.tcp_flags & pcap::kTcpRst) f += "R";
      if (p.tcp_flags & pcap::kTcpAck) f += "A";
      if (f.empty()) f = "-";
      std::cout << (p.ts_ns - kEpochNs) / 1000 << (p.sport == 5201 ? " s " : " c ") << f << " "
                << p.tcp_seq << " " << p.tcp_ack << " " << p.tcp_window << " " << p.tcp_payload_len;
      if (p.tcp_window_scale >= 0) std::cout << " " << int{p.tcp_window_scale};
      std::cout << "\n";
    }
  }
  std::vector<uint32_t> theirs;
  for (const TsharkFrame& f : rows) theirs.push_back(f.flags);
  // Every rule must have been exercised, and the figures are in the log.
  std::cout << "generated capture: " << frames.size() << " frames; tshark: " << FlagCounts(theirs)
            << "\n                    ours:   " << FlagCounts(ours) << "\n";
  for (int i = 0; i < A::kFlagCount; ++i) {
    size_t n = 0;
    for (uint32_t f : theirs) n += (f >> i) & 1;
    EXPECT_GT(n, 0u) << A::FlagName(i) << " never exercised";
  }
}

}  // namespace
}  // namespace fabricscope::testing

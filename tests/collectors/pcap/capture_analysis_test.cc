// CaptureAnalysis: loss events taken before the window closes (the agent's early batches) are
// the window's own events, each once, in the order a single FillWindow would list them; each
// window's top flows and peer pairs are those a plain recount of its frames gives, for flows
// the analyzers track (counted by their flow ids) and for flows they had no room for.
#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "collectors/pcap/analysis.h"
#include "tests/collectors/pcap/pcap_test_util.h"

namespace fabricscope::testing {
namespace {

const std::string kCapture = std::string(FABRICSCOPE_TESTDATA) + "/pcap/tcp-loss-sender.pcap";

std::string Key(const v1::PacketLossEvent& e) {
  return absl::StrCat(e.kind(), "@", e.time_unix_ns(), ":", e.sport(), ">", e.dport());
}

std::vector<std::string> Keys(const std::vector<v1::PacketLossEvent>& events) {
  std::vector<std::string> out;
  for (const auto& e : events) out.push_back(Key(e));
  return out;
}

// Reads the capture into `a`, `first` packets, then (after `mid`) the rest.
void Play(pcap::CaptureAnalysis& a, int first, const std::function<void()>& mid) {
  auto src = pcap::PacketSource::OpenOffline(kCapture);
  ASSERT_TRUE(src.ok()) << src.status();
  auto cb = [&](pcap::ParseResult r, const pcap::ParsedPacket& p) { a.Add(r, p); };
  ASSERT_TRUE((*src)->Dispatch(first, cb).ok());
  mid();
  ASSERT_TRUE((*src)->Dispatch(0, cb).ok());
}

TEST(CaptureAnalysis, LossEventsTakenEarlyStayInTheirWindowOnce) {
  pcap::CaptureAnalysis whole;
  Play(whole, 0, [] {});
  v1::CaptureWindow reference;
  whole.FillWindow("veth0", {}, &reference);
  std::vector<v1::PacketLossEvent> all(reference.loss_events().begin(),
                                       reference.loss_events().end());
  ASSERT_GE(all.size(), 4u) << "the recorded capture has retransmissions";

  // The same capture with a look in the middle, at every split point of a few.
  for (int split : {1, 100, 300, 500}) {
    pcap::CaptureAnalysis a;
    std::vector<v1::PacketLossEvent> early;
    Play(a, split, [&] { early = a.TakeNewLossEvents(); });
    std::vector<v1::PacketLossEvent> more = a.TakeNewLossEvents();
    EXPECT_TRUE(a.TakeNewLossEvents().empty());
    v1::CaptureWindow w;
    std::vector<v1::PacketLossEvent> fresh;
    a.FillWindow("veth0", {}, &w, &fresh);
    EXPECT_TRUE(fresh.empty()) << split;  // everything was taken before
    std::vector<std::string> taken = Keys(early);
    for (const std::string& k : Keys(more)) taken.push_back(k);
    EXPECT_EQ(taken, Keys(all)) << "split at " << split;
    EXPECT_EQ(Keys({w.loss_events().begin(), w.loss_events().end()}), Keys(all)) << split;
    // A window with nothing new lists none.
    v1::CaptureWindow next;
    a.FillWindow("veth0", {}, &next, &fresh);
    EXPECT_EQ(next.loss_events_size(), 0);
    EXPECT_TRUE(fresh.empty());
  }
  // Without a look before, FillWindow hands every event over as fresh.
  pcap::CaptureAnalysis b;
  Play(b, 0, [] {});
  v1::CaptureWindow w;
  std::vector<v1::PacketLossEvent> fresh;
  b.FillWindow("veth0", {}, &w, &fresh);
  EXPECT_EQ(Keys(fresh), Keys(all));
}

// A RoCEv2 CNP (no PSN stream: only counted) or a TCP ACK segment, as ParseFrame fills them.
pcap::ParsedPacket RoceFrameOf(const pcap::IpAddress& src, const pcap::IpAddress& dst, uint32_t qp,
                               uint32_t wire_len) {
  pcap::ParsedPacket p;
  p.ip_version = 4;
  p.src = src;
  p.dst = dst;
  p.l4_proto = 17;
  p.sport = 49152;
  p.dport = pcap::kRoceV2Port;
  p.roce = true;
  p.bth_opcode = 0x81;
  p.bth_dest_qp = qp;
  p.wire_len = wire_len;
  return p;
}
pcap::ParsedPacket TcpFrameOf(const pcap::IpAddress& src, const pcap::IpAddress& dst,
                              uint16_t sport, uint16_t dport, uint32_t seq, uint32_t wire_len) {
  pcap::ParsedPacket p;
  p.ip_version = 4;
  p.src = src;
  p.dst = dst;
  p.l4_proto = 6;
  p.sport = sport;
  p.dport = dport;
  p.tcp_seq = seq;
  p.tcp_flags = pcap::kTcpAck;
  p.tcp_window = 1000;
  p.tcp_payload_len = wire_len > 66 ? wire_len - 66 : 0;
  p.wire_len = wire_len;
  return p;
}

using Recount = std::map<pcap::FlowKey, std::pair<uint64_t, uint64_t>>;  // packets, bytes

// The window's top flows and pairs against the recount: each listed flow's figures, the order
// (bytes down, ties by key), and that nothing left out has more bytes than the last listed.
void ExpectTop(const v1::CaptureWindow& w, const Recount& flows, size_t top_k,
               const std::string& where) {
  std::vector<std::pair<pcap::FlowKey, std::pair<uint64_t, uint64_t>>> want(flows.begin(),
                                                                            flows.end());
  std::stable_sort(want.begin(), want.end(),
                   [](const auto& a, const auto& b) { return a.second.second > b.second.second; });
  ASSERT_EQ(static_cast<size_t>(w.top_flows_size()), std::min(top_k, want.size())) << where;
  for (int i = 0; i < w.top_flows_size(); ++i) {
    const v1::FlowWindow& f = w.top_flows(i);
    const pcap::FlowKey& k = want[static_cast<size_t>(i)].first;
    EXPECT_EQ(f.src() + ">" + f.dst() + "/" + std::to_string(f.qp()) + ":" +
                  std::to_string(f.sport()) + ">" + std::to_string(f.dport()),
              pcap::FormatAddress(k.src) + ">" + pcap::FormatAddress(k.dst) + "/" +
                  std::to_string(k.qp) + ":" + std::to_string(k.sport) + ">" +
                  std::to_string(k.dport))
        << where << " rank " << i;
    EXPECT_EQ(f.packets(), want[static_cast<size_t>(i)].second.first) << where << " rank " << i;
    EXPECT_EQ(f.bytes(), want[static_cast<size_t>(i)].second.second) << where << " rank " << i;
  }
  std::map<std::pair<std::string, std::string>, uint64_t> pairs;
  for (const auto& [k, v] : flows) {
    pairs[{pcap::FormatAddress(k.src), pcap::FormatAddress(k.dst)}] += v.second;
  }
  std::vector<std::pair<std::pair<std::string, std::string>, uint64_t>> want_pairs(pairs.begin(),
                                                                                   pairs.end());
  std::stable_sort(want_pairs.begin(), want_pairs.end(),
                   [](const auto& a, const auto& b) { return a.second > b.second; });
  ASSERT_EQ(static_cast<size_t>(w.top_peers_size()), std::min(top_k, want_pairs.size())) << where;
  for (int i = 0; i < w.top_peers_size(); ++i) {
    EXPECT_EQ(w.top_peers(i).bytes(), want_pairs[static_cast<size_t>(i)].second) << where;
    if (i + 1 < w.top_peers_size()) {
      EXPECT_GE(w.top_peers(i).bytes(), w.top_peers(i + 1).bytes()) << where;
    }
  }
}

// Seeded mixes of RoCE QPs and TCP connections (both directions), over two windows: every
// flow listed (top_k above their count) with the recount's figures, and the second window only
// its own frames (the flow ids' counters reset, their flows kept).
TEST(CaptureAnalysis, WindowTopFlowsAndPairsMatchARecount) {
  const pcap::IpAddress hosts[4] = {Ip("10.0.0.1"), Ip("10.0.0.2"), Ip("10.0.1.1"), Ip("fd00::7")};
  for (uint32_t seed : {1u, 2u, 3u}) {
    std::mt19937 rng(seed);
    pcap::CaptureAnalysis::Options options;
    options.top_k = 1000;
    pcap::CaptureAnalysis a(options);
    for (int window = 0; window < 2; ++window) {
      Recount recount;
      const int frames = 2000 + static_cast<int>(rng() % 3000);
      for (int i = 0; i < frames; ++i) {
        const pcap::IpAddress& s = hosts[rng() % 4];
        const pcap::IpAddress& d = hosts[rng() % 4];
        const uint32_t len = 64 + rng() % 4000;
        const pcap::ParsedPacket p =
            rng() % 3 != 0 ? RoceFrameOf(s, d, 0x100 + rng() % 40, len)
                           : TcpFrameOf(s, d, static_cast<uint16_t>(40000 + rng() % 8),
                                        static_cast<uint16_t>(5000 + rng() % 2),
                                        static_cast<uint32_t>(i) * 1000, len);
        a.Add(pcap::ParseResult::kOk, p);
        auto& [packets, bytes] = recount[pcap::FlowKeyOf(p)];
        ++packets;
        bytes += len;
      }
      v1::CaptureWindow w;
      a.FillWindow("eth0", {}, &w);
      ExpectTop(w, recount, options.top_k, absl::StrCat("seed ", seed, " window ", window));
      uint64_t total = 0;
      for (const auto& [k, v] : recount) total += v.second;
      EXPECT_EQ(w.window_bytes(), total);
      EXPECT_EQ(w.window_packets(), static_cast<uint64_t>(frames));
    }
  }
}

// Past the RoCE analyzer's 65536 flows, a new flow's frames still count in the window (by key):
// three late heavy QPs take the top flows, their pair the top pair.
TEST(CaptureAnalysis, FlowsTheAnalyzerHasNoRoomForStillCount) {
  pcap::CaptureAnalysis::Options options;
  options.top_k = 4;
  pcap::CaptureAnalysis a(options);
  Recount recount;
  auto add = [&](const pcap::ParsedPacket& p) {
    a.Add(pcap::ParseResult::kOk, p);
    auto& [packets, bytes] = recount[pcap::FlowKeyOf(p)];
    ++packets;
    bytes += p.wire_len;
  };
  // The analyzer's flows, each its own pair (10.1.x.y -> 10.0.0.2) of 100 bytes.
  const pcap::IpAddress d = Ip("10.0.0.2");
  const uint32_t max_flows = static_cast<uint32_t>(pcap::RoceAnalyzer::Options().max_flows);
  for (uint32_t qp = 0; qp < max_flows; ++qp) {
    add(RoceFrameOf(Ip(absl::StrCat("10.1.", qp >> 8, ".", qp & 255)), d, qp, 100));
  }
  const pcap::IpAddress late_src = Ip("10.9.0.1"), late_dst = Ip("10.9.0.2");
  for (int i = 0; i < 10; ++i) {
    for (uint32_t qp : {7u, 8u, 9u}) add(RoceFrameOf(late_src, late_dst, qp, 1000 + qp));
  }
  EXPECT_EQ(a.roce().untracked_packets(), 30u);
  v1::CaptureWindow w;
  a.FillWindow("eth0", {}, &w);
  ExpectTop(w, recount, options.top_k, "past max_flows");
  ASSERT_GE(w.top_flows_size(), 3);
  EXPECT_EQ(w.top_flows(0).qp(), 9u);
  EXPECT_EQ(w.top_peers(0).src(), "10.9.0.1");
  EXPECT_EQ(w.untracked_flows_total(), 30u);
}

}  // namespace
}  // namespace fabricscope::testing

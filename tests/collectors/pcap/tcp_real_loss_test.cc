// Real TCP transfers through real loss, captured live, with tshark as the oracle.
//
// Three network namespaces, sender -> router -> receiver, joined by veth pairs with GSO/TSO off
// (one TCP segment per frame). The router's link towards the receiver is a tbf whose small
// queue tail-drops (netem is not available everywhere: this kernel has no sch_netem; the tbf
// drops as a congested switch port does, which is the loss TCP meets in a cluster). One real
// TCP transfer per configuration (tests/tools fabricscope-burst), captured with dumpcap on the
// sender's veth and on the receiver's veth at the same time.
//
// For both captures, TcpAnalyzer's flags must equal tshark's tcp.analysis flags on every frame
// (so every count equals tshark's), and the per-flow counters must add up to them.
//
// The sender's capture must also agree with the kernel: the RetransSegs delta of the sending
// namespace (/proc/net/snmp) equals the number of the sender's frames that tshark flags as
// retransmission or out-of-order. Why equal: every segment the kernel retransmits (data, SYN or
// FIN; RetransSegs counts segments, and with GSO off a segment is one frame) leaves through the
// sender's veth, whose capture sees every frame the stack hands the device, before any drop
// (the drops are further along, in the router); the kernel retransmits only sequence numbers
// below snd_nxt, which is the highest sequence number the capture has seen, so tshark flags
// each retransmission: as a retransmission (fast/spurious ones carry that flag too), or as
// out-of-order when it leaves within the initial RTT of the last new segment (tens of
// microseconds on veth; a capture at the sender cannot see real reordering); and the sender
// sends nothing else below snd_nxt (no keep-alives or zero-window probes in a transfer this
// short). The sender capture must also show no segment "not captured".
//
// Needs root (namespaces), ip, tc with tbf, dumpcap and tshark; skipped with the reason
// otherwise. The namespaces are deleted whatever happens.

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <iostream>
#include <map>
#include <memory>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "collectors/pcap/flow.h"
#include "collectors/pcap/tcp_analyzer.h"
#include "tests/common/fake_tree.h"
#include "tests/common/subprocess.h"
#include "tests/common/wait.h"
#include "tests/collectors/pcap/tcp_tshark.h"

namespace fabricscope::testing {
namespace {

namespace pcap = collectors::pcap;
using A = TcpAnalyzer;

constexpr char kSenderAddr[] = "10.215.0.1";
constexpr char kReceiverAddr[] = "10.215.0.6";

struct Tools {
  std::string ip, tc, dumpcap, tshark, ethtool;
  std::string missing;  // why the test cannot run
};

Tools FindTools() {
  Tools t;
  t.ip = FindProgram("ip");
  t.tc = FindProgram("tc");
  t.dumpcap = FindProgram("dumpcap");
  t.tshark = FindProgram("tshark");
  t.ethtool = FindProgram("ethtool");
  if (geteuid() != 0) t.missing = "needs root for network namespaces";
  if (t.ip.empty() || t.tc.empty()) t.missing = "iproute2 (ip, tc) not installed";
  if (t.tshark.empty() || t.dumpcap.empty()) {
    t.missing = "tshark/dumpcap not installed (deploy/install-deps.sh installs them)";
  }
  if (access(FABRICSCOPE_BURST_BIN, X_OK) != 0) t.missing = "fabricscope-burst not built";
  return t;
}

// sender (s0 10.215.0.1/30) -- (r0 .2/30) router (r1 .5/30) -- (d0 .6/30) receiver.
class LossyPath {
 public:
  explicit LossyPath(const Tools& t) : t_(t) {
    const std::string tag = std::to_string(getpid());
    sender_ = "fstcp-" + tag + "-s";
    router_ = "fstcp-" + tag + "-r";
    receiver_ = "fstcp-" + tag + "-d";
  }
  ~LossyPath() {
    std::string out;
    for (const std::string& ns : {sender_, router_, receiver_}) {
      RunCommand(t_.ip + " netns del " + ns, &out);
    }
  }
  LossyPath(const LossyPath&) = delete;
  LossyPath& operator=(const LossyPath&) = delete;

  const std::string& sender() const { return sender_; }
  const std::string& receiver() const { return receiver_; }

  // Builds the path; "" or why it cannot be built here.
  std::string Create() {
    for (const std::string& ns : {sender_, router_, receiver_}) {
      if (!Run(t_.ip + " netns add " + ns)) return "cannot create network namespaces: " + out_;
    }
    if (!Run(t_.ip + " link add s0 netns " + sender_ + " type veth peer name r0 netns " +
             router_) ||
        !Run(t_.ip + " link add r1 netns " + router_ + " type veth peer name d0 netns " +
             receiver_)) {
      return "cannot create veth pairs: " + out_;
    }
    const std::vector<std::pair<std::string, std::string>> links = {
        {sender_, "s0"}, {router_, "r0"}, {router_, "r1"}, {receiver_, "d0"}};
    const std::map<std::string, std::string> addrs = {{"s0", "10.215.0.1/30"},
                                                      {"r0", "10.215.0.2/30"},
                                                      {"r1", "10.215.0.5/30"},
                                                      {"d0", "10.215.0.6/30"}};
    for (const auto& [ns, dev] : links) {
      // One TCP segment per frame: no GSO/TSO super-frames (and no GRO at the receiver).
      if (!Run(t_.ip + " -n " + ns + " addr add " + addrs.at(dev) + " dev " + dev) ||
          !Run(t_.ip + " -n " + ns + " link set " + dev + " up") ||
          !Run(t_.ip + " -n " + ns + " link set " + dev + " gso_max_segs 1")) {
        return "cannot configure " + dev + ": " + out_;
      }
      if (!t_.ethtool.empty()) {
        Run(t_.ip + " netns exec " + ns + " " + t_.ethtool + " -K " + dev +
            " tso off gso off gro off");
      }
    }
    for (const std::string& ns : {sender_, router_, receiver_}) {
      Run(t_.ip + " -n " + ns + " link set lo up");
    }
    if (!Run(t_.ip + " -n " + sender_ + " route add default via 10.215.0.2") ||
        !Run(t_.ip + " -n " + receiver_ + " route add default via 10.215.0.5") ||
        !Run(t_.ip + " netns exec " + router_ + " sysctl -qw net.ipv4.ip_forward=1")) {
      return "cannot route: " + out_;
    }
    return "";
  }

  // The router's egress towards the receiver: a token bucket at `rate` whose queue holds
  // `limit` bytes; what does not fit is dropped.
  std::string Shape(const std::string& rate, int limit) {
    if (!Run(t_.ip + " netns exec " + router_ + " " + t_.tc +
             " qdisc replace dev r1 root tbf rate " + rate + " burst 3000 limit " +
             std::to_string(limit))) {
      return "tbf unavailable: " + out_;
    }
    return "";
  }

  // /proc/net/snmp Tcp RetransSegs of the sending namespace; -1 if unreadable.
  int64_t SenderRetransSegs() {
    if (!Run(t_.ip + " netns exec " + sender_ + " cat /proc/net/snmp")) return -1;
    std::vector<std::string> names;
    for (absl::string_view line : absl::StrSplit(out_, '\n')) {
      if (!absl::ConsumePrefix(&line, "Tcp: ")) continue;
      std::vector<std::string> cols = absl::StrSplit(line, ' ', absl::SkipEmpty());
      if (names.empty()) {
        names = cols;
        continue;
      }
      for (size_t i = 0; i < names.size() && i < cols.size(); ++i) {
        int64_t v = 0;
        if (names[i] == "RetransSegs" && absl::SimpleAtoi(cols[i], &v)) return v;
      }
    }
    return -1;
  }

  // Whether the sending namespace still has a TCP socket on `port` that is not closed (in
  // TIME_WAIT every segment it will ever send has been sent).
  bool SenderSocketOpen(uint16_t port) {
    if (!Run(t_.ip + " netns exec " + sender_ + " cat /proc/net/tcp")) return true;
    char hex[8];
    std::snprintf(hex, sizeof(hex), ":%04X", port);
    for (absl::string_view line : absl::StrSplit(out_, '\n', absl::SkipEmpty())) {
      std::vector<std::string> cols = absl::StrSplit(line, ' ', absl::SkipEmpty());
      if (cols.size() < 4 || cols[2].find(hex) == std::string::npos) continue;
      if (cols[3] != "06") return true;  // 06: TIME_WAIT
    }
    return false;
  }

  std::vector<std::string> InNs(const std::string& ns, std::vector<std::string> argv) const {
    argv.insert(argv.begin(), {t_.ip, "netns", "exec", ns});
    return argv;
  }

 private:
  bool Run(const std::string& cmd) {
    out_.clear();
    return RunCommand(cmd, &out_) == 0;
  }

  const Tools& t_;
  std::string sender_, router_, receiver_;
  std::string out_;
};

struct Config {
  std::string name;
  std::string congestion;  // "" = the namespace's default
  std::string rate;
  int limit;  // tbf queue bytes
};

// What one capture gave: our flags and tshark's per frame, and the figures.
struct CaptureResult {
  std::vector<uint32_t> ours;
  std::vector<TsharkFrame> tshark;
  std::map<pcap::FlowKey, pcap::TcpFlowStats> flows;
  uint64_t dumpcap_dropped = 0;
};

// Counts of the frames from `src` that tshark flags with any of `mask`.
size_t TsharkFrom(const CaptureResult& r, const std::string& src, uint32_t mask) {
  size_t n = 0;
  for (const TsharkFrame& f : r.tshark) n += f.src == src && (f.flags & mask) != 0;
  return n;
}

void CheckCapture(const std::string& tshark, const std::string& path, CaptureResult* r) {
  TcpAnalyzer a;
  ASSERT_TRUE(AnalyzeCapture(path, &a, &r->ours)) << path;
  std::string error;
  ASSERT_TRUE(RunTsharkTcp(tshark, path, &r->tshark, &error)) << error;
  std::string report;
  EXPECT_EQ(DiffFlags(r->ours, r->tshark, &report), 0u)
      << path << ": frames where TcpAnalyzer and tshark disagree:\n"
      << report;
  r->flows = a.flows();
  // The per-flow counters are the per-frame flags added up.
  for (const auto& [key, st] : r->flows) {
    const std::string src = pcap::FormatAddress(key.src);
    auto count = [&](uint32_t mask) {
      size_t n = 0;
      for (const TsharkFrame& f : r->tshark) {
        n += f.src == src && f.sport == key.sport && (f.flags & mask) != 0;
      }
      return n;
    };
    EXPECT_EQ(st.retransmissions, count(A::kRetransmission)) << src;
    EXPECT_EQ(st.fast_retransmissions, count(A::kFastRetransmission)) << src;
    EXPECT_EQ(st.spurious_retransmissions, count(A::kSpuriousRetransmission)) << src;
    EXPECT_EQ(st.out_of_order, count(A::kOutOfOrder)) << src;
    EXPECT_EQ(st.duplicate_acks, count(A::kDuplicateAck)) << src;
    EXPECT_EQ(st.zero_windows, count(A::kZeroWindow)) << src;
  }
}

// Starts dumpcap on `dev` in `ns` writing `file`; waits until it captures.
std::unique_ptr<Subprocess> StartCapture(const Tools& t, const LossyPath& path,
                                         const std::string& ns, const std::string& dev,
                                         const std::string& file) {
  auto p = std::make_unique<Subprocess>(
      path.InNs(ns, {t.dumpcap, "-q", "-i", dev, "-s", "128", "-P", "-w", file}));
  if (!p->Start()) return nullptr;
  if (!p->WaitForLine(std::regex("Capturing on"), std::chrono::seconds(10))) return nullptr;
  return p;
}

// Waits until both captures hold a frame: "Capturing on" comes before dumpcap's socket takes
// frames, and a capture that misses the transfer's SYN cannot be compared. Probes with UDP
// datagrams from the sender (the TCP analysis passes them over), each followed by up to 500 ms
// for dumpcap's block (read timeout 250 ms) to reach the files. False after 40 probes.
bool WaitCapturing(const LossyPath& path, const std::vector<std::string>& files) {
  auto holds_frame = [&] {
    for (const std::string& f : files) {
      std::error_code ec;
      const auto size = std::filesystem::file_size(f, ec);
      if (ec || size <= 24) return false;  // the pcap file header alone
    }
    return true;
  };
  for (int probe = 0; probe < 40; ++probe) {
    Subprocess udp(
        path.InNs(path.sender(),
                  {"bash", "-c", std::string("echo probe > /dev/udp/") + kReceiverAddr + "/9"}));
    if (udp.Start()) udp.Wait();
    if (WaitFor(holds_frame, std::chrono::milliseconds(500))) return true;
  }
  return false;
}

// Stops dumpcap (SIGINT: it writes out what it has) and returns the packets it says the
// interface dropped, or -1.
int64_t StopCapture(Subprocess* p) {
  p->Stop(SIGINT);
  auto m = p->WaitForLine(std::regex(R"(received/dropped on interface '[^']*': \d+/(\d+))"),
                          std::chrono::seconds(5));
  int64_t dropped = -1;
  if (m && absl::SimpleAtoi((*m)[1].str(), &dropped)) return dropped;
  return -1;
}

TEST(TcpAnalyzerRealCapture, LossyTransfersAgreeWithTsharkAndTheKernel) {
  const Tools tools = FindTools();
  if (!tools.missing.empty()) GTEST_SKIP() << tools.missing;
  SCOPED_TRACE(TsharkVersion(tools.tshark));
  LossyPath path(tools);
  if (const std::string why = path.Create(); !why.empty()) GTEST_SKIP() << why;
  FakeTree dir;

  const std::vector<Config> configs = {
      {"cubic_200mbit_15KB", "cubic", "200mbit", 15000},
      {"default_cc_200mbit_15KB", "", "200mbit", 15000},
      {"cubic_100mbit_6KB", "cubic", "100mbit", 6000},
  };
  uint16_t port = 5201;
  for (const Config& cfg : configs) {
    SCOPED_TRACE(cfg.name);
    const bool failed_before = ::testing::Test::HasFailure();
    ++port;
    if (const std::string why = path.Shape(cfg.rate, cfg.limit); !why.empty()) {
      GTEST_SKIP() << why;
    }
    const std::string snd_file = dir.Path(cfg.name + "-sender.pcap");
    const std::string rcv_file = dir.Path(cfg.name + "-receiver.pcap");
    std::unique_ptr<Subprocess> snd_cap = StartCapture(tools, path, path.sender(), "s0", snd_file);
    std::unique_ptr<Subprocess> rcv_cap =
        StartCapture(tools, path, path.receiver(), "d0", rcv_file);
    ASSERT_TRUE(snd_cap && rcv_cap) << "dumpcap did not start";
    ASSERT_TRUE(WaitCapturing(path, {snd_file, rcv_file})) << "dumpcap captured no probe";

    const std::string listen = std::string(kReceiverAddr) + ":" + std::to_string(port);
    Subprocess receiver(path.InNs(
        path.receiver(), {FABRICSCOPE_BURST_BIN, "receive", "--listen=" + listen, "--timeout=20"}));
    ASSERT_TRUE(receiver.Start());
    ASSERT_TRUE(receiver.WaitForLine(std::regex("listening="), std::chrono::seconds(10)))
        << receiver.Output();

    const int64_t retrans_before = path.SenderRetransSegs();
    ASSERT_GE(retrans_before, 0);
    std::vector<std::string> send_argv = {FABRICSCOPE_BURST_BIN, "send", "--connect=" + listen,
                                          "--bytes=3m", "--timeout=20"};
    if (!cfg.congestion.empty()) send_argv.push_back("--congestion=" + cfg.congestion);
    Subprocess sender(path.InNs(path.sender(), send_argv));
    ASSERT_TRUE(sender.Start());
    auto done = sender.WaitForLine(std::regex(R"(retrans=(\d+))"), std::chrono::seconds(30));
    ASSERT_TRUE(done) << sender.Output();
    EXPECT_EQ(sender.Wait(), 0) << sender.Output();
    EXPECT_EQ(receiver.Wait(), 0) << receiver.Output();
    // Every segment the sender will send has left once its socket is closed (TIME_WAIT).
    EXPECT_TRUE(WaitFor([&] { return !path.SenderSocketOpen(port); }, std::chrono::seconds(10)))
        << "the sender's socket did not close";
    const int64_t retrans_after = path.SenderRetransSegs();
    // dumpcap gets frames from the kernel in blocks that are handed over when full or after
    // its read timeout (250 ms); frames in a block still open when it stops are lost.
    std::this_thread::sleep_for(std::chrono::milliseconds(700));
    const int64_t snd_dropped = StopCapture(snd_cap.get());
    const int64_t rcv_dropped = StopCapture(rcv_cap.get());
    EXPECT_EQ(snd_dropped, 0) << "dumpcap lost frames at the sender";
    EXPECT_EQ(rcv_dropped, 0) << "dumpcap lost frames at the receiver";

    CaptureResult snd, rcv;
    CheckCapture(tools.tshark, snd_file, &snd);
    CheckCapture(tools.tshark, rcv_file, &rcv);

    // The sender's capture is complete: it holds the sender's SYN and FIN.
    {
      int linktype = 0;
      std::vector<PcapRecord> records;
      ASSERT_TRUE(ReadPcap(snd_file, &linktype, &records));
      bool syn = false, fin = false;
      for (const PcapRecord& rec : records) {
        pcap::ParsedPacket p;
        if (pcap::ParseFrame(linktype, rec.data.data(), static_cast<uint32_t>(rec.data.size()),
                             rec.wire_len, rec.ts_ns, &p) != pcap::ParseResult::kOk ||
            p.l4_proto != 6 || pcap::FormatAddress(p.src) != kSenderAddr) {
          continue;
        }
        syn |= (p.tcp_flags & pcap::kTcpSyn) != 0;
        fin |= (p.tcp_flags & pcap::kTcpFin) != 0;
      }
      EXPECT_TRUE(syn && fin) << "the sender's capture lacks its SYN or FIN";
    }
    const int64_t retrans_segs = retrans_after - retrans_before;
    const size_t flagged = TsharkFrom(snd, kSenderAddr, A::kRetransmission | A::kOutOfOrder);
    std::cout << cfg.name << ": RetransSegs delta " << retrans_segs << " (TCP_INFO retrans "
              << (*done)[1].str() << "), sender frames flagged retransmission or out-of-order "
              << flagged << "\n  sender capture:   " << snd.ours.size()
              << " frames; tshark: " << FlagCounts([&] {
                   std::vector<uint32_t> v;
                   for (const TsharkFrame& f : snd.tshark) v.push_back(f.flags);
                   return v;
                 }())
              << "\n                    ours:   " << FlagCounts(snd.ours)
              << "\n  receiver capture: " << rcv.ours.size()
              << " frames; tshark: " << FlagCounts([&] {
                   std::vector<uint32_t> v;
                   for (const TsharkFrame& f : rcv.tshark) v.push_back(f.flags);
                   return v;
                 }())
              << "\n                    ours:   " << FlagCounts(rcv.ours) << "\n";
    EXPECT_GT(retrans_segs, 0) << "no loss: the tbf queue did not overflow";
    EXPECT_EQ(static_cast<int64_t>(flagged), retrans_segs);
    // The sender's capture sees everything the sender sends.
    EXPECT_EQ(TsharkFrom(snd, kSenderAddr, A::kPreviousSegmentNotCaptured), 0u);
    if (::testing::Test::HasFailure() && !failed_before) {  // keep the captures for a look
      char keep[] = "/tmp/fabricscope-tcp-loss.XXXXXX";
      if (mkdtemp(keep) != nullptr) {
        std::string out;
        RunCommand("cp '" + snd_file + "' '" + rcv_file + "' " + keep, &out);
        std::cout << "captures kept in " << keep << "\n";
      }
    }
  }
}

}  // namespace
}  // namespace fabricscope::testing

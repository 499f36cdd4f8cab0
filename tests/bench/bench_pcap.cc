// fabricscope_bench_pcap: offline capture analysis throughput, in packets per second, against two
// baselines measured in the same run on the same CPU:
//   bare    pcap_open_offline + pcap_dispatch with an empty callback (the floor: libpcap's read)
//   ours    PacketSource::OpenOffline + Dispatch feeding CaptureAnalysis::Add (the path of the
//           agent's capture analysis and of fabricscope-pcap)
//   tshark  tshark -r FILE -T fields -e frame.number > /dev/null (on a smaller file, as tshark is
//           far slower; skipped with a message when tshark is not installed)
//
// The capture is generated first in a temporary folder: RoCEv2 RDMA WRITE streams on several QPs
// (16-packet messages, an ACK per message, a dropped PSN now and then answered by a sequence NAK
// and a go-back-N resend) interleaved with the data and ACK segments of a few TCP connections
// (with their handshakes and a retransmission now and then). Frames are written headers-only
// (caplen <= 160 bytes, the live capture's default snaplen) with their full wire length.
//
// Flags: --frames=N (default 1000000), --tshark-frames=N (default 200000; 0 skips tshark),
//        --reps=N (default 3; the median is reported), --keep (keep the files).
// The process pins itself to the CPU it starts on; tshark inherits the pinning.

#include <pcap/pcap.h>
#include <sched.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "collectors/pcap/analysis.h"
#include "collectors/pcap/capture.h"
#include "tests/common/pcap_writer.h"

namespace {

using fabricscope::collectors::pcap::CaptureAnalysis;
using fabricscope::collectors::pcap::PacketSource;
using fabricscope::collectors::pcap::ParsedPacket;
using fabricscope::collectors::pcap::ParseResult;
namespace t = fabricscope::testing;

constexpr uint32_t kSnaplen = 160;

double NowS() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
double CpuS() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}
double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// Ethernet + IPv4 + TCP (RFC 9293), checksums 0. SYNs carry MSS and window-scale options.
t::Bytes TcpFrame(const std::string& src, const std::string& dst, uint16_t sport, uint16_t dport,
                  uint32_t seq, uint32_t ack, uint8_t flags, uint32_t payload_len) {
  const t::TestAddr s = t::TestAddr::Parse(src), d = t::TestAddr::Parse(dst);
  const bool syn = (flags & 0x02) != 0;
  const uint16_t thl = syn ? 28 : 20;
  t::Bytes tcp;
  t::PutBe16(&tcp, sport);
  t::PutBe16(&tcp, dport);
  t::PutBe32(&tcp, seq);
  t::PutBe32(&tcp, ack);
  tcp.push_back(static_cast<uint8_t>((thl / 4) << 4));
  tcp.push_back(flags);
  t::PutBe16(&tcp, 2048);  // window (scaled by 2^7)
  t::PutBe16(&tcp, 0);     // checksum
  t::PutBe16(&tcp, 0);     // urgent
  if (syn) {
    for (uint8_t x : {2, 4, 0x23, 0x8C, 1, 3, 3, 7}) tcp.push_back(x);  // MSS 9100, NOP, WS 7
  }
  tcp.insert(tcp.end(), payload_len, 0x5A);
  t::Bytes ip;
  ip.push_back(0x45);
  ip.push_back(0);
  t::PutBe16(&ip, static_cast<uint16_t>(20 + tcp.size()));
  t::PutBe16(&ip, 0x4321);
  t::PutBe16(&ip, 0x4000);
  ip.push_back(64);
  ip.push_back(6);
  t::PutBe16(&ip, 0);
  ip.insert(ip.end(), s.bytes, s.bytes + 4);
  ip.insert(ip.end(), d.bytes, d.bytes + 4);
  ip.insert(ip.end(), tcp.begin(), tcp.end());
  return t::EthernetFrame(ip, 0x0800);
}

struct Writers {
  t::PcapWriter* big;
  t::PcapWriter* small;  // the first small_frames frames, for tshark; may be null
  uint64_t small_frames;
  uint64_t written = 0;
  uint64_t roce = 0, tcp = 0;
  int64_t ts_ns = 1'700'000'000'000'000'000;
  void Write(const t::Bytes& f) {
    ts_ns += 700;  // ~1.4 Mpps
    const uint32_t wire = static_cast<uint32_t>(f.size());
    t::Bytes cut(f.begin(), f.begin() + std::min<size_t>(f.size(), kSnaplen));
    big->Write(cut, ts_ns, wire);
    if (small != nullptr && written < small_frames) small->Write(cut, ts_ns, wire);
    ++written;
  }
};

// One RC QP pair: the requester sends RDMA WRITE messages of 16 packets of 1024 bytes; the
// responder ACKs each message. Now and then one PSN is lost: the responder NAKs (PSN sequence
// error) at the next packet, and the requester goes back to the lost PSN.
struct RoceStream {
  std::string req, resp;
  uint32_t req_qp, resp_qp;
  uint16_t sport;
  uint32_t psn = 0;  // next PSN to send
  int in_msg = 0;    // packets of the current message sent
  uint32_t msn = 0;
  uint64_t sent = 0;
  int64_t drop_psn = -1;  // lost, not yet NAKed
  // Emits one frame (or two: data + an ACK/NAK).
  void Step(Writers* w, uint32_t drop_every) {
    t::RoceFrame f;
    f.src = req;
    f.dst = resp;
    f.sport = sport;
    f.dest_qp = resp_qp;
    f.psn = psn & 0xFFFFFF;
    f.payload_len = 1024;
    f.opcode = in_msg == 0    ? t::roce_op::kWriteFirst
               : in_msg == 15 ? t::roce_op::kWriteLast
                              : t::roce_op::kWriteMiddle;
    if (in_msg == 0) f.reth_len = 16 * 1024;
    f.ack_req = in_msg == 15;
    ++sent;
    const bool lose =
        drop_psn < 0 && drop_every != 0 && sent % drop_every == 0 && in_msg > 0 && in_msg < 14;
    if (lose) {
      drop_psn = psn;  // not written: lost on the wire before the capture point
    } else {
      w->Write(t::RoceEthernetFrame(f));
      ++w->roce;
    }
    ++psn;
    ++in_msg;
    if (drop_psn >= 0 && !lose) {
      // The responder saw a PSN past the expected one: NAK, then go back N.
      t::RoceFrame n;
      n.src = resp;
      n.dst = req;
      n.sport = sport;
      n.dest_qp = req_qp;
      n.opcode = t::roce_op::kAck;
      n.syndrome = 0x60;
      n.psn = static_cast<uint32_t>(drop_psn) & 0xFFFFFF;
      n.msn = msn;
      w->Write(t::RoceEthernetFrame(n));
      ++w->roce;
      in_msg -= static_cast<int>(psn - static_cast<uint32_t>(drop_psn));
      psn = static_cast<uint32_t>(drop_psn);
      drop_psn = -1;
      return;
    }
    if (in_msg == 16) {
      in_msg = 0;
      ++msn;
      t::RoceFrame a;
      a.src = resp;
      a.dst = req;
      a.sport = sport;
      a.dest_qp = req_qp;
      a.opcode = t::roce_op::kAck;
      a.syndrome = 0x1F;  // ACK, credits invalid
      a.psn = (psn - 1) & 0xFFFFFF;
      a.msn = msn;
      w->Write(t::RoceEthernetFrame(a));
      ++w->roce;
    }
  }
};

// A TCP connection: handshake, then MSS-sized data segments from client to server with an ACK
// every other segment; now and then one segment is retransmitted after the next one.
struct TcpStream {
  std::string cli, srv;
  uint16_t cport, sport;
  uint32_t cseq = 1000, sseq = 50000;
  int state = 0;
  uint64_t segs = 0;
  void Step(Writers* w, uint32_t retrans_every) {
    const uint32_t mss = 1448;
    switch (state) {
      case 0:
        w->Write(TcpFrame(cli, srv, cport, sport, cseq, 0, 0x02, 0));
        w->Write(TcpFrame(srv, cli, sport, cport, sseq, cseq + 1, 0x12, 0));
        ++cseq;
        ++sseq;
        w->Write(TcpFrame(cli, srv, cport, sport, cseq, sseq, 0x10, 0));
        w->tcp += 3;
        state = 1;
        return;
      default:
        break;
    }
    w->Write(TcpFrame(cli, srv, cport, sport, cseq, sseq, 0x18, mss));
    ++w->tcp;
    cseq += mss;
    ++segs;
    if (retrans_every != 0 && segs % retrans_every == 0) {
      w->Write(TcpFrame(cli, srv, cport, sport, cseq - mss, sseq, 0x18, mss));
      ++w->tcp;
    }
    if (segs % 2 == 0) {
      w->Write(TcpFrame(srv, cli, sport, cport, sseq, cseq, 0x10, 0));
      ++w->tcp;
    }
  }
};

struct Generated {
  uint64_t frames = 0, roce = 0, tcp = 0, small_frames = 0;
};

Generated Generate(const std::string& big_path, const std::string& small_path, uint64_t frames,
                   uint64_t small_frames) {
  t::PcapWriter big(big_path, DLT_EN10MB, 65535);
  std::unique_ptr<t::PcapWriter> small;
  if (small_frames > 0) small = std::make_unique<t::PcapWriter>(small_path, DLT_EN10MB, 65535);
  if (!big.ok() || (small && !small->ok())) {
    fprintf(stderr, "cannot write %s\n", big_path.c_str());
    exit(1);
  }
  Writers w{&big, small.get(), small_frames};
  std::vector<RoceStream> roce;
  for (uint32_t i = 0; i < 8; ++i) {
    RoceStream s;
    s.req = "10.1.0." + std::to_string(1 + i);
    s.resp = "10.1.1." + std::to_string(1 + i % 4);
    s.req_qp = 0x100 + i;
    s.resp_qp = 0x200 + i;
    s.sport = static_cast<uint16_t>(49152 + i * 7);
    s.psn = 0xFFFF00 + i * 16;  // some streams wrap the 24-bit PSN early
    roce.push_back(s);
  }
  std::vector<TcpStream> tcp;
  for (uint16_t i = 0; i < 4; ++i) {
    TcpStream s;
    s.cli = "10.2.0." + std::to_string(1 + i);
    s.srv = "10.2.1.1";
    s.cport = static_cast<uint16_t>(40000 + i);
    s.sport = 5201;
    tcp.push_back(s);
  }
  uint64_t x = 88172645463325252ull;  // xorshift64: which stream sends next
  while (w.written < frames) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    const uint64_t r = x % 100;
    if (r < 70) {
      roce[x / 100 % roce.size()].Step(&w, 4999);
    } else {
      tcp[x / 100 % tcp.size()].Step(&w, 4999);
    }
  }
  Generated g{w.written, w.roce, w.tcp, std::min(small_frames, w.written)};
  return g;
}

uint64_t BareCount(const std::string& path) {
  char err[PCAP_ERRBUF_SIZE] = {};
  pcap_t* p =
      pcap_open_offline_with_tstamp_precision(path.c_str(), PCAP_TSTAMP_PRECISION_NANO, err);
  if (p == nullptr) {
    fprintf(stderr, "bare: %s\n", err);
    exit(1);
  }
  uint64_t n = 0;
  while (true) {
    const int r = pcap_dispatch(
        p, 4096, [](u_char*, const pcap_pkthdr*, const u_char*) {}, nullptr);
    if (r <= 0) break;
    n += static_cast<uint64_t>(r);
  }
  pcap_close(p);
  return n;
}

struct OursResult {
  uint64_t frames = 0, parsed = 0, roce_data = 0, roce_retx = 0, roce_gaps = 0, naks = 0,
           tcp_frames = 0, tcp_retx = 0;
};

OursResult Ours(const std::string& path) {
  auto src = PacketSource::OpenOffline(path);
  if (!src.ok()) {
    fprintf(stderr, "ours: %s\n", std::string(src.status().message()).c_str());
    exit(1);
  }
  CaptureAnalysis analysis;
  const PacketSource::Callback cb = [&](ParseResult r, const ParsedPacket& p) {
    analysis.Add(r, p);
  };
  while (true) {
    auto n = (*src)->Dispatch(4096, cb);
    if (!n.ok()) {
      fprintf(stderr, "ours: %s\n", std::string(n.status().message()).c_str());
      exit(1);
    }
    if (*n < 0) break;
  }
  analysis.Flush();
  OursResult o;
  const auto c = (*src)->counters();
  o.frames = c.frames;
  o.parsed = c.parsed;
  const auto& rt = analysis.roce().totals();
  o.roce_data = rt.data_packets;
  o.roce_retx = rt.retransmitted_packets;
  o.roce_gaps = rt.psn_gaps;
  o.naks = rt.naks_sequence_error;
  o.tcp_frames = analysis.tcp().totals().tcp_frames;
  o.tcp_retx = analysis.tcp().totals().all.retransmissions;
  return o;
}

bool HaveTshark() { return system("command -v tshark >/dev/null 2>&1") == 0; }

struct Flags {
  uint64_t frames = 1'000'000, tshark_frames = 200'000;
  int reps = 3;
  bool keep = false;
};

// Parses the flags into *f; on a bad one prints the usage and returns false.
bool ParseFlags(int argc, char** argv, Flags* f) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind("--frames=", 0) == 0) {
      f->frames = std::stoull(a.substr(9));
    } else if (a.rfind("--tshark-frames=", 0) == 0) {
      f->tshark_frames = std::stoull(a.substr(16));
    } else if (a.rfind("--reps=", 0) == 0) {
      f->reps = std::max(1, std::stoi(a.substr(7)));
    } else if (a == "--keep") {
      f->keep = true;
    } else {
      fprintf(stderr, "usage: %s [--frames=N] [--tshark-frames=N (0: skip)] [--reps=N] [--keep]\n",
              argv[0]);
      return false;
    }
  }
  return true;
}

// Pins the process to the CPU it runs on and says so.
void PinToCurrentCpu() {
  const int cpu = sched_getcpu();
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  if (sched_setaffinity(0, sizeof(set), &set) != 0) perror("sched_setaffinity");
  printf("machine: nproc=%ld, pinned to cpu %d\n", sysconf(_SC_NPROCESSORS_ONLN), cpu);
}

// A fresh folder under $TMPDIR (default /tmp); empty after printing why when it cannot be made.
std::string MakeTempDir() {
  const char* tmp = getenv("TMPDIR");
  std::string dir_tmpl =
      std::string(tmp != nullptr && *tmp != 0 ? tmp : "/tmp") + "/fabricscope-bench-pcap-XXXXXX";
  std::vector<char> dir_buf(dir_tmpl.begin(), dir_tmpl.end());
  dir_buf.push_back(0);
  if (mkdtemp(dir_buf.data()) == nullptr) {
    perror("mkdtemp");
    return "";
  }
  return dir_buf.data();
}

// Generates the capture(s) and describes them.
Generated GenerateCaptures(const std::string& big, const std::string& small, uint64_t frames,
                           bool tshark, uint64_t tshark_frames) {
  double t0 = NowS();
  const Generated g = Generate(big, small, frames, tshark ? tshark_frames : 0);
  printf(
      "capture: %s, %llu frames (%llu RoCEv2, %llu TCP), %.1f MiB, caplen <= %u; written in "
      "%.1f s\n",
      big.c_str(), static_cast<unsigned long long>(g.frames),
      static_cast<unsigned long long>(g.roce), static_cast<unsigned long long>(g.tcp),
      static_cast<double>(std::filesystem::file_size(big)) / (1 << 20), kSnaplen, NowS() - t0);
  if (tshark) {
    printf("tshark capture: %s, first %llu frames, %.1f MiB\n", small.c_str(),
           static_cast<unsigned long long>(g.small_frames),
           static_cast<double>(std::filesystem::file_size(small)) / (1 << 20));
  }
  return g;
}

// The measured times of every repetition, in seconds (_w wall, _c cpu).
struct Timings {
  std::vector<double> bare_w, bare_c, ours_w, ours_c, tshark_w, tshark1_w;
};

// Times the bare count and our analysis of the big capture `reps` times, then prints what ours
// found.
void MeasureOurs(const std::string& big, const Generated& g, int reps, Timings* t) {
  BareCount(big);  // warm the page cache
  OursResult o;
  for (int r = 0; r < reps; ++r) {
    double w = NowS(), c = CpuS();
    const uint64_t n = BareCount(big);
    t->bare_w.push_back(NowS() - w);
    t->bare_c.push_back(CpuS() - c);
    if (n != g.frames) fprintf(stderr, "bare: read %llu frames\n", (unsigned long long)n);
    w = NowS();
    c = CpuS();
    o = Ours(big);
    t->ours_w.push_back(NowS() - w);
    t->ours_c.push_back(CpuS() - c);
    if (o.frames != g.frames)
      fprintf(stderr, "ours: read %llu frames\n", (unsigned long long)o.frames);
  }
  printf(
      "ours analyzed: %llu frames, %llu parsed; RoCE data %llu, retransmitted %llu, PSN gaps "
      "%llu, seq NAKs %llu; TCP frames %llu, retransmissions %llu\n",
      (unsigned long long)o.frames, (unsigned long long)o.parsed, (unsigned long long)o.roce_data,
      (unsigned long long)o.roce_retx, (unsigned long long)o.roce_gaps, (unsigned long long)o.naks,
      (unsigned long long)o.tcp_frames, (unsigned long long)o.tcp_retx);
}

// Times tshark on the small capture `reps` times, whole and stopped after the first frame.
void MeasureTshark(const std::string& small, int reps, Timings* t) {
  const std::string cmd = "tshark -r '" + small + "' -T fields -e frame.number >/dev/null 2>&1";
  // tshark's startup (dissector registration, a few seconds on a slow VM): the same command
  // stopped after the first frame (-c 1), to tell startup from per-packet cost.
  const std::string cmd1 =
      "tshark -c 1 -r '" + small + "' -T fields -e frame.number >/dev/null 2>&1";
  (void)system(cmd.c_str());  // warm (tshark's own startup files, the page cache)
  for (int r = 0; r < reps; ++r) {
    double w = NowS();
    const int rc = system(cmd.c_str());
    t->tshark_w.push_back(NowS() - w);
    if (rc != 0) fprintf(stderr, "tshark exited with %d\n", rc);
    w = NowS();
    (void)system(cmd1.c_str());
    t->tshark1_w.push_back(NowS() - w);
  }
}

// The summary table: medians of the timings, in packets per second.
void PrintSummary(const Generated& g, int reps, const Timings& t, bool tshark,
                  uint64_t tshark_frames) {
  const double nf = static_cast<double>(g.frames);
  const double bare_pps = nf / Median(t.bare_w), ours_pps = nf / Median(t.ours_w);
  printf(
      "\n=== offline capture analysis, %llu frames, median of %d (packets/s, wall; cpu "
      "s in brackets)\n",
      (unsigned long long)g.frames, reps);
  printf("bare libpcap count      %12.0f pkt/s  (%.3f s wall, %.3f s cpu)\n", bare_pps,
         Median(t.bare_w), Median(t.bare_c));
  printf("ours (CaptureAnalysis)  %12.0f pkt/s  (%.3f s wall, %.3f s cpu)\n", ours_pps,
         Median(t.ours_w), Median(t.ours_c));
  if (tshark) {
    const double tshark_pps = static_cast<double>(g.small_frames) / Median(t.tshark_w);
    printf("tshark -T fields        %12.0f pkt/s  (%.3f s wall for %llu frames)\n", tshark_pps,
           Median(t.tshark_w), (unsigned long long)g.small_frames);
    printf("ours / tshark           %12.1f x  (target >= 20)\n", ours_pps / tshark_pps);
    const double steady_s = Median(t.tshark_w) - Median(t.tshark1_w);
    if (steady_s > 0) {
      const double steady_pps = static_cast<double>(g.small_frames) / steady_s;
      printf("tshark without startup  %12.0f pkt/s  (startup, -c 1: %.3f s wall)\n", steady_pps,
             Median(t.tshark1_w));
      printf("ours / tshark w/o start %12.1f x\n", ours_pps / steady_pps);
    }
  } else {
    printf("tshark                  skipped (%s)\n",
           tshark_frames == 0 ? "--tshark-frames=0" : "tshark not installed");
  }
  printf("bare / ours             %12.2f x  (our overhead over the libpcap floor)\n",
         bare_pps / ours_pps);
}

}  // namespace

int main(int argc, char** argv) {
  Flags f;
  if (!ParseFlags(argc, argv, &f)) return 2;
  PinToCurrentCpu();

  const std::string dir = MakeTempDir();
  if (dir.empty()) return 1;
  const std::string big = dir + "/big.pcap", small = dir + "/tshark.pcap";
  const bool tshark = f.tshark_frames > 0 && HaveTshark();
  const Generated g = GenerateCaptures(big, small, f.frames, tshark, f.tshark_frames);

  Timings t;
  MeasureOurs(big, g, f.reps, &t);
  if (tshark) MeasureTshark(small, f.reps, &t);
  PrintSummary(g, f.reps, t, tshark, f.tshark_frames);

  if (!f.keep) {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  } else {
    printf("kept %s\n", dir.c_str());
  }
  return 0;
}

// fabricscope_bench_capture_live: the agent's live packet capture on a veth pair, at the highest
// rate the pair carries here without capture drops.
//
// Set-up (root only; otherwise it prints why and exits 0): two network namespaces,
// fsbench-<pid>-ctx and fsbench-<pid>-crx, joined by one veth pair (fsct<pid> -> fscr<pid>),
// 10.218.0.1/24 -> 10.218.0.2/24, a permanent neighbour entry so that no ARP runs mid-trial. Both
// namespaces are deleted at exit, and on SIGINT/SIGTERM/SIGHUP (BenchNetns).
//
// Traffic: --senders threads (default 2, one per core here), each with sendmmsg(2) on its own
// connected UDP socket in the sending namespace: RoCEv2-like datagrams to UDP port 4791 (BTH + RETH
// + payload + ICRC: RC RDMA WRITE Only on --qps queue pairs per sender, each QP with its own PSN
// sequence), paced to an offered rate in packets/s (or unpaced: as fast as they can). A receiver
// thread drains a UDP socket bound to port 4791 in the receiving namespace with recvmmsg(2), as an
// application would. On a veth the receive path up to the socket runs on the sending CPU.
//
// Capture: agent::CaptureRunner on the receiving veth, opened exactly as the agent opens it (the
// LiveCaptureOptions defaults with the agent's interface, filter "udp dst port 4791 or tcp" and
// snaplen 160: TPACKET_V3 ring of 16 MiB, immediate mode off, 50 ms block timeout), its window
// taken every 1 s as the agent's pipeline does (the agent's default window).
//
// Trials, each --seconds long:
//   1. --rounds times, alternately (the load of a shared machine drifts): senders unpaced without
//      the capture -- the rate the veth pair carries (interface rx counter of the receiving veth,
//      /proc/net/dev, and datagrams the receiver socket got) -- and with it;
//   2. capture on, paced at 10%, 25%, 50%, 75%, 100% of the median carried rate, then bisected
//      (--refine steps) between the highest drop-free and the lowest failing step.
// A capture trial is drop-free when pcap_stats reports ps_drop == 0 and ps_ifdrop == 0 and the
// analyzer counted every datagram the senders' kernel accepted (CaptureWindow.frames_total and the
// sum of window_packets). Reported: the median carried rate, the highest drop-free capture rate
// (paced or unpaced) and their ratio, and the ratio of the unpaced rates with and without capture.
// Bits/s count whole Ethernet frames (no preamble or inter-frame gap: a veth has none).
// CPU per packet (load-independent, unlike the rates on a shared machine): the sending threads'
// CPU time (CLOCK_THREAD_CPUTIME_ID; it holds the softirq receive path they run, the kernel's copy
// into the capture ring included), the receiving thread's, the ksoftirqd threads' and the capture
// thread's (/proc/.../schedstat run time in ns, Documentation/scheduler/sched-stats.rst), over the
// datagrams sent.
//
// Flags: --seconds=S (default 2), --payload=N RDMA payload bytes (default 1024), --qps=N (8),
//        --senders=N (2), --rounds=N (3), --refine=N (3). Figures only; nothing passes or fails
//        on them.

#include <arpa/inet.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "agent/capture_runner.h"
#include "collectors/pcap/capture.h"
#include "tests/bench/bench_node.h"

namespace {

using fabricscope::agent::CaptureRunner;
using fabricscope::bench::BenchNetns;
using fabricscope::bench::Median;
namespace fpcap = fabricscope::collectors::pcap;

constexpr uint16_t kRocePort = 4791;  // IANA-assigned RoCEv2 port (IBTA RoCEv2 Annex A17)
constexpr uint32_t kBthBytes = 12;    // IBTA Vol 1 9.2: Base Transport Header
constexpr uint32_t kRethBytes = 16;   // 9.3.3: RDMA Extended Transport Header
constexpr uint32_t kIcrcBytes = 4;
constexpr uint8_t kRcRdmaWriteOnly = 0x0A;         // 9.2.1 opcode: RC (000) RDMA WRITE Only (01010)
constexpr uint32_t kHeaderBytes = 14 + 20 + 8;     // Ethernet II + IPv4 + UDP
constexpr int kBatch = 64;                         // datagrams per sendmmsg/recvmmsg
constexpr int64_t kAgentWindowNs = 1'000'000'000;  // agent Options::window_ns default
constexpr char kTxAddr[] = "10.218.0.1";
constexpr char kRxAddr[] = "10.218.0.2";

int64_t ClockNs(clockid_t clock) {
  timespec ts{};
  clock_gettime(clock, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}
int64_t NowNs() { return ClockNs(CLOCK_MONOTONIC); }
int64_t ThreadCpuTimeNs() { return ClockNs(CLOCK_THREAD_CPUTIME_ID); }

// Counters of one interface from /proc/thread-self/net/dev: the calling thread's namespace.
struct DevCounters {
  uint64_t rx_packets = 0, rx_dropped = 0, tx_packets = 0, tx_dropped = 0;
};
bool ReadNetDev(const std::string& ifname, DevCounters* c) {
  std::ifstream in("/proc/thread-self/net/dev");
  std::string line;
  while (std::getline(in, line)) {
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string name = line.substr(0, colon);
    name.erase(0, name.find_first_not_of(' '));
    if (name != ifname) continue;
    std::istringstream f(line.substr(colon + 1));
    uint64_t v[12] = {};
    for (uint64_t& x : v) f >> x;
    // rx: bytes packets errs drop fifo frame compressed multicast; tx: bytes packets errs drop
    c->rx_packets = v[1];
    c->rx_dropped = v[3];
    c->tx_packets = v[9];
    c->tx_dropped = v[11];
    return true;
  }
  return false;
}

// Udp RcvbufErrors of the calling thread's namespace (/proc/thread-self/net/snmp): datagrams the
// receiver socket's buffer had no room for.
uint64_t ReadUdpRcvbufErrors() {
  std::ifstream in("/proc/thread-self/net/snmp");
  std::string header, values;
  while (std::getline(in, header)) {
    if (header.rfind("Udp:", 0) != 0 || !std::getline(in, values)) continue;
    std::istringstream h(header), v(values);
    std::string name, value;
    while (h >> name && v >> value) {
      if (name == "RcvbufErrors") return std::stoull(value);
    }
  }
  return 0;
}

// Run time in ns from a schedstat file (first field), or -1.
int64_t SchedstatNs(const std::string& path) {
  std::ifstream in(path);
  int64_t ns = -1;
  in >> ns;
  return in ? ns : -1;
}
int64_t ThreadCpuNs(pid_t tid) {
  return SchedstatNs("/proc/self/task/" + std::to_string(tid) + "/schedstat");
}

// The schedstat files of the ksoftirqd threads: the softirq work the kernel defers to them (the
// rest runs in the sending threads, in their CPU time: this kernel has no
// CONFIG_IRQ_TIME_ACCOUNTING, so nothing of it is left out).
std::vector<std::string> KsoftirqdStats() {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/proc", ec)) {
    const std::string pid = e.path().filename().string();
    if (pid.empty() || pid.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream in(e.path() / "comm");
    std::string comm;
    std::getline(in, comm);
    if (comm.rfind("ksoftirqd/", 0) == 0) out.push_back((e.path() / "schedstat").string());
  }
  return out;
}
int64_t SumNs(const std::vector<std::string>& paths) {
  int64_t sum = 0;
  for (const std::string& p : paths) sum += std::max<int64_t>(0, SchedstatNs(p));
  return sum;
}

// The thread of this process named `comm`, waiting up to 1 s for it to name itself; 0 if none.
pid_t FindThread(const std::string& comm) {
  for (int i = 0; i < 100; ++i) {
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator("/proc/self/task", ec)) {
      std::ifstream in(e.path() / "comm");
      std::string name;
      std::getline(in, name);
      if (name == comm) return static_cast<pid_t>(std::stol(e.path().filename().string()));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return 0;
}

// RoCEv2 RC RDMA WRITE Only datagrams on `qps` queue pairs, round robin, each QP with its own
// PSN sequence (mod 2^24), from one connected UDP socket.
class Sender {
 public:
  Sender(int fd, uint32_t payload_bytes, int qps, uint32_t first_qp)
      : fd_(fd), qps_(qps), first_qp_(first_qp) {
    const uint32_t len = kBthBytes + kRethBytes + payload_bytes + kIcrcBytes;
    bufs_.assign(kBatch, std::vector<uint8_t>(len, 0));
    iov_.resize(kBatch);
    msgs_.resize(kBatch);
    for (int i = 0; i < kBatch; ++i) {
      uint8_t* b = bufs_[i].data();
      b[0] = kRcRdmaWriteOnly;
      b[1] = 0;  // SE 0, MigReq 0, pad 0, TVer 0
      b[2] = 0xFF;
      b[3] = 0xFF;  // default P_Key
      // RETH: VA 0, R_Key 0, DMA length = the payload.
      b[kBthBytes + 12] = static_cast<uint8_t>(payload_bytes >> 24);
      b[kBthBytes + 13] = static_cast<uint8_t>(payload_bytes >> 16);
      b[kBthBytes + 14] = static_cast<uint8_t>(payload_bytes >> 8);
      b[kBthBytes + 15] = static_cast<uint8_t>(payload_bytes);
      iov_[i] = {b, len};
      msgs_[i].msg_hdr.msg_iov = &iov_[i];
      msgs_[i].msg_hdr.msg_iovlen = 1;
    }
  }

  struct Result {
    uint64_t sent = 0;  // datagrams the kernel accepted
    uint64_t errors = 0;
    double seconds = 0;
    int64_t cpu_ns = 0;  // this thread's CPU time, with the softirq receive path it ran
  };

  // Sends for `seconds` at `pps` datagrams/s (0: as fast as it can).
  Result Run(double pps, double seconds) {
    prctl(PR_SET_TIMERSLACK, 1UL);  // pace to the µs, not the default 50 µs
    Result r;
    const int64_t cpu0 = ThreadCpuTimeNs();
    const int64_t start = NowNs();
    const int64_t end = start + static_cast<int64_t>(seconds * 1e9);
    const uint64_t total = pps > 0 ? static_cast<uint64_t>(pps * seconds) : UINT64_MAX;
    // Paced: a batch every ~100 µs; a sender that fell behind (descheduled) catches up with
    // full batches rather than many small ones.
    const int batch =
        pps > 0 ? std::clamp(static_cast<int>(std::lround(pps * 100e-6)), 1, kBatch) : kBatch;
    while (r.sent < total) {
      int want = batch;
      const int64_t now = NowNs();
      if (pps > 0) {
        const double due = static_cast<double>(now - start) * 1e-9 * pps;  // packets due by now
        if (due < static_cast<double>(r.sent + 1)) {
          const int64_t at =
              start + static_cast<int64_t>(static_cast<double>(r.sent + batch) * 1e9 / pps);
          const timespec ts{at / 1'000'000'000, at % 1'000'000'000};
          while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nullptr) == EINTR) {
          }
        } else {
          want = std::clamp(static_cast<int>(due - static_cast<double>(r.sent)), batch, kBatch);
        }
      } else if (now >= end) {
        break;
      }
      if (r.errors > 0 && now > end + 1'000'000'000) break;  // the kernel keeps refusing
      const int n =
          static_cast<int>(std::min<uint64_t>(static_cast<uint64_t>(want), total - r.sent));
      for (int i = 0; i < n; ++i) Stamp(bufs_[i].data(), seq_ + static_cast<uint64_t>(i));
      const int k = sendmmsg(fd_, msgs_.data(), static_cast<unsigned>(n), 0);
      if (k < 0) {
        ++r.errors;
        continue;
      }
      seq_ += static_cast<uint64_t>(k);
      r.sent += static_cast<uint64_t>(k);
    }
    r.seconds = static_cast<double>(NowNs() - start) * 1e-9;
    r.cpu_ns = ThreadCpuTimeNs() - cpu0;
    return r;
  }

 private:
  // Datagram number `seq`: QP first_qp + seq % qps, PSN from 0xFFFF00 (each QP wraps early).
  void Stamp(uint8_t* b, uint64_t seq) const {
    const uint32_t qp = first_qp_ + static_cast<uint32_t>(seq % static_cast<uint64_t>(qps_));
    const uint32_t psn =
        static_cast<uint32_t>(0xFFFF00 + seq / static_cast<uint64_t>(qps_)) & 0xFFFFFF;
    b[5] = static_cast<uint8_t>(qp >> 16);
    b[6] = static_cast<uint8_t>(qp >> 8);
    b[7] = static_cast<uint8_t>(qp);
    b[9] = static_cast<uint8_t>(psn >> 16);
    b[10] = static_cast<uint8_t>(psn >> 8);
    b[11] = static_cast<uint8_t>(psn);
  }

  int fd_;
  int qps_;
  uint32_t first_qp_;
  uint64_t seq_ = 0;
  std::vector<std::vector<uint8_t>> bufs_;
  std::vector<iovec> iov_;
  std::vector<mmsghdr> msgs_;
};

// Drains a UDP socket with recvmmsg(2) until stopped; counts datagrams.
class Receiver {
 public:
  explicit Receiver(int fd) : fd_(fd) {
    thread_ = std::jthread([this](std::stop_token st) { Loop(st); });
  }
  uint64_t packets() const { return packets_.load(std::memory_order_relaxed); }
  // CPU time of the receiving thread so far.
  int64_t CpuNs() {
    clockid_t c;
    return pthread_getcpuclockid(thread_.native_handle(), &c) == 0 ? ClockNs(c) : 0;
  }

 private:
  void Loop(std::stop_token st) {
    pthread_setname_np(pthread_self(), "bench-rx");
    std::vector<std::vector<uint8_t>> bufs(kBatch, std::vector<uint8_t>(2048));
    std::vector<iovec> iov(kBatch);
    std::vector<mmsghdr> msgs(kBatch);
    for (int i = 0; i < kBatch; ++i) {
      iov[i] = {bufs[i].data(), bufs[i].size()};
      msgs[i].msg_hdr.msg_iov = &iov[i];
      msgs[i].msg_hdr.msg_iovlen = 1;
    }
    while (!st.stop_requested()) {  // SO_RCVTIMEO bounds each wait
      const int n = recvmmsg(fd_, msgs.data(), kBatch, MSG_WAITFORONE, nullptr);
      if (n > 0) packets_.fetch_add(static_cast<uint64_t>(n), std::memory_order_relaxed);
    }
  }
  int fd_;
  std::atomic<uint64_t> packets_{0};
  std::jthread thread_;  // last: joined before the members it uses go
};

struct Setup {
  std::unique_ptr<BenchNetns> tx, rx;
  std::string tx_if, rx_if;
  std::vector<int> tx_fds;  // one per sender thread, each its own UDP source port
  int rx_fd = -1;
};

bool MakeSetup(Setup* s, int senders, std::string* why) {
  const std::string pid = std::to_string(getpid());
  s->tx_if = "fsct" + pid;
  s->rx_if = "fscr" + pid;
  s->tx = BenchNetns::Create({}, why, "ctx");
  if (!s->tx) return false;
  s->rx = BenchNetns::Create({}, why, "crx");
  if (!s->rx) return false;
  if (!s->tx->AddVethTo(s->tx_if, *s->rx, s->rx_if, why) ||
      !s->tx->Ip({"addr", "add", std::string(kTxAddr) + "/24", "dev", s->tx_if}, why) ||
      !s->rx->Ip({"addr", "add", std::string(kRxAddr) + "/24", "dev", s->rx_if}, why)) {
    return false;
  }
  std::string mac;
  bool ok = s->rx->Within(
      [&] {
        s->rx_fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        const int big = 32 << 20;
        setsockopt(s->rx_fd, SOL_SOCKET, SO_RCVBUFFORCE, &big, sizeof(big));
        const timeval tv{0, 20'000};
        setsockopt(s->rx_fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
        sockaddr_in a{};
        a.sin_family = AF_INET;
        a.sin_port = htons(kRocePort);
        inet_pton(AF_INET, kRxAddr, &a.sin_addr);
        if (bind(s->rx_fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
          *why = std::string("bind ") + kRxAddr + ":4791: " + strerror(errno);
          return;
        }
        ifreq ifr{};
        std::snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "%s", s->rx_if.c_str());
        if (ioctl(s->rx_fd, SIOCGIFHWADDR, &ifr) == 0) {
          const auto* m = reinterpret_cast<const uint8_t*>(ifr.ifr_hwaddr.sa_data);
          char buf[18];
          std::snprintf(buf, sizeof(buf), "%02x:%02x:%02x:%02x:%02x:%02x", m[0], m[1], m[2], m[3],
                        m[4], m[5]);
          mac = buf;
        }
      },
      why);
  if (!ok || !why->empty()) return false;
  if (mac.empty()) {
    *why = "SIOCGIFHWADDR " + s->rx_if + " failed";
    return false;
  }
  if (!s->tx->Ip({"neigh", "replace", kRxAddr, "lladdr", mac, "dev", s->tx_if, "nud", "permanent"},
                 why)) {
    return false;
  }
  ok = s->tx->Within(
      [&] {
        for (int i = 0; i < senders && why->empty(); ++i) {
          const int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
          s->tx_fds.push_back(fd);
          const int big = 8 << 20;
          setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &big, sizeof(big));
          sockaddr_in a{};
          a.sin_family = AF_INET;
          a.sin_port = htons(kRocePort);
          inet_pton(AF_INET, kRxAddr, &a.sin_addr);
          if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
            *why = std::string("connect ") + kRxAddr + ":4791: " + strerror(errno);
          }
        }
      },
      why);
  return ok && why->empty();
}

struct Trial {
  double target_pps = 0;  // 0: unpaced
  bool capture = false;
  Sender::Result send;
  uint64_t socket_rx = 0, if_rx = 0, rx_dropped = 0, tx_dropped = 0, rcvbuf_errors = 0;
  uint64_t frames = 0, analyzed = 0, ps_drop = 0, ps_ifdrop = 0, psn_gaps = 0;
  int64_t capture_cpu_ns = -1;
  int64_t rx_cpu_ns = 0, softirqd_cpu_ns = 0;

  double pps() const {
    return send.seconds > 0 ? static_cast<double>(send.sent) / send.seconds : 0;
  }
  double if_pps() const { return send.seconds > 0 ? static_cast<double>(if_rx) / send.seconds : 0; }
  double socket_pps() const {
    return send.seconds > 0 ? static_cast<double>(socket_rx) / send.seconds : 0;
  }
  // CPU ns per datagram sent: sending threads (with the receive path they run in softirq),
  // the receiving thread, ksoftirqd and the capture thread.
  double cpu_per_packet() const {
    const int64_t all =
        send.cpu_ns + rx_cpu_ns + softirqd_cpu_ns + std::max<int64_t>(0, capture_cpu_ns);
    return send.sent > 0 ? static_cast<double>(all) / static_cast<double>(send.sent) : 0;
  }
  double capture_cpu_per_packet() const {
    return capture_cpu_ns >= 0 && analyzed > 0
               ? static_cast<double>(capture_cpu_ns) / static_cast<double>(analyzed)
               : -1;
  }
  bool drop_free() const {
    return capture && ps_drop == 0 && ps_ifdrop == 0 && frames == send.sent &&
           analyzed == send.sent;
  }
};

class Bench {
 public:
  Bench(Setup* s, uint32_t payload, int qps, double seconds) : s_(s), seconds_(seconds) {
    for (size_t i = 0; i < s->tx_fds.size(); ++i) {
      senders_.push_back(std::make_unique<Sender>(s->tx_fds[i], payload, qps,
                                                  0x100 + static_cast<uint32_t>(i) * 0x1000));
    }
  }

  absl::StatusOr<Trial> Run(double pps, bool capture) {
    Trial t;
    t.target_pps = pps;
    t.capture = capture;
    DevCounters rx0, rx1, tx0, tx1;
    uint64_t rcvbuf0 = 0, rcvbuf1 = 0;
    s_->rx->Within([&] {
      ReadNetDev(s_->rx_if, &rx0);
      rcvbuf0 = ReadUdpRcvbufErrors();
    });
    s_->tx->Within([&] { ReadNetDev(s_->tx_if, &tx0); });

    std::unique_ptr<CaptureRunner> runner;
    pid_t tid = 0;
    int64_t cpu0 = 0;
    if (capture) {
      // As agent.cc opens it: the LiveCaptureOptions defaults plus interface, filter, snaplen.
      fpcap::LiveCaptureOptions co;
      co.interface = s_->rx_if;
      co.filter = fpcap::kDefaultFilter;
      co.snaplen = 160;
      absl::StatusOr<std::unique_ptr<CaptureRunner>> r = absl::UnknownError("not run");
      s_->rx->Within([&] { r = CaptureRunner::Start(co); });
      if (!r.ok()) return r.status();
      runner = std::move(*r);
      tid = FindThread("fs-capture");
      cpu0 = tid > 0 ? ThreadCpuNs(tid) : -1;
    }
    auto take = [&] {
      if (!runner) return;
      fabricscope::v1::CaptureWindow w = runner->TakeWindow();
      t.analyzed += w.window_packets();
      t.frames = w.frames_total();
      t.ps_drop = w.kernel_dropped_total();
      t.ps_ifdrop = w.interface_dropped_total();
      const auto it = w.events_total().find("psn_gap");
      t.psn_gaps = it == w.events_total().end() ? 0 : it->second;
    };

    uint64_t base_rx = 0;
    {
      Receiver rx(s_->rx_fd);
      base_rx = rx.packets();
      const int64_t rx_cpu0 = rx.CpuNs(), softirqd0 = SumNs(ksoftirqd_);
      std::atomic<size_t> done{0};
      std::vector<Sender::Result> results(senders_.size());
      std::vector<std::jthread> send;
      for (size_t i = 0; i < senders_.size(); ++i) {
        send.emplace_back([&, i] {
          pthread_setname_np(pthread_self(), "bench-tx");
          results[i] = senders_[i]->Run(pps / static_cast<double>(senders_.size()), seconds_);
          done.fetch_add(1);
        });
      }
      // The agent's pipeline takes a capture window every window_ns.
      int64_t next = NowNs() + kAgentWindowNs;
      while (done.load() < senders_.size()) {
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
        if (NowNs() >= next) {
          take();
          next += kAgentWindowNs;
        }
      }
      send.clear();  // joins
      for (const Sender::Result& r : results) {
        t.send.sent += r.sent;
        t.send.errors += r.errors;
        t.send.seconds = std::max(t.send.seconds, r.seconds);
        t.send.cpu_ns += r.cpu_ns;
      }
      // Drain: until the receiver and the capture have everything, or nothing moved for 300 ms
      // (six 50 ms ring block timeouts), at most 3 s.
      const int64_t give_up = NowNs() + 3'000'000'000;
      uint64_t last_rx = UINT64_MAX, last_frames = UINT64_MAX;
      int64_t moved = NowNs();
      while (NowNs() < give_up) {
        take();
        const uint64_t got = rx.packets() - base_rx;
        if (got >= t.send.sent && (!capture || t.analyzed >= t.send.sent)) break;
        if (got != last_rx || t.frames != last_frames) {
          last_rx = got;
          last_frames = t.frames;
          moved = NowNs();
        } else if (NowNs() - moved > 300'000'000) {
          break;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
      t.socket_rx = rx.packets() - base_rx;
      t.rx_cpu_ns = rx.CpuNs() - rx_cpu0;
      t.softirqd_cpu_ns = SumNs(ksoftirqd_) - softirqd0;
    }
    if (runner) {
      take();
      if (tid > 0 && cpu0 >= 0) {
        const int64_t cpu1 = ThreadCpuNs(tid);
        if (cpu1 >= 0) t.capture_cpu_ns = cpu1 - cpu0;
      }
      runner->Stop();
    }
    s_->rx->Within([&] {
      ReadNetDev(s_->rx_if, &rx1);
      rcvbuf1 = ReadUdpRcvbufErrors();
    });
    s_->tx->Within([&] { ReadNetDev(s_->tx_if, &tx1); });
    t.if_rx = rx1.rx_packets - rx0.rx_packets;
    t.rx_dropped = rx1.rx_dropped - rx0.rx_dropped;
    t.tx_dropped = tx1.tx_dropped - tx0.tx_dropped;
    t.rcvbuf_errors = rcvbuf1 - rcvbuf0;
    Print(t);
    return t;
  }

  static void PrintHeader() {
    std::printf("%-8s %11s %11s %10s %10s %10s %10s %10s %7s %7s %6s %8s %8s  %s\n", "trial",
                "target/s", "sent/s", "sent", "if rx", "socket rx", "cap frames", "analyzed",
                "ps_drop", "ifdrop", "gaps", "cap ns/p", "all ns/p", "result");
  }

 private:
  void Print(const Trial& t) {
    ++n_;
    char target[32];
    if (t.target_pps > 0) {
      std::snprintf(target, sizeof(target), "%.0f", t.target_pps);
    } else {
      std::snprintf(target, sizeof(target), "unpaced");
    }
    char cpu[32] = "-";
    if (t.capture_cpu_per_packet() >= 0) {
      std::snprintf(cpu, sizeof(cpu), "%.0f", t.capture_cpu_per_packet());
    }
    std::string result;
    if (!t.capture) {
      result = "no capture";
    } else if (t.drop_free()) {
      result = "drop-free";
    } else {
      result = t.ps_drop + t.ps_ifdrop > 0 ? "capture drops" : "missed packets";
    }
    if (t.rx_dropped + t.tx_dropped + t.rcvbuf_errors > 0) {
      result += " (veth drops " + std::to_string(t.rx_dropped + t.tx_dropped) +
                ", socket buffer drops " + std::to_string(t.rcvbuf_errors) + ")";
    }
    if (t.send.errors > 0) result += " (send errors " + std::to_string(t.send.errors) + ")";
    std::printf("%-8s %11s %11.0f %10" PRIu64 " %10" PRIu64 " %10" PRIu64
                " %10s %10s %7s %7s %6s %8s %8.0f  %s\n",
                (std::string(t.capture ? "cap-" : "base-") + std::to_string(n_)).c_str(), target,
                t.pps(), t.send.sent, t.if_rx, t.socket_rx,
                t.capture ? std::to_string(t.frames).c_str() : "-",
                t.capture ? std::to_string(t.analyzed).c_str() : "-",
                t.capture ? std::to_string(t.ps_drop).c_str() : "-",
                t.capture ? std::to_string(t.ps_ifdrop).c_str() : "-",
                t.capture ? std::to_string(t.psn_gaps).c_str() : "-", cpu, t.cpu_per_packet(),
                result.c_str());
    std::fflush(stdout);
  }

  Setup* s_;
  std::vector<std::unique_ptr<Sender>> senders_;
  std::vector<std::string> ksoftirqd_ = KsoftirqdStats();
  double seconds_;
  int n_ = 0;
};

}  // namespace

int main(int argc, char** argv) {
  double seconds = 2;
  uint32_t payload = 1024;
  int qps = 8, senders = 2, rounds = 3, refine = 3;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind("--seconds=", 0) == 0) {
      seconds = std::max(0.1, std::stod(a.substr(10)));
    } else if (a.rfind("--payload=", 0) == 0) {
      payload = static_cast<uint32_t>(std::clamp(std::stoul(a.substr(10)), 0UL, 8000UL));
    } else if (a.rfind("--qps=", 0) == 0) {
      qps = std::clamp(std::stoi(a.substr(6)), 1, 4096);
    } else if (a.rfind("--senders=", 0) == 0) {
      senders = std::clamp(std::stoi(a.substr(10)), 1, 64);
    } else if (a.rfind("--rounds=", 0) == 0) {
      rounds = std::clamp(std::stoi(a.substr(9)), 1, 100);
    } else if (a.rfind("--refine=", 0) == 0) {
      refine = std::clamp(std::stoi(a.substr(9)), 0, 10);
    } else {
      std::fprintf(stderr,
                   "usage: %s [--seconds=S] [--payload=BYTES] [--qps=N] [--senders=N] "
                   "[--rounds=N] [--refine=N]\n",
                   argv[0]);
      return 2;
    }
  }
  fabricscope::bench::PrintMachine();
  {
    std::ifstream la("/proc/loadavg");
    std::string l;
    std::getline(la, l);
    std::printf("loadavg: %s\n", l.c_str());
  }
  if (geteuid() != 0) {
    std::printf(
        "skipped: not root (two network namespaces and a veth pair need "
        "CAP_SYS_ADMIN/CAP_NET_ADMIN, the capture CAP_NET_RAW)\n");
    return 0;
  }
  Setup s;
  std::string why;
  if (!MakeSetup(&s, senders, &why)) {
    std::printf("skipped: cannot set up the namespaces: %s\n", why.c_str());
    return 0;
  }
  const uint32_t frame = kHeaderBytes + kBthBytes + kRethBytes + payload + kIcrcBytes;
  const double bits = 8.0 * frame;
  std::printf(
      "setup: %s (%s %s) -> %s (%s %s), one veth pair; RoCEv2 RC RDMA WRITE Only to UDP %u, "
      "%u-byte payload, %u-byte frames; %d sender threads x %d QPs; %.1f s per trial\n",
      s.tx->name().c_str(), s.tx_if.c_str(), kTxAddr, s.rx->name().c_str(), s.rx_if.c_str(),
      kRxAddr, kRocePort, payload, frame, senders, qps, seconds);
  const fpcap::LiveCaptureOptions defaults;
  std::printf(
      "capture: agent::CaptureRunner on %s as the agent opens it: snaplen 160, filter \"%s\", "
      "%d MiB ring, immediate mode %s (TPACKET_V3), %d ms block timeout; window taken every "
      "%.0f s\n",
      s.rx_if.c_str(), fpcap::kDefaultFilter, defaults.buffer_bytes >> 20,
      defaults.immediate ? "on" : "off", defaults.timeout_ms,
      static_cast<double>(kAgentWindowNs) * 1e-9);

  Bench b(&s, payload, qps, seconds);
  // Returns from main (the namespaces go with `s`) when the capture cannot start.
  Trial t;
  auto run = [&](double pps, bool capture) {
    absl::StatusOr<Trial> r = b.Run(pps, capture);
    if (!r.ok()) {
      std::fprintf(stderr, "capture on %s: %s\n", s.rx_if.c_str(),
                   std::string(r.status().message()).c_str());
      return false;
    }
    t = *r;
    return true;
  };
  std::printf("\n");
  Bench::PrintHeader();
  // Warm-up (first-use costs of sockets, pages, the neighbour entry), not reported.
  if (!run(20'000, false)) return 1;

  // 1. Unpaced, without and with the capture, alternately (the machine's load drifts).
  std::vector<Trial> base, flat;
  for (int r = 0; r < rounds; ++r) {
    if (!run(0, false)) return 1;
    base.push_back(t);
    if (!run(0, true)) return 1;
    flat.push_back(t);
  }
  std::vector<double> base_pps, base_socket_pps, flat_pps, flat_cpu, base_all, flat_all;
  double base_max = 0;
  int flat_failed = 0;
  for (const Trial& x : base) {
    base_pps.push_back(x.if_pps());
    base_socket_pps.push_back(x.socket_pps());
    base_max = std::max(base_max, x.if_pps());
    base_all.push_back(x.cpu_per_packet());
  }
  for (const Trial& x : flat) {
    flat_pps.push_back(x.pps());
    if (x.capture_cpu_per_packet() >= 0) flat_cpu.push_back(x.capture_cpu_per_packet());
    flat_all.push_back(x.cpu_per_packet());
    if (!x.drop_free()) ++flat_failed;
  }
  const double carried = Median(base_pps);
  if (carried <= 0) {
    std::printf("the veth pair carried nothing; giving up\n");
    return 1;
  }

  // 2. Paced at fractions of the carried rate, stopping after two failures in a row; then
  // bisection between the highest drop-free step and the lowest failing step above it.
  std::vector<std::pair<double, Trial>> paced;  // (fraction of the carried rate, trial)
  int fails_in_a_row = 0;
  for (double f : {0.1, 0.25, 0.5, 0.75, 1.0}) {
    if (!run(f * carried, true)) return 1;
    paced.emplace_back(f, t);
    fails_in_a_row = t.drop_free() ? 0 : fails_in_a_row + 1;
    if (fails_in_a_row == 2) break;
  }
  double lo = 0, hi = 0;
  for (const auto& [f, c] : paced) {
    if (c.drop_free()) lo = std::max(lo, f);
  }
  for (const auto& [f, c] : paced) {
    if (!c.drop_free() && f > lo && (hi == 0 || f < hi)) hi = f;
  }
  for (int i = 0; i < refine && hi > lo; ++i) {
    const double mid = (lo + hi) / 2;
    if (!run(mid * carried, true)) return 1;
    paced.emplace_back(mid, t);
    (t.drop_free() ? lo : hi) = mid;
  }

  const Trial* best = nullptr;
  for (const Trial& x : flat) {
    if (x.drop_free() && (best == nullptr || x.pps() > best->pps())) best = &x;
  }
  for (const auto& [f, c] : paced) {
    if (c.drop_free() && (best == nullptr || c.pps() > best->pps())) best = &c;
  }

  std::printf(
      "\n=== live capture on a veth pair, %u-byte RoCEv2 frames, %d senders, %.1f s per trial, "
      "%d rounds (bits/s: Ethernet frames)\n",
      frame, senders, seconds, rounds);
  std::printf(
      "veth pair carries, no capture    %10.0f pkt/s  %6.2f Gbit/s  (median interface rx; max "
      "%.0f; receiver socket median %.0f pkt/s)\n",
      carried, carried * bits * 1e-9, base_max, Median(base_socket_pps));
  std::printf(
      "capture on, senders unpaced      %10.0f pkt/s  %6.2f Gbit/s  (median sent; max %.0f; %d of "
      "%d runs with capture drops or missed packets)\n",
      Median(flat_pps), Median(flat_pps) * bits * 1e-9,
      *std::max_element(flat_pps.begin(), flat_pps.end()), flat_failed, rounds);
  if (best != nullptr) {
    std::printf(
        "highest drop-free capture rate   %10.0f pkt/s  %6.2f Gbit/s  (%s; every packet "
        "analyzed, ps_drop = ps_ifdrop = 0)\n",
        best->pps(), best->pps() * bits * 1e-9, best->target_pps > 0 ? "paced" : "senders unpaced");
    std::printf(
        "drop-free capture / veth         %10.2f x  (highest drop-free / highest carried, each the "
        "best of its trials)\n",
        best->pps() / base_max);
  } else {
    std::printf(
        "highest drop-free capture rate   none: every capture trial dropped or missed packets\n");
  }
  std::printf(
      "capture on / off, unpaced        %10.2f x  (medians of the alternating rounds: what the "
      "capture costs the pair's rate here)\n",
      Median(flat_pps) / carried);
  // CPU time per packet does not depend on how much of the shared cores the run got.
  const double cpu_off = Median(base_all), cpu_on = Median(flat_all);
  std::printf(
      "CPU per packet, no capture       %10.0f ns  (median of the unpaced runs: senders with the "
      "softirq receive path they run, receiver, ksoftirqd)\n",
      cpu_off);
  std::printf(
      "CPU per packet, capture on       %10.0f ns  (the same plus the capture thread; the kernel's "
      "copy into the ring is in the senders' softirq time)\n",
      cpu_on);
  if (!flat_cpu.empty()) {
    std::printf("capture thread CPU               %10.0f ns/pkt  (median of the unpaced runs)\n",
                Median(flat_cpu));
  }
  if (cpu_on > 0) {
    std::printf(
        "CPU-time ratio off / on          %10.2f x  (the share of the pair's rate left with the "
        "capture on, on cores of its own)\n",
        cpu_off / cpu_on);
  }
  return 0;
}

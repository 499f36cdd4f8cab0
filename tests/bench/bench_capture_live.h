#pragma once

// fabricscope_bench_capture_live: what its files share (the datagram layout, the clocks, the
// senders and the receiver, the namespaces, a trial and the bench that runs it); the benchmark is
// described in bench_capture_live.cc.

#include <pthread.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <stop_token>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "collectors/pcap/capture.h"
#include "tests/bench/bench_node.h"

namespace fabricscope::bench {

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

// Clocks and /proc readings (bench_capture_live_trial.cc).
int64_t ClockNs(clockid_t clock);
int64_t NowNs();
int64_t ThreadCpuTimeNs();
std::vector<std::string> KsoftirqdStats();

// ---- traffic (bench_capture_live_net.cc) ---------------------------------------------------

// RoCEv2 RC RDMA WRITE Only datagrams on `qps` queue pairs, round robin, each QP with its own
// PSN sequence (mod 2^24), from one connected UDP socket.
class Sender {
 public:
  Sender(int fd, uint32_t payload_bytes, int qps, uint32_t first_qp);

  struct Result {
    uint64_t sent = 0;  // datagrams the kernel accepted
    uint64_t errors = 0;
    double seconds = 0;
    int64_t cpu_ns = 0;  // this thread's CPU time, with the softirq receive path it ran
  };

  // Sends for `seconds` at `pps` datagrams/s (0: as fast as it can).
  Result Run(double pps, double seconds);

 private:
  // Datagram number `seq`: QP first_qp + seq % qps, PSN from 0xFFFF00 (each QP wraps early).
  void Stamp(uint8_t* b, uint64_t seq) const;

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
  void Loop(std::stop_token st);
  int fd_;
  std::atomic<uint64_t> packets_{0};
  std::jthread thread_;  // last: joined before the members it uses go
};

// ---- the namespaces (bench_capture_live_net.cc) -------------------------------------------

struct Setup {
  std::unique_ptr<BenchNetns> tx, rx;
  std::string tx_if, rx_if;
  std::vector<int> tx_fds;  // one per sender thread, each its own UDP source port
  int rx_fd = -1;
};

bool MakeSetup(Setup* s, int senders, std::string* why);

// ---- a trial (bench_capture_live_trial.cc) -------------------------------------------------

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

  absl::StatusOr<Trial> Run(double pps, bool capture);

  static void PrintHeader() {
    std::printf("%-8s %11s %11s %10s %10s %10s %10s %10s %7s %7s %6s %8s %8s  %s\n", "trial",
                "target/s", "sent/s", "sent", "if rx", "socket rx", "cap frames", "analyzed",
                "ps_drop", "ifdrop", "gaps", "cap ns/p", "all ns/p", "result");
  }

 private:
  void Print(const Trial& t);

  Setup* s_;
  std::vector<std::unique_ptr<Sender>> senders_;
  std::vector<std::string> ksoftirqd_ = KsoftirqdStats();
  double seconds_;
  int n_ = 0;
};

}  // namespace fabricscope::bench

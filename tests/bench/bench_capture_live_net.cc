// fabricscope_bench_capture_live: the traffic (the RoCEv2 senders, the receiving thread) and the
// two network namespaces with their veth pair and sockets.

#include <arpa/inet.h>
#include <net/if.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "tests/bench/bench_capture_live.h"

namespace fabricscope::bench {

Sender::Sender(int fd, uint32_t payload_bytes, int qps, uint32_t first_qp)
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

Sender::Result Sender::Run(double pps, double seconds) {
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
    const int n = static_cast<int>(std::min<uint64_t>(static_cast<uint64_t>(want), total - r.sent));
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

void Sender::Stamp(uint8_t* b, uint64_t seq) const {
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

void Receiver::Loop(std::stop_token st) {
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

}  // namespace fabricscope::bench

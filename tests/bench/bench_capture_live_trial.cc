// fabricscope_bench_capture_live: the clocks and /proc readings, and one trial: senders, receiver
// and (or not) the agent's capture, with what each counted, printed as a row.

#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
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
#include "tests/bench/bench_capture_live.h"

namespace fabricscope::bench {

using fabricscope::agent::CaptureRunner;

int64_t ClockNs(clockid_t clock) {
  timespec ts{};
  clock_gettime(clock, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}
int64_t NowNs() { return ClockNs(CLOCK_MONOTONIC); }
int64_t ThreadCpuTimeNs() { return ClockNs(CLOCK_THREAD_CPUTIME_ID); }

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

namespace {

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

}  // namespace

absl::StatusOr<Trial> Bench::Run(double pps, bool capture) {
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

void Bench::Print(const Trial& t) {
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

}  // namespace fabricscope::bench

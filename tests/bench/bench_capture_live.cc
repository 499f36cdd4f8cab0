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
//
// Files: bench_capture_live_net.cc (the traffic and the namespaces), bench_capture_live_trial.cc
// (one trial and what it counted), this file (flags, the sequence of trials and the report).

#include "tests/bench/bench_capture_live.h"

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "collectors/pcap/capture.h"
#include "tests/bench/bench_common.h"

namespace fabricscope::bench {
namespace {

// The command line (see the flags above).
struct Flags {
  double seconds = 2;
  uint32_t payload = 1024;
  int qps = 8, senders = 2, rounds = 3, refine = 3;
};

// False, after the usage on stderr, on a flag it does not know.
bool ParseFlags(int argc, char** argv, Flags* flags) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind("--seconds=", 0) == 0) {
      flags->seconds = std::max(0.1, std::stod(a.substr(10)));
    } else if (a.rfind("--payload=", 0) == 0) {
      flags->payload = static_cast<uint32_t>(std::clamp(std::stoul(a.substr(10)), 0UL, 8000UL));
    } else if (a.rfind("--qps=", 0) == 0) {
      flags->qps = std::clamp(std::stoi(a.substr(6)), 1, 4096);
    } else if (a.rfind("--senders=", 0) == 0) {
      flags->senders = std::clamp(std::stoi(a.substr(10)), 1, 64);
    } else if (a.rfind("--rounds=", 0) == 0) {
      flags->rounds = std::clamp(std::stoi(a.substr(9)), 1, 100);
    } else if (a.rfind("--refine=", 0) == 0) {
      flags->refine = std::clamp(std::stoi(a.substr(9)), 0, 10);
    } else {
      std::fprintf(stderr,
                   "usage: %s [--seconds=S] [--payload=BYTES] [--qps=N] [--senders=N] "
                   "[--rounds=N] [--refine=N]\n",
                   argv[0]);
      return false;
    }
  }
  return true;
}

void PrintLoadavg() {
  std::ifstream la("/proc/loadavg");
  std::string l;
  std::getline(la, l);
  std::printf("loadavg: %s\n", l.c_str());
}

// The namespaces, the traffic and the capture as the agent opens it.
void PrintSetup(const Setup& s, const Flags& flags, uint32_t frame) {
  std::printf(
      "setup: %s (%s %s) -> %s (%s %s), one veth pair; RoCEv2 RC RDMA WRITE Only to UDP %u, "
      "%u-byte payload, %u-byte frames; %d sender threads x %d QPs; %.1f s per trial\n",
      s.tx->name().c_str(), s.tx_if.c_str(), kTxAddr, s.rx->name().c_str(), s.rx_if.c_str(),
      kRxAddr, kRocePort, flags.payload, frame, flags.senders, flags.qps, flags.seconds);
  const fpcap::LiveCaptureOptions defaults;
  std::printf(
      "capture: agent::CaptureRunner on %s as the agent opens it: snaplen 160, filter \"%s\", "
      "%d MiB ring, immediate mode %s (TPACKET_V3), %d ms block timeout; window taken every "
      "%.0f s\n",
      s.rx_if.c_str(), fpcap::kDefaultFilter, defaults.buffer_bytes >> 20,
      defaults.immediate ? "on" : "off", defaults.timeout_ms,
      static_cast<double>(kAgentWindowNs) * 1e-9);
}

// Runs one trial into *t; false, with a message on stderr, when the capture cannot start.
bool RunTrial(Bench* b, const Setup& s, double pps, bool capture, Trial* t) {
  absl::StatusOr<Trial> r = b->Run(pps, capture);
  if (!r.ok()) {
    std::fprintf(stderr, "capture on %s: %s\n", s.rx_if.c_str(),
                 std::string(r.status().message()).c_str());
    return false;
  }
  *t = *r;
  return true;
}

// 1. Unpaced, without and with the capture, alternately (the machine's load drifts).
bool RunUnpaced(Bench* b, const Setup& s, int rounds, std::vector<Trial>* base,
                std::vector<Trial>* flat) {
  Trial t;
  for (int r = 0; r < rounds; ++r) {
    if (!RunTrial(b, s, 0, false, &t)) return false;
    base->push_back(t);
    if (!RunTrial(b, s, 0, true, &t)) return false;
    flat->push_back(t);
  }
  return true;
}

// What the unpaced trials give: the rates, CPU per packet and the capture trials that failed.
struct Unpaced {
  std::vector<double> base_pps, base_socket_pps, flat_pps, flat_cpu, base_all, flat_all;
  double base_max = 0;
  int flat_failed = 0;
};

Unpaced UnpacedFigures(const std::vector<Trial>& base, const std::vector<Trial>& flat) {
  Unpaced u;
  for (const Trial& x : base) {
    u.base_pps.push_back(x.if_pps());
    u.base_socket_pps.push_back(x.socket_pps());
    u.base_max = std::max(u.base_max, x.if_pps());
    u.base_all.push_back(x.cpu_per_packet());
  }
  for (const Trial& x : flat) {
    u.flat_pps.push_back(x.pps());
    if (x.capture_cpu_per_packet() >= 0) u.flat_cpu.push_back(x.capture_cpu_per_packet());
    u.flat_all.push_back(x.cpu_per_packet());
    if (!x.drop_free()) ++u.flat_failed;
  }
  return u;
}

// 2. Paced at fractions of the carried rate, stopping after two failures in a row; then
// bisection between the highest drop-free step and the lowest failing step above it.
bool RunPaced(Bench* b, const Setup& s, double carried, int refine,
              std::vector<std::pair<double, Trial>>* paced) {
  Trial t;
  int fails_in_a_row = 0;
  for (double f : {0.1, 0.25, 0.5, 0.75, 1.0}) {
    if (!RunTrial(b, s, f * carried, true, &t)) return false;
    paced->emplace_back(f, t);
    fails_in_a_row = t.drop_free() ? 0 : fails_in_a_row + 1;
    if (fails_in_a_row == 2) break;
  }
  double lo = 0, hi = 0;
  for (const auto& [f, c] : *paced) {
    if (c.drop_free()) lo = std::max(lo, f);
  }
  for (const auto& [f, c] : *paced) {
    if (!c.drop_free() && f > lo && (hi == 0 || f < hi)) hi = f;
  }
  for (int i = 0; i < refine && hi > lo; ++i) {
    const double mid = (lo + hi) / 2;
    if (!RunTrial(b, s, mid * carried, true, &t)) return false;
    paced->emplace_back(mid, t);
    (t.drop_free() ? lo : hi) = mid;
  }
  return true;
}

// The drop-free capture trial, unpaced or paced, with the highest rate; nullptr if none.
const Trial* BestDropFree(const std::vector<Trial>& flat,
                          const std::vector<std::pair<double, Trial>>& paced) {
  const Trial* best = nullptr;
  for (const Trial& x : flat) {
    if (x.drop_free() && (best == nullptr || x.pps() > best->pps())) best = &x;
  }
  for (const auto& [f, c] : paced) {
    if (c.drop_free() && (best == nullptr || c.pps() > best->pps())) best = &c;
  }
  return best;
}

// The rates: what the pair carries, with the capture on, and the highest drop-free capture rate.
void PrintRates(const Flags& flags, uint32_t frame, double carried, const Unpaced& u,
                const Trial* best) {
  const double bits = 8.0 * frame;
  std::printf(
      "\n=== live capture on a veth pair, %u-byte RoCEv2 frames, %d senders, %.1f s per trial, "
      "%d rounds (bits/s: Ethernet frames)\n",
      frame, flags.senders, flags.seconds, flags.rounds);
  std::printf(
      "veth pair carries, no capture    %10.0f pkt/s  %6.2f Gbit/s  (median interface rx; max "
      "%.0f; receiver socket median %.0f pkt/s)\n",
      carried, carried * bits * 1e-9, u.base_max, Median(u.base_socket_pps));
  std::printf(
      "capture on, senders unpaced      %10.0f pkt/s  %6.2f Gbit/s  (median sent; max %.0f; %d of "
      "%d runs with capture drops or missed packets)\n",
      Median(u.flat_pps), Median(u.flat_pps) * bits * 1e-9,
      *std::max_element(u.flat_pps.begin(), u.flat_pps.end()), u.flat_failed, flags.rounds);
  if (best != nullptr) {
    std::printf(
        "highest drop-free capture rate   %10.0f pkt/s  %6.2f Gbit/s  (%s; every packet "
        "analyzed, ps_drop = ps_ifdrop = 0)\n",
        best->pps(), best->pps() * bits * 1e-9, best->target_pps > 0 ? "paced" : "senders unpaced");
    std::printf(
        "drop-free capture / veth         %10.2f x  (highest drop-free / highest carried, each the "
        "best of its trials)\n",
        best->pps() / u.base_max);
  } else {
    std::printf(
        "highest drop-free capture rate   none: every capture trial dropped or missed packets\n");
  }
  std::printf(
      "capture on / off, unpaced        %10.2f x  (medians of the alternating rounds: what the "
      "capture costs the pair's rate here)\n",
      Median(u.flat_pps) / carried);
}

// CPU time per packet, without and with the capture.
void PrintCpu(const Unpaced& u) {
  // CPU time per packet does not depend on how much of the shared cores the run got.
  const double cpu_off = Median(u.base_all), cpu_on = Median(u.flat_all);
  std::printf(
      "CPU per packet, no capture       %10.0f ns  (median of the unpaced runs: senders with the "
      "softirq receive path they run, receiver, ksoftirqd)\n",
      cpu_off);
  std::printf(
      "CPU per packet, capture on       %10.0f ns  (the same plus the capture thread; the kernel's "
      "copy into the ring is in the senders' softirq time)\n",
      cpu_on);
  if (!u.flat_cpu.empty()) {
    std::printf("capture thread CPU               %10.0f ns/pkt  (median of the unpaced runs)\n",
                Median(u.flat_cpu));
  }
  if (cpu_on > 0) {
    std::printf(
        "CPU-time ratio off / on          %10.2f x  (the share of the pair's rate left with the "
        "capture on, on cores of its own)\n",
        cpu_off / cpu_on);
  }
}

}  // namespace
}  // namespace fabricscope::bench

int main(int argc, char** argv) {
  using namespace fabricscope::bench;
  Flags flags;
  if (!ParseFlags(argc, argv, &flags)) return 2;
  fabricscope::bench::PrintMachine();
  PrintLoadavg();
  if (geteuid() != 0) {
    std::printf(
        "skipped: not root (two network namespaces and a veth pair need "
        "CAP_SYS_ADMIN/CAP_NET_ADMIN, the capture CAP_NET_RAW)\n");
    return 0;
  }
  Setup s;
  std::string why;
  if (!MakeSetup(&s, flags.senders, &why)) {
    std::printf("skipped: cannot set up the namespaces: %s\n", why.c_str());
    return 0;
  }
  const uint32_t frame = kHeaderBytes + kBthBytes + kRethBytes + flags.payload + kIcrcBytes;
  PrintSetup(s, flags, frame);

  Bench b(&s, flags.payload, flags.qps, flags.seconds);
  // Returns from main (the namespaces go with `s`) when the capture cannot start.
  Trial t;
  std::printf("\n");
  Bench::PrintHeader();
  // Warm-up (first-use costs of sockets, pages, the neighbour entry), not reported.
  if (!RunTrial(&b, s, 20'000, false, &t)) return 1;

  std::vector<Trial> base, flat;
  if (!RunUnpaced(&b, s, flags.rounds, &base, &flat)) return 1;
  const Unpaced u = UnpacedFigures(base, flat);
  const double carried = Median(u.base_pps);
  if (carried <= 0) {
    std::printf("the veth pair carried nothing; giving up\n");
    return 1;
  }

  std::vector<std::pair<double, Trial>> paced;  // (fraction of the carried rate, trial)
  if (!RunPaced(&b, s, carried, flags.refine, &paced)) return 1;

  PrintRates(flags, frame, carried, u, BestDropFree(flat, paced));
  PrintCpu(u);
  return 0;
}

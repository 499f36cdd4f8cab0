// Shared by the collective analysis tests: three ports, samples, collectives.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "agent/collective_analysis.h"
#include "agent/flight_recorder.h"
#include "tests/common/units.h"

namespace fabricscope::agent::collective_test {

using collectors::CounterDescriptor;
using collectors::CounterRole;
using collectors::PortDescriptor;

constexpr uint64_t kRate = 1'000'000'000;  // 1 GB/s: 1,000,000 bytes per 1 ms sample at 1.0

// Port 0: eth0 (netdev, rx_dropped error counter); port 1: node-level "tcp" (RetransSegs);
// port 2: eth1 (netdev, no counters).
inline std::vector<PortDescriptor> Ports() {
  PortDescriptor eth0;
  eth0.device = "eth0";
  eth0.line_rate_bytes_per_second = kRate;
  CounterDescriptor drop;
  drop.name = "rx_dropped";
  drop.group = "statistics";
  drop.role = CounterRole::kError;
  drop.meaning = collectors::MeaningOf(drop.group, drop.name).meaning;  // as discovery sets it
  CounterDescriptor pause;
  pause.name = "rx_prio3_pause_duration";
  pause.group = "ethtool";
  pause.role = CounterRole::kOther;
  pause.meaning = collectors::MeaningOf(pause.group, pause.name).meaning;
  eth0.counters = {drop, pause};
  PortDescriptor tcp;
  tcp.device = "tcp";
  tcp.node_level = true;
  CounterDescriptor retrans;
  retrans.name = "RetransSegs";
  retrans.group = "tcp";
  retrans.role = CounterRole::kOther;
  retrans.meaning = collectors::MeaningOf(retrans.group, retrans.name).meaning;
  tcp.counters = {retrans};
  PortDescriptor eth1;
  eth1.device = "eth1";
  eth1.line_rate_bytes_per_second = kRate;
  return {eth0, tcp, eth1};
}

// Fills port `port` with 1 ms samples from from_ms to to_ms at utilization u.
inline void Fill(FlightRecorder& r, size_t port, int from_ms, int to_ms, double u) {
  for (int t = from_ms + 1; t <= to_ms; ++t) {
    FlightSample s;
    s.t_ns = t * kMs;
    s.interval_ns = kMs;
    s.tx_bytes = static_cast<uint64_t>(u * 1e6);
    s.rx_bytes = s.tx_bytes / 2;
    s.tx_utilization = static_cast<float>(u);
    s.rx_utilization = static_cast<float>(u / 2);
    r.Record(port, s);
  }
}

inline v1::Collective Coll(uint64_t seq, int64_t start_ns, int64_t end_ns,
                           uint64_t bytes = 1 << 20) {
  v1::Collective c;
  c.set_comm_hash(0xabc);
  c.set_rank(1);
  c.set_nranks(4);
  c.set_func("AllReduce");
  c.set_seq(seq);
  c.set_bytes(bytes);
  c.set_start_ns(start_ns);
  c.set_end_ns(end_ns);
  c.set_timing_source(v1::TIMING_SOURCE_KERNEL_CHANNEL);
  return c;
}

// Queues c in the analyzer. What it sends at once instead (a collective it cannot analyse, or
// one past max_pending) goes to *sent when given, else nowhere.
inline void AddCollective(CollectiveAnalyzer& a, v1::Collective c, v1::Batch* sent = nullptr) {
  v1::Batch scratch;
  a.AddCollective(std::move(c), sent != nullptr ? sent : &scratch);
}

}  // namespace fabricscope::agent::collective_test

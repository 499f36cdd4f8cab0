// fabricscope_bench_jobs: what naming the job that shared a node costs (issue 36).
//
//   agent       per analysed collective, TransferLedger::AddSharers + Settled (the other
//               communicators on the node) with K busy others of 64 back-to-back 2 ms
//               transfers each (the ledger merges them into 10 ms entries), K = 1, 8, 64, 1,024
//               (collectives.max_kinds), against OwnBytes of the collective's own communicator,
//               measured in the same run.
//   aggregator  /heatmap/links?job=: WeighByJob over a 1,000-link x 1,000-bucket model of 125
//               nodes with 1,024 stored transfers each (each on one of its node's 8 ports),
//               per port and node-wide (rows without ports), against one multiply per cell
//               (the least any per-cell weighting costs), in the same run.
//   qp          a refresh of the ports each process has queue pairs on (agent/qp_ports.h):
//               ParseRdmaResQp + PortsOfProcesses of an `rdma -j res show qp` document of N
//               QPs (8 ranks over 8 rails), against protobuf's JSON parse of the same text
//               alone (the parser it replaced), in the same run; and the refresh's share of one
//               core at the default 5 s period.
// Medians of --repeat runs. Plain binary; no pass/fail.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "agent/qp_ports.h"
#include "agent/transfer_ledger.h"
#include "exporters/analysis/job_share.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"

namespace {

using fabricscope::agent::TransferLedger;
using fabricscope::exporters::HeatmapModel;
using fabricscope::exporters::NodeTransfer;
using Clock = std::chrono::steady_clock;
constexpr int64_t kMs = 1'000'000;

template <typename F>
double MedianNs(int repeat, int per_run, F f) {
  std::vector<double> t;
  for (int i = 0; i < repeat; ++i) {
    const auto a = Clock::now();
    for (int k = 0; k < per_run; ++k) f(k);
    t.push_back(std::chrono::duration<double, std::nano>(Clock::now() - a).count() / per_run);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

fabricscope::v1::Collective Transfer(uint64_t comm, int64_t start, int64_t end, uint64_t bytes) {
  fabricscope::v1::Collective c;
  c.set_comm_hash(comm);
  c.set_start_ns(start);
  c.set_end_ns(end);
  c.set_proxy_bytes(bytes);
  return c;
}

void Agent(int repeat) {
  std::printf("=== naming the other jobs on a node, per analysed collective (agent)\n");
  for (size_t others : {1, 8, 64, 1024}) {
    TransferLedger l(others + 1);
    // Every communicator busy: 64 back-to-back 2 ms transfers each, the last ones overlapping
    // the collectives analysed below.
    for (size_t o = 0; o <= others; ++o) {
      for (int i = 0; i < 64; ++i) {
        l.Remember(Transfer(o + 1, i * 2 * kMs, (i + 1) * 2 * kMs, 1 << 20));
      }
    }
    const auto c = Transfer(1, 100 * kMs, 128 * kMs, 1 << 20);
    volatile uint64_t sink = 0;
    const double own = MedianNs(repeat, 2000, [&](int) { sink = sink + l.OwnBytes(c); });
    const double sharers = MedianNs(repeat, 2000, [&](int) {
      fabricscope::v1::CollectiveAnalysis a;
      l.AddSharers(c, &a);
      sink = sink + static_cast<uint64_t>(a.sharers_size()) + (l.Settled(c) ? 1 : 0);
    });
    std::printf("agent others=%zu own_bytes_ns=%.0f sharers_and_settled_ns=%.0f ratio=%.1fx\n",
                others, own, sharers, sharers / own);
  }
}

void Aggregator(int repeat) {
  std::printf(
      "=== one job's share of 1,000 links x 1,000 buckets (aggregator, /heatmap/links?job=)\n");
  const int nodes = 125, rows_per_node = 8;
  const size_t cols = 1000;
  HeatmapModel m;
  m.start_unix_ns = 0;
  m.bucket_ns = kMs;
  m.cols = cols;
  std::map<std::string, fabricscope::exporters::NodeTransfers> by_node;
  std::mt19937 rng(1);
  std::uniform_int_distribution<int> length_ms(1, 50);
  for (int n = 0; n < nodes; ++n) {
    const std::string node = "node" + std::to_string(n);
    for (int r = 0; r < rows_per_node; ++r) {
      m.rows.push_back(node + "/mlx5_" + std::to_string(r) + ":1 tx");
      m.row_nodes.push_back(node);
      m.row_ports.push_back("mlx5_" + std::to_string(r) + ":1");
    }
    std::vector<NodeTransfer>& t = by_node[node].transfers;
    for (int i = 0; i < 1024; ++i) {  // two communicators, the job's and another's
      const int64_t start = static_cast<int64_t>(i) * kMs;
      t.push_back({static_cast<uint64_t>(i % 2),
                   start,
                   start + length_ms(rng) * kMs,
                   1 << 20,
                   {"mlx5_" + std::to_string((i / 2) % rows_per_node) + ":1"}});
    }
  }
  m.values.assign(m.rows.size() * cols, 0.5f);
  volatile float sink = 0;
  const double plain = MedianNs(repeat, 1, [&](int) {
    HeatmapModel copy = m;
    for (float& v : copy.values) v *= 0.5f;
    sink = sink + copy.values.back();
  });
  const double weigh = MedianNs(repeat, 1, [&](int) {
    HeatmapModel copy = m;
    fabricscope::exporters::WeighByJob(&copy, by_node, {0});
    sink = sink + copy.values.back();
  });
  const double node_wide = MedianNs(repeat, 1, [&](int) {
    HeatmapModel copy = m;
    copy.row_ports.clear();
    fabricscope::exporters::WeighByJob(&copy, by_node, {0});
    sink = sink + copy.values.back();
  });
  std::printf(
      "aggregator cells=%zu plain_multiply_ms=%.2f weigh_by_job_per_port_ms=%.2f ratio=%.1fx "
      "node_wide_ms=%.2f ratio=%.1fx\n",
      m.values.size(), plain / 1e6, weigh / 1e6, weigh / plain, node_wide / 1e6, node_wide / plain);
}

void QueuePairs(int repeat) {
  std::printf("=== the ports of each process's queue pairs, per refresh (agent)\n");
  std::vector<fabricscope::collectors::PortDescriptor> ports;
  for (int r = 0; r < 8; ++r) {
    fabricscope::collectors::PortDescriptor p;
    p.device = "mlx5_" + std::to_string(r);
    p.port = 1;
    p.rdma = true;
    ports.push_back(p);
  }
  for (int qps : {2048, 32768}) {
    std::string json = "[";
    for (int i = 0; i < qps; ++i) {
      const int rank = i % 8;
      json += (i ? "," : "");
      json += "{\"ifindex\":" + std::to_string(rank) + ",\"ifname\":\"mlx5_" +
              std::to_string(rank) + "\",\"port\":1,\"lqpn\":" + std::to_string(1000 + i) +
              ",\"rqpn\":" + std::to_string(9000 + i) +
              ",\"type\":\"RC\",\"state\":\"RTS\",\"rq-psn\":12,\"sq-psn\":34,"
              "\"path-mig-state\":\"MIGRATED\",\"pdn\":3,\"pid\":" +
              std::to_string(4000 + rank) + ",\"comm\":\"python3\"}";
    }
    json += "]";
    volatile size_t sink = 0;
    const double plain = MedianNs(repeat, 1, [&](int) {
      google::protobuf::ListValue l;
      (void)google::protobuf::util::JsonStringToMessage(json, &l);
      sink = sink + static_cast<size_t>(l.values_size());
    });
    const double ours = MedianNs(repeat, 1, [&](int) {
      auto list = fabricscope::agent::ParseRdmaResQp(json);
      size_t unmatched = 0;
      sink = sink + fabricscope::agent::PortsOfProcesses(list->qps, ports, &unmatched).size();
    });
    std::printf(
        "qp qps=%d bytes=%zu protobuf_parse_ms=%.2f refresh_ms=%.2f ratio=%.2fx "
        "core_share_at_5s=%.5f\n",
        qps, json.size(), plain / 1e6, ours / 1e6, ours / plain, ours / 5e9);
  }
}

}  // namespace

int main(int argc, char** argv) {
  int repeat = 5;
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--repeat=", 9) == 0) repeat = std::max(1, std::atoi(argv[i] + 9));
  }
  Agent(repeat);
  Aggregator(repeat);
  QueuePairs(repeat);
  return 0;
}

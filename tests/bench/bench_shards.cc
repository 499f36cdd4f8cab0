// fabricscope_bench_shards: sharded aggregators (issue 18) at 100,000 GPUs: 12,500 simulated
// nodes of 8 ranks stream to 4 aggregators in this process (node k to aggregator k % 4), each
// with the same peer list, forwarding over loopback gRPC (exporters/shard/forwarder.h).
//
// Communicators: groups of 8 consecutive nodes (the last one smaller when the count is not a
// multiple of 8); rank r of the nodes of group g share communicator (g, r), so every communicator
// spans all 4 aggregators and 3 of each instance's 8 rank reports reach its owner only by
// forwarding (6 of 8 on average: the owner holds 2 of the 8 nodes). Each node sends one batch per
// window with --collectives records (round-robin over its 8 ranks), each with its
// CollectiveAnalysis, as bench_cluster's nodes do.
//
//   baseline: one aggregator, not sharded, fed the same batches: every instance matched there.
//   sharded:  the 4 aggregators; a window counts as done when every instance is matched on its
//             owner (the sum of CrossRankAnalysis::instances_total()).
// Printed: instances matched per second (wall, feed to last match), the CPU time of this
// process per rank report in each mode and its ratio (forwarding cost: serialization, the
// loopback stream, the owner's parse and matching, over local ingest alone), records
// forwarded, and memory per aggregator (CrossRankAnalysis::memory_bytes(), and the process's
// heap growth over 4).
// Flags: --nodes=N (12500), --collectives=N (10 per node per window), --windows=N (5; the
// first, which allocates every node's state, is not measured).

#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "exporters/ingest/telemetry_service.h"
#include "exporters/shard/forwarder.h"
#include "exporters/shard/peer_ring.h"
#include "exporters/state/cluster_state.h"
#include "tests/bench/bench_common.h"
#include "tests/common/units.h"

namespace fabricscope::bench {
namespace {

constexpr int kRanks = 8;
constexpr int kShards = 4;

size_t g_nodes = 12'500;
int g_collectives = 10;
int g_windows = 5;

using Clock = std::chrono::steady_clock;

double CpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

uint64_t CommHash(size_t group, int rank) {
  return (static_cast<uint64_t>(group + 1) * 0x9E3779B97F4A7C15ull) ^
         (static_cast<uint64_t>(rank + 1) * 0xC2B2AE3D27D4EB4Full);
}

// Nodes in group `group`: 8, fewer in the last when the node count is not a multiple of 8.
size_t GroupSize(size_t group) { return std::min<size_t>(kRanks, g_nodes - group * kRanks); }

v1::Hello HelloOf(size_t node) {
  v1::Hello h;
  h.set_node(absl::StrCat("node", node));
  h.set_instance_id(1);
  for (int p = 0; p < kRanks; ++p) {
    v1::PortInfo* port = h.add_ports();
    port->set_device(absl::StrCat("mlx5_", p));
    port->set_port(1);
    port->set_rdma(true);
  }
  return h;
}

// Node `node`'s batch of window `w`: collective i on rank i % 8, sequence number
// w * ceil(collectives / 8) + i / 8 of its communicator.
v1::Batch BatchOf(size_t node, int w) {
  v1::Batch b;
  b.set_seq(static_cast<uint64_t>(w) + 1);
  b.set_early(true);
  b.set_unix_offset_ns(1'764'000'000'000'000'000);
  const size_t group = node / kRanks;
  const int per_rank = (g_collectives + kRanks - 1) / kRanks;
  for (int i = 0; i < g_collectives; ++i) {
    const int rank = i % kRanks;
    const uint64_t seq = static_cast<uint64_t>(w * per_rank + i / kRanks + 1);
    v1::Collective* c = b.add_collectives();
    c->set_comm_hash(CommHash(group, rank));
    c->set_rank(static_cast<int32_t>(node % kRanks));
    c->set_nranks(static_cast<int32_t>(GroupSize(group)));
    c->set_func("AllReduce");
    c->set_seq(seq);
    c->set_bytes(64 << 20);
    const int64_t start = static_cast<int64_t>(seq) * 50 * kMs + static_cast<int64_t>(node % 5);
    c->set_start_ns(start);
    c->set_end_ns(start + 20 * kMs);
    v1::CollectiveAnalysis* a = c->mutable_analysis();
    a->set_cause(v1::COLLECTIVE_CAUSE_NORMAL);
    a->set_port_index(static_cast<int32_t>(rank));
    a->set_detail("mlx5:1");
    v1::PortActivity* p = a->add_ports();
    p->set_port_index(static_cast<uint32_t>(rank));
    p->set_samples(20);
  }
  return b;
}

struct Shard {
  std::unique_ptr<exporters::ClusterState> state;
  std::unique_ptr<exporters::TelemetryServer> server;
  std::shared_ptr<exporters::Forwarder> forwarder;
  int port = 0;
};

struct Result {
  double wall = 0, cpu = 0;
  uint64_t instances = 0, reports = 0;  // in the measured windows
  uint64_t all_reports = 0;             // in every window, the warm-up included
};

// Feeds every window to `shards` (node k to shard k % size) and waits until `expected`
// instances per window are matched over them.
Result Run(std::vector<Shard>& shards, uint64_t expected_per_window) {
  Result r;
  for (size_t n = 0; n < g_nodes; ++n) {
    if (!shards[n % shards.size()].state->OnHello(HelloOf(n)).ok()) std::abort();
  }
  std::mt19937 rng(1);
  std::vector<size_t> order(g_nodes);
  for (size_t n = 0; n < g_nodes; ++n) order[n] = n;
  for (int w = 0; w < g_windows; ++w) {
    std::vector<v1::Batch> batches(g_nodes);
    for (size_t n = 0; n < g_nodes; ++n) batches[n] = BatchOf(n, w);
    std::shuffle(order.begin(), order.end(), rng);
    const auto t0 = Clock::now();
    const double c0 = CpuSeconds();
    for (size_t n : order) {
      auto ack = shards[n % shards.size()].state->OnBatch(absl::StrCat("node", n), 1, batches[n]);
      if (!ack.ok()) std::abort();
    }
    const uint64_t want = expected_per_window * static_cast<uint64_t>(w + 1);
    for (;;) {
      uint64_t got = 0;
      for (Shard& s : shards) got += s.state->cross_rank().instances_total();
      if (got >= want) break;
      if (Clock::now() - t0 > std::chrono::seconds(120)) {
        std::fprintf(stderr, "window %d: %lu of %lu instances after 120 s\n", w,
                     static_cast<unsigned long>(got), static_cast<unsigned long>(want));
        std::exit(1);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    r.all_reports += g_nodes * static_cast<uint64_t>(g_collectives);
    if (w == 0) continue;  // the first window allocates every node's state: a warm-up
    r.wall += std::chrono::duration<double>(Clock::now() - t0).count();
    r.cpu += CpuSeconds() - c0;
    r.instances += expected_per_window;
    r.reports += g_nodes * static_cast<uint64_t>(g_collectives);
  }
  return r;
}

std::vector<Shard> MakeShards(int n) {
  std::vector<Shard> shards(static_cast<size_t>(n));
  std::vector<exporters::Peer> peers;
  for (Shard& s : shards) {
    s.state = std::make_unique<exporters::ClusterState>();
    s.server = std::make_unique<exporters::TelemetryServer>(*s.state);
    auto port = s.server->Start("127.0.0.1:0");
    if (!port.ok()) std::abort();
    s.port = *port;
    peers.push_back({absl::StrCat("127.0.0.1:", s.port), "127.0.0.1:1"});
  }
  if (n == 1) return shards;
  for (int i = 0; i < n; ++i) {
    Shard& s = shards[static_cast<size_t>(i)];
    auto ring = std::make_shared<const exporters::PeerRing>(peers, static_cast<size_t>(i));
    exporters::ClusterState* state = s.state.get();
    s.forwarder = std::make_shared<exporters::Forwarder>(
        exporters::ForwarderOptions{.self = peers[static_cast<size_t>(i)].grpc,
                                    .match_here = [state](std::vector<v1::ForwardedAnalysis>&& r) {
                                      state->MatchForwarded(std::move(r));
                                    }});
    s.forwarder->SetRing(ring);
    s.state->SetSharding(ring, s.forwarder);
  }
  return shards;
}

void StopShards(std::vector<Shard>& shards) {
  for (Shard& s : shards) {
    s.state->SetSharding(nullptr, nullptr);
    if (s.forwarder) s.forwarder->Stop(1000);
  }
  for (Shard& s : shards) s.server->Stop(0);
  shards.clear();
}

int Main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--nodes=", 8) == 0) g_nodes = std::strtoul(argv[i] + 8, nullptr, 10);
    if (std::strncmp(argv[i], "--collectives=", 14) == 0) g_collectives = std::atoi(argv[i] + 14);
    if (std::strncmp(argv[i], "--windows=", 10) == 0) g_windows = std::atoi(argv[i] + 10);
  }
  if (g_nodes == 0 || g_collectives <= 0 || g_windows <= 1) {
    std::fprintf(stderr, "usage: %s [--nodes=N>0] [--collectives=N>0] [--windows=N>1]\n", argv[0]);
    return 2;
  }
  const uint64_t per_window =
      ((g_nodes + kRanks - 1) / kRanks) * static_cast<uint64_t>(g_collectives);
  std::printf(
      "shards: nodes=%zu gpus=%zu aggregators=%d collectives_per_node_window=%d "
      "windows=%d instances_per_window=%lu cpu=%s\n",
      g_nodes, g_nodes * kRanks, kShards, g_collectives, g_windows,
      static_cast<unsigned long>(per_window), CpuModel().c_str());
  const size_t heap0 = HeapInUse();
  std::vector<Shard> one = MakeShards(1);
  const Result base = Run(one, per_window);
  const size_t heap_one = HeapInUse() - std::min(HeapInUse(), heap0);
  StopShards(one);
  const size_t heap1 = HeapInUse();
  std::vector<Shard> four = MakeShards(kShards);
  const Result sharded = Run(four, per_window);
  const size_t heap2 = HeapInUse();
  uint64_t forwarded = 0, matched_memory = 0;
  for (Shard& s : four) {
    for (const auto& p : s.forwarder->Stats()) forwarded += p.forwarded + p.queued;
    matched_memory += s.state->cross_rank().memory_bytes();
  }
  const double base_us = base.cpu / static_cast<double>(base.reports) * 1e6;
  const double shard_us = sharded.cpu / static_cast<double>(sharded.reports) * 1e6;
  const double fwd_share =
      static_cast<double>(forwarded) / static_cast<double>(sharded.all_reports);
  std::printf("baseline (1 aggregator): %.0f instances/s, %.2f us CPU per rank report\n",
              static_cast<double>(base.instances) / base.wall, base_us);
  std::printf(
      "sharded (%d aggregators): %.0f instances/s, %.2f us CPU per rank report, "
      "%.1f%% of reports forwarded\n",
      kShards, static_cast<double>(sharded.instances) / sharded.wall, shard_us, 100 * fwd_share);
  std::printf("forwarding cost per forwarded record over local ingest per record: %.2fx\n",
              (shard_us - base_us) / fwd_share / base_us);
  std::printf(
      "memory per aggregator: heap %.0f MiB (process heap growth / %d; one aggregator "
      "alone: %.0f MiB), cross-rank state %.1f MiB\n",
      static_cast<double>(heap2 > heap1 ? heap2 - heap1 : 0) / kShards / (1 << 20), kShards,
      static_cast<double>(heap_one) / (1 << 20),
      static_cast<double>(matched_memory) / kShards / (1 << 20));
  std::printf(
      "shards_summary: instances_per_s=%.0f cpu_ratio_sharded_over_one=%.2f "
      "forward_cost_ratio=%.2f\n",
      static_cast<double>(sharded.instances) / sharded.wall, shard_us / base_us,
      (shard_us - base_us) / fwd_share / base_us);
  StopShards(four);
  return 0;
}

}  // namespace
}  // namespace fabricscope::bench

int main(int argc, char** argv) { return fabricscope::bench::Main(argc, argv); }

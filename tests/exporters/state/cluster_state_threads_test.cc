// ClusterState::OnBatch from several threads at once (issue 17: ingest ordered per node by a
// stripe, the cluster, GPU and link state each behind a short lock, the cross-rank matcher split
// into communicator and node shards). An aggregator's gRPC threads each serve some agents'
// streams and run OnBatch as batches arrive, in whatever order the agents' windows close: here
// each node is served by one of four threads (seeded), a thread takes its nodes' batches window
// by window in a seeded shuffle, and the threads run free of each other (no barrier), so every
// seed interleaves the ranks of an instance differently across threads. Whatever the order,
// every instance must be matched once with all its ranks, none evicted or left pending, every
// batch counted once, and the straggler named on every instance it held back.

#include <algorithm>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "exporters/exposition/cluster_render.h"
#include "exporters/exposition/cross_rank_render.h"
#include "exporters/state/cluster_state.h"
#include "gtest/gtest.h"
#include "tests/common/units.h"

namespace fabricscope::exporters {
namespace {

constexpr int kNodes = 32;
constexpr int kGroupNodes = 8;  // a communicator: rank r on node 8g + r of group g
constexpr int kRails = 4;       // communicators per group (one per rail)
constexpr int kWindows = 6;
constexpr int kPerRail = 5;  // instances per communicator per window
constexpr int kThreads = 4;
constexpr int kStraggler = 13;  // its ranks start 5 ms after the others on every instance
constexpr int64_t kUnixOffsetNs = 1'700'000'000'000'000'000;

std::string NodeName(int node) { return absl::StrFormat("n%02d", node); }

uint64_t CommHash(int group, int rail) {
  return 0x5eed000000000000ull + static_cast<uint64_t>(group) * 0x1000 +
         static_cast<uint64_t>(rail);
}

v1::Hello NodeHello(int node) {
  v1::Hello h;
  h.set_node(NodeName(node));
  h.set_instance_id(static_cast<uint64_t>(node) + 1);
  h.set_resume_seq(1);
  h.set_agent_version("test");
  for (int r = 0; r < kRails; ++r) {
    v1::PortInfo* p = h.add_ports();
    p->set_device(absl::StrCat("mlx5_", r));
    p->set_port(1);
    p->set_rdma(true);
    p->set_line_rate_bytes_per_second(50'000'000'000);
  }
  return h;
}

// Node `node`'s batch of window `w`: one PortWindow per rail and, per rail, kPerRail collectives
// with their analyses (Collective.analysis, as agent/collective_analysis.cc sends them). The
// ranks of an instance end together (an all-reduce completes when its last rank arrives); the
// straggler starts 5 ms late, so it is the latest arrival and its collective is the shortest.
v1::Batch NodeBatch(int node, int w) {
  v1::Batch b;
  b.set_seq(static_cast<uint64_t>(w) + 1);
  b.set_unix_offset_ns(kUnixOffsetNs);
  b.set_window_start_ns(w * 1000 * kMs);
  b.set_window_end_ns((w + 1) * 1000 * kMs);
  for (int r = 0; r < kRails; ++r) {
    v1::PortWindow* pw = b.add_ports();
    pw->set_port_index(static_cast<uint32_t>(r));
    pw->mutable_transmit()->set_bytes(1000);
    pw->mutable_receive()->set_bytes(1000);
  }
  for (int r = 0; r < kRails; ++r) {
    for (int k = 0; k < kPerRail; ++k) {
      v1::Collective* c = b.add_collectives();
      c->set_comm_hash(CommHash(node / kGroupNodes, r));
      c->set_rank(node % kGroupNodes);
      c->set_nranks(kGroupNodes);
      c->set_func("AllReduce");
      c->set_seq(static_cast<uint64_t>(w * kPerRail + k));
      const int64_t t = w * 1000 * kMs + (r * kPerRail + k) * 40 * kMs;
      c->set_start_ns(t + (node == kStraggler ? 5 * kMs : 0));
      c->set_end_ns(t + 15 * kMs);
      c->set_bytes(64 << 20);
      v1::CollectiveAnalysis* a = c->mutable_analysis();
      a->set_cause(v1::COLLECTIVE_CAUSE_NORMAL);
      a->set_port_index(r);
      a->set_detail(absl::StrCat("rank ", node % kGroupNodes));
      v1::PortActivity* p = a->add_ports();
      p->set_port_index(static_cast<uint32_t>(r));
      p->set_samples(10);
    }
  }
  return b;
}

double Sample(const std::vector<prometheus::MetricFamily>& families, const std::string& name,
              const std::string& label, const std::string& value) {
  for (const prometheus::MetricFamily& f : families) {
    if (f.name != name) continue;
    for (const prometheus::ClientMetric& m : f.metric) {
      for (const prometheus::ClientMetric::Label& l : m.label) {
        if (l.name == label && l.value == value) {
          return f.type == prometheus::MetricType::Counter ? m.counter.value : m.gauge.value;
        }
      }
      if (label.empty()) {
        return f.type == prometheus::MetricType::Counter ? m.counter.value : m.gauge.value;
      }
    }
  }
  return -1;
}

size_t Count(const std::string& text, const std::string& needle) {
  size_t n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

TEST(ClusterStateThreads, EveryInstanceMatchedOnceWhateverTheInterleaving) {
  for (uint32_t seed = 1; seed <= 4; ++seed) {
    SCOPED_TRACE(absl::StrCat("seed ", seed));
    ClusterState state;
    for (int n = 0; n < kNodes; ++n) ASSERT_TRUE(state.OnHello(NodeHello(n)).ok());
    // Each node on one thread; each thread's work window by window, shuffled within a window.
    std::mt19937 rng(seed);
    std::vector<std::vector<std::pair<int, int>>> work(kThreads);  // (node, window)
    std::vector<int> thread_of(kNodes);
    for (int n = 0; n < kNodes; ++n) thread_of[n] = static_cast<int>(rng() % kThreads);
    for (int w = 0; w < kWindows; ++w) {
      for (int t = 0; t < kThreads; ++t) {
        std::vector<std::pair<int, int>> batch;
        for (int n = 0; n < kNodes; ++n) {
          if (thread_of[n] == t) batch.emplace_back(n, w);
        }
        std::shuffle(batch.begin(), batch.end(), rng);
        work[t].insert(work[t].end(), batch.begin(), batch.end());
      }
    }
    std::vector<std::thread> threads;
    std::vector<int> failures(kThreads, 0);
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        for (const auto& [node, w] : work[t]) {
          const auto acked =
              state.OnBatch(NodeName(node), static_cast<uint64_t>(node) + 1, NodeBatch(node, w));
          if (!acked.ok() || *acked != static_cast<uint64_t>(w) + 1) ++failures[t];
        }
      });
    }
    for (std::thread& th : threads) th.join();
    for (int t = 0; t < kThreads; ++t) EXPECT_EQ(failures[t], 0) << "thread " << t;

    const uint64_t instances = kNodes / kGroupNodes * kRails * kWindows * kPerRail;
    EXPECT_EQ(state.cross_rank().instances_total(), instances);
    EXPECT_EQ(state.cross_rank().pending(), 0u);
    EXPECT_EQ(state.cross_rank().evicted_total(), 0u);
    const std::vector<prometheus::MetricFamily> f = ClusterFamilies(state);
    EXPECT_EQ(Sample(f, "fabricscope_aggregator_batches_total", "", ""), kNodes * kWindows);
    EXPECT_EQ(Sample(f, "fabricscope_aggregator_lost_batches_total", "", ""), 0);
    // The straggler's group: every instance past seq 0 is held back by it (seq 0 is the
    // start-up skew; the persistent test may name it too once it has the history). Every
    // other instance is normal, and no instance names another bottleneck.
    const double straggler =
        Sample(f, "fabricscope_collectives_by_cause_total", "cause", "compute_straggler");
    const double normal = Sample(f, "fabricscope_collectives_by_cause_total", "cause", "normal");
    EXPECT_GE(straggler, kRails * (kWindows * kPerRail - 1));
    EXPECT_LE(straggler, kRails * kWindows * kPerRail);
    EXPECT_EQ(straggler + normal, static_cast<double>(instances));
    const std::string slow = SlowJson(state.cross_rank().Slowest(0));
    EXPECT_EQ(Count(slow, "\"bottleneck\":{"), static_cast<size_t>(straggler));
    EXPECT_EQ(Count(slow, absl::StrCat("\"bottleneck\":{\"node\":\"", NodeName(kStraggler), "\"")),
              static_cast<size_t>(straggler));
    EXPECT_EQ(Count(slow, "\"seq\":"), instances);
    EXPECT_GT(Sample(f, "fabricscope_straggler_score", "node", NodeName(kStraggler)), 0);
    EXPECT_EQ(Sample(f, "fabricscope_straggler_score", "node", NodeName(kStraggler + 1)), 0);
  }
}

}  // namespace
}  // namespace fabricscope::exporters

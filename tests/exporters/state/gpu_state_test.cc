// GpuState's metrics: collectives merged over nodes, timing sources, bounded labels and rank
// pairs, and the rank traffic imbalance. (The JSON of recent records: gpu_state_json_test.cc.)

#include "exporters/state/gpu_state.h"

#include <cmath>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "exporters/exposition/gpu_render.h"
#include "gtest/gtest.h"
#include "tests/common/metric_family.h"

namespace fabricscope::exporters {
namespace {

using testing::FindFamily;

std::map<std::string, std::string> Labels(const prometheus::ClientMetric& m) {
  std::map<std::string, std::string> out;
  for (const auto& l : m.label) out[l.name] = l.value;
  return out;
}

v1::CollectiveTotals Totals(uint64_t comm, const std::string& func, uint64_t count,
                            double window_busbw, double window_seconds) {
  v1::CollectiveTotals t;
  t.set_comm_hash(comm);
  t.set_func(func);
  t.set_count(count);
  t.set_bus_bytes_total(count * 100);
  v1::Histogram* h = t.mutable_duration_seconds();
  h->add_upper_bounds(1e-3);
  h->add_upper_bounds(1.0);
  h->add_bucket_counts(count);
  h->add_bucket_counts(0);
  h->add_bucket_counts(0);
  h->set_count(count);
  h->set_sum(static_cast<double>(count) * 1e-4);
  t.set_window_count(window_seconds > 0 ? 1 : 0);
  t.set_window_busbw_bytes_per_second(window_busbw);
  t.set_window_seconds(window_seconds);
  return t;
}

TEST(GpuState, MergesNodesAndWeightsBusBandwidthByTime) {
  GpuState s;
  v1::Batch a;
  *a.mutable_gpu()->add_collective_totals() = Totals(0xaabbccdd11223344, "AllReduce", 10, 4e9, 1.0);
  v1::Batch b;
  *b.mutable_gpu()->add_collective_totals() = Totals(0xaabbccdd11223344, "AllReduce", 30, 8e9, 3.0);
  s.OnBatch("n1", a);
  s.OnBatch("n2", b);
  std::vector<prometheus::MetricFamily> fs;
  AddGpuFamilies(s.Snapshot(), &fs);
  const auto* total = FindFamily(fs, "fabricscope_collectives_total");
  ASSERT_NE(total, nullptr);
  ASSERT_EQ(total->metric.size(), 1u);
  EXPECT_EQ(total->metric[0].counter.value, 40);
  const auto* dur = FindFamily(fs, "fabricscope_collective_duration_seconds");
  ASSERT_NE(dur, nullptr);
  ASSERT_EQ(dur->metric.size(), 1u);
  EXPECT_EQ(Labels(dur->metric[0]).at("comm"), "aabbccdd");
  EXPECT_EQ(dur->metric[0].histogram.sample_count, 40u);
  EXPECT_EQ(dur->metric[0].histogram.bucket[0].cumulative_count, 40u);
  // (4e9 x 1 s + 8e9 x 3 s) / 4 s = 7e9.
  const auto* bw = FindFamily(fs, "fabricscope_collective_bus_bandwidth_bytes_per_second");
  ASSERT_NE(bw, nullptr);
  EXPECT_DOUBLE_EQ(bw->metric[0].gauge.value, 7e9);

  // A later window without collectives keeps the last busBw of that node.
  v1::Batch quiet;
  *quiet.mutable_gpu()->add_collective_totals() = Totals(0xaabbccdd11223344, "AllReduce", 30, 0, 0);
  s.OnBatch("n2", quiet);
  fs.clear();
  AddGpuFamilies(s.Snapshot(), &fs);
  EXPECT_DOUBLE_EQ(FindFamily(fs, "fabricscope_collective_bus_bandwidth_bytes_per_second")
                       ->metric[0]
                       .gauge.value,
                   7e9);
  // A communicator the agent no longer reports is forgotten, its busBw with it: what a node
  // holds is bounded by one window's communicators (limits: max_communicators_per_node).
  v1::Batch moved_on;
  *moved_on.mutable_gpu()->add_collective_totals() =
      Totals(0x5566778811223344, "AllReduce", 1, 0, 0);
  s.OnBatch("n1", moved_on);
  fs.clear();
  AddGpuFamilies(s.Snapshot(), &fs);
  for (const auto& m :
       FindFamily(fs, "fabricscope_collective_bus_bandwidth_bytes_per_second")->metric) {
    if (Labels(m).at("comm") == "aabbccdd") {
      EXPECT_DOUBLE_EQ(m.gauge.value, 8e9);  // n2's alone
    }
    EXPECT_NE(Labels(m).at("comm"), "55667788");  // no window with a duration yet
  }
  s.OnBatch("n1", a);
  // A new agent instance restarts its node's totals.
  s.ResetNode("n2");
  fs.clear();
  AddGpuFamilies(s.Snapshot(), &fs);
  EXPECT_EQ(FindFamily(fs, "fabricscope_collectives_total")->metric[0].counter.value, 10);
}

// The share of collectives without a completion signal, summed over nodes per (func, source).
TEST(GpuState, CountsCollectivesByTimingSource) {
  GpuState s;
  v1::Batch a;
  v1::CollectiveTotals* t = a.mutable_gpu()->add_collective_totals();
  *t = Totals(0x11, "AllReduce", 10, 0, 0);
  for (uint64_t n : {0, 2, 7, 1, 0}) t->add_count_by_timing_source(n);  // enqueue, kernel, proxy
  v1::Batch b;
  t = b.mutable_gpu()->add_collective_totals();
  *t = Totals(0x22, "AllReduce", 5, 0, 0);
  for (uint64_t n : {0, 0, 4, 0, 1}) t->add_count_by_timing_source(n);  // kernel, copy engine
  s.OnBatch("n1", a);
  s.OnBatch("n2", b);
  std::vector<prometheus::MetricFamily> fs;
  AddGpuFamilies(s.Snapshot(), &fs);
  const auto* f = FindFamily(fs, "fabricscope_collective_timing_source_total");
  ASSERT_NE(f, nullptr);
  std::map<std::string, double> got;
  for (const auto& m : f->metric) {
    EXPECT_EQ(Labels(m).at("func"), "AllReduce");
    got[Labels(m).at("timing_source")] = m.counter.value;
  }
  EXPECT_EQ(got,
            (std::map<std::string, double>{
                {"enqueue_only", 2}, {"kernel_channel", 11}, {"proxy_op", 1}, {"copy_engine", 1}}));
}

TEST(GpuState, BoundsCommLabelsAndRankPairs) {
  GpuState::Options o;
  o.max_comm_labels = 2;
  o.rank_pair_top_k = 3;
  GpuState s(o);
  v1::Batch b;
  for (uint64_t c = 1; c <= 4; ++c) {
    *b.mutable_gpu()->add_collective_totals() = Totals(c << 32, "AllGather", c * 10, 0, 0);
  }
  for (int r = 0; r < 6; ++r) {
    v1::RankPairBytes* p = b.mutable_gpu()->add_rank_pairs();
    p->set_comm_hash(0x0102030405060708);
    p->set_src_rank(r);
    p->set_dst_rank((r + 1) % 6);
    p->set_bytes_total(static_cast<uint64_t>(r + 1) * 1000);
  }
  s.OnBatch("n", b);
  std::vector<prometheus::MetricFamily> fs;
  AddGpuFamilies(s.Snapshot(), &fs);
  std::map<std::string, uint64_t> by_comm;
  for (const auto& m : FindFamily(fs, "fabricscope_collective_duration_seconds")->metric) {
    by_comm[Labels(m).at("comm")] = m.histogram.sample_count;
  }
  // The two busiest communicators (40 and 30 collectives) keep their label; 20 + 10 fold.
  ASSERT_EQ(by_comm.size(), 3u);
  EXPECT_EQ(by_comm.at("00000004"), 40u);
  EXPECT_EQ(by_comm.at("00000003"), 30u);
  EXPECT_EQ(by_comm.at("other"), 30u);
  const auto* pairs = FindFamily(fs, "fabricscope_rank_pair_bytes_total");
  ASSERT_NE(pairs, nullptr);
  ASSERT_EQ(pairs->metric.size(), 3u);
  double sum = 0;
  for (const auto& m : pairs->metric) {
    EXPECT_EQ(Labels(m).at("comm"), "01020304");
    EXPECT_GE(std::stoi(Labels(m).at("src_rank")), 3);
    sum += m.counter.value;
  }
  EXPECT_EQ(sum, 4000 + 5000 + 6000);
}

// A batch of one node with cumulative rank_pairs {comm, src, dst, bytes_total}.
v1::Batch RankPairs(const std::vector<std::tuple<uint64_t, int32_t, int32_t, uint64_t>>& pairs) {
  v1::Batch b;
  b.mutable_gpu();
  for (const auto& [comm, src, dst, total] : pairs) {
    v1::RankPairBytes* p = b.mutable_gpu()->add_rank_pairs();
    p->set_comm_hash(comm);
    p->set_src_rank(src);
    p->set_dst_rank(dst);
    p->set_bytes_total(total);
  }
  return b;
}

// fabricscope_traffic_imbalance_ratio{scope="ranks"} by "comm/direction".
std::map<std::string, double> RankImbalance(const GpuState& s) {
  std::vector<prometheus::MetricFamily> fs;
  AddGpuFamilies(s.Snapshot(), &fs);
  std::map<std::string, double> out;
  const auto* f = FindFamily(fs, "fabricscope_traffic_imbalance_ratio");
  if (f == nullptr) return out;
  for (const auto& m : f->metric) {
    auto l = Labels(m);
    EXPECT_EQ(l.at("scope"), "ranks");
    EXPECT_EQ(l.size(), 3u);
    out[l.at("comm") + "/" + l.at("direction")] = m.gauge.value;
  }
  return out;
}

constexpr uint64_t kGpuComm = 0xc0ffee0012345678;

// A 4-rank ring over two nodes (ranks 0, 1 on n1; 2, 3 on n2): rank r sends to r + 1 mod 4,
// with the cumulative totals `t[r]`.
void Ring(GpuState& s, const std::vector<uint64_t>& t) {
  s.OnBatch("n1", RankPairs({{kGpuComm, 0, 1, t[0]}, {kGpuComm, 1, 2, t[1]}}));
  s.OnBatch("n2", RankPairs({{kGpuComm, 2, 3, t[2]}, {kGpuComm, 3, 0, t[3]}}));
}

TEST(GpuState, RankImbalanceIsTheCoefficientOfVariationOfRecentRankBytes) {
  GpuState::Options o;
  o.imbalance_windows = 2;
  GpuState s(o);
  // The first batches are the baseline only: rank 2's huge history must not count.
  Ring(s, {1000, 1000, 1'000'000'000'000, 1000});
  EXPECT_TRUE(RankImbalance(s).empty());
  // Rank 0 sends 3x the others: bytes {3b, b, b, b}, mean 1.5b, population variance
  // ((1.5b)^2 + 3 (0.5b)^2) / 4 = 0.75 b^2. Rank 1 receives rank 0's, so receive is the same.
  const uint64_t b = 1000;
  Ring(s, {1000 + 3 * b, 1000 + b, 1'000'000'000'000 + b, 1000 + b});
  auto r = RankImbalance(s);
  ASSERT_EQ(r.size(), 2u);
  EXPECT_DOUBLE_EQ(r.at("c0ffee00/transmit"), std::sqrt(0.75) / 1.5);
  EXPECT_DOUBLE_EQ(r.at("c0ffee00/receive"), std::sqrt(0.75) / 1.5);
  // An even batch: the span (2 batches) holds {4b, 2b, 2b, 2b}: mean 2.5b, variance 0.75 b^2.
  Ring(s, {1000 + 4 * b, 1000 + 2 * b, 1'000'000'000'000 + 2 * b, 1000 + 2 * b});
  EXPECT_DOUBLE_EQ(RankImbalance(s).at("c0ffee00/transmit"), std::sqrt(0.75) / 2.5);
  // A second even batch pushes the uneven one out of the span: {2b, 2b, 2b, 2b}.
  Ring(s, {1000 + 5 * b, 1000 + 3 * b, 1'000'000'000'000 + 3 * b, 1000 + 3 * b});
  r = RankImbalance(s);
  EXPECT_EQ(r.at("c0ffee00/transmit"), 0.0);
  EXPECT_EQ(r.at("c0ffee00/receive"), 0.0);
}

TEST(GpuState, RankImbalanceSurvivesAgentRestartsAndCounterResets) {
  GpuState::Options o;
  o.imbalance_windows = 1;
  GpuState s(o);
  const uint64_t big = 5'000'000'000'000;
  Ring(s, {big, big, big, big});
  Ring(s, {big + 1000, big + 1000, big + 1000, big + 1000});
  EXPECT_EQ(RankImbalance(s).at("c0ffee00/transmit"), 0.0);
  // n1's agent restarts: its new totals (700) are far below the old ones. Its first batch is a
  // baseline, so only n2's ranks 2 and 3 count (1000 each): no negative or wrapped delta.
  s.ResetNode("n1");
  Ring(s, {700, 700, big + 2000, big + 2000});
  auto r = RankImbalance(s);
  EXPECT_EQ(r.at("c0ffee00/transmit"), 0.0);
  // Receivers: rank 3 (from 2) and rank 0 (from 3), 1000 each.
  EXPECT_EQ(r.at("c0ffee00/receive"), 0.0);
  // n1 moves 1000 per rank again; n2's counters reset without a new agent (totals 300): their
  // bytes count from zero. {1000, 1000, 300, 300}: mean 650, std 350 -> 7/13.
  Ring(s, {1700, 1700, 300, 300});
  EXPECT_DOUBLE_EQ(RankImbalance(s).at("c0ffee00/transmit"), 350.0 / 650.0);
}

TEST(GpuState, RankImbalanceIsAbsentForOneRankOrNoBytes) {
  GpuState s;
  const uint64_t single = 0x0000000100000000, idle = 0x0000000200000000;
  const uint64_t pair = 0x0000000300000000;
  s.OnBatch("n", RankPairs({{single, 0, 1, 10}, {idle, 0, 1, 10}, {idle, 1, 0, 10}}));
  // `pair` is new in the second batch: its whole totals moved since the first.
  s.OnBatch("n", RankPairs({{single, 0, 1, 20},
                            {idle, 0, 1, 10},
                            {idle, 1, 0, 10},
                            {pair, 0, 1, 20},
                            {pair, 1, 0, 10}}));
  // pair: rank 0 sent 20, rank 1 sent 10: mean 15, std 5 -> 1/3 (receive mirrors it).
  // single: one rank per direction; idle: two ranks without bytes. Neither appears.
  const auto r = RankImbalance(s);
  EXPECT_EQ(r.size(), 2u);
  EXPECT_DOUBLE_EQ(r.at("00000003/transmit"), 1.0 / 3);
  EXPECT_DOUBLE_EQ(r.at("00000003/receive"), 1.0 / 3);
}

TEST(GpuState, RankImbalanceKeepsToTheCommLabels) {
  GpuState::Options o;
  o.max_comm_labels = 1;
  GpuState s(o);
  const uint64_t busy = 0x0000000300000000, folded = 0x0000000400000000;
  for (uint64_t i = 1; i <= 2; ++i) {
    v1::Batch b = RankPairs(
        {{busy, 0, 1, 30 * i}, {busy, 1, 0, 10 * i}, {folded, 0, 1, 30 * i}, {folded, 1, 0, 20}});
    // busy runs the most collectives and keeps the one comm label; folded is beyond it.
    *b.mutable_gpu()->add_collective_totals() = Totals(busy, "AllReduce", 50 * i, 0, 0);
    *b.mutable_gpu()->add_collective_totals() = Totals(folded, "AllReduce", 5 * i, 0, 0);
    s.OnBatch("n", b);
  }
  // busy: {30, 10}: mean 20, std 10 -> 0.5. folded is omitted, not folded into "other".
  const auto r = RankImbalance(s);
  EXPECT_EQ(r.size(), 2u);
  EXPECT_DOUBLE_EQ(r.at("00000003/transmit"), 0.5);
  EXPECT_DOUBLE_EQ(r.at("00000003/receive"), 0.5);
}

v1::Batch Producers(const std::vector<std::pair<int32_t, std::vector<std::string>>>& producers) {
  v1::Batch b;
  for (const auto& [pid, ports] : producers) {
    v1::GpuProducer* p = b.mutable_gpu()->mutable_ingest()->add_producers();
    p->set_pid(pid);
    for (const std::string& port : ports) p->add_rdma_ports(port);
  }
  return b;
}

// The ports a producer reported stay with its pid: a later batch without them (the agent's QP
// table failed, or the process left) does not erase them, a new report replaces them, and a
// hostile agent's port list is cut to its bound and names that are not device:port are dropped.
TEST(GpuState, KeepsEachProcesssPortsAcrossBatches) {
  GpuState s;
  s.OnBatch("n1", Producers({{100, {"mlx5_0:1"}}, {200, {"mlx5_1:1", "mlx5_2:1"}}}));
  s.OnBatch("n1", Producers({{100, {}}, {300, {"mlx5_3:1"}}}));
  s.OnBatch("n1", Producers({{200, {"mlx5_2:1"}}}));
  using M = std::map<int32_t, std::vector<std::string>>;
  EXPECT_EQ(s.ProcessPorts("n1"),
            (M{{100, {"mlx5_0:1"}}, {200, {"mlx5_2:1"}}, {300, {"mlx5_3:1"}}}));
  EXPECT_TRUE(s.ProcessPorts("n2").empty());
  std::vector<std::string> many(40, "mlx5_0:1");
  s.OnBatch("n2", Producers({{7, many},
                             {-1, {"mlx5_0:1"}},
                             {8,
                              {std::string(500, 'x') + ":1", "mlx5_0", "mlx5_0:1234", "mlx5 0:1",
                               ":1", "mlx5_0:x", "mlx5_3:2"}}}));
  const M n2 = s.ProcessPorts("n2");
  ASSERT_EQ(n2.size(), 2u);
  EXPECT_EQ(n2.at(7).size(), GpuState::kMaxPortsPerPid);
  EXPECT_EQ(n2.at(8), (std::vector<std::string>{"mlx5_3:2"}));  // the only well-formed name
  s.ResetNode("n1");
  EXPECT_TRUE(s.ProcessPorts("n1").empty());
}

// Past kMaxPortPids per node, processes no longer connected leave first: a node of 2,000
// short-lived processes keeps the connected ones.
TEST(GpuState, ProcessPortsAreBoundedAndTheConnectedStay) {
  GpuState s;
  for (int32_t pid = 1; pid <= 2000; ++pid) s.OnBatch("n1", Producers({{pid, {"mlx5_0:1"}}}));
  EXPECT_EQ(s.ProcessPorts("n1").size(), GpuState::kMaxPortPids);
  std::vector<std::pair<int32_t, std::vector<std::string>>> connected;
  for (int32_t pid = 5000; pid < 5000 + static_cast<int32_t>(GpuState::kMaxPortPids); ++pid) {
    connected.push_back({pid, {"mlx5_1:1"}});
  }
  s.OnBatch("n1", Producers(connected));
  const auto m = s.ProcessPorts("n1");
  ASSERT_EQ(m.size(), GpuState::kMaxPortPids);
  EXPECT_EQ(m.begin()->first, 5000);
  EXPECT_EQ(m.rbegin()->first, 5000 + static_cast<int32_t>(GpuState::kMaxPortPids) - 1);
}

// A job's processes per node: its communicators' pids (kept after the process exits) and its
// connected producers'; another job's and an unnamed one's are left out.
TEST(GpuState, PidsOfJobComeFromCommunicatorsAndProducers) {
  GpuState s;
  v1::Batch b = Producers({{10, {}}, {11, {}}});
  b.mutable_gpu()->mutable_ingest()->mutable_producers(0)->set_job_id("8812");
  b.mutable_gpu()->mutable_ingest()->mutable_producers(1)->set_job_id("other");
  for (const auto& [pid, job] :
       std::vector<std::pair<int32_t, std::string>>{{12, "8812"}, {13, "other"}, {14, ""}}) {
    v1::Communicator* c = b.mutable_gpu()->add_communicators();
    c->set_pid(pid);
    c->set_job_id(job);
  }
  s.OnBatch("n1", b);
  v1::Batch n2 = Producers({{10, {}}});
  n2.mutable_gpu()->mutable_ingest()->mutable_producers(0)->set_job_id("8812");
  s.OnBatch("n2", n2);
  using M = std::map<std::string, std::set<int32_t>>;
  EXPECT_EQ(s.PidsOfJob("8812"), (M{{"n1", {10, 12}}, {"n2", {10}}}));
  EXPECT_EQ(s.PidsOfJob("other"), (M{{"n1", {11, 13}}}));
  EXPECT_TRUE(s.PidsOfJob("").empty());
  EXPECT_TRUE(s.PidsOfJob("nope").empty());
}

}  // namespace
}  // namespace fabricscope::exporters

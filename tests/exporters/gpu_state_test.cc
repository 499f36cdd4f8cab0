#include "exporters/gpu_state.h"

#include <map>
#include <string>

#include "gtest/gtest.h"

namespace fabricscope::exporters {
namespace {

const prometheus::MetricFamily* Family(const std::vector<prometheus::MetricFamily>& fs,
                                       const std::string& name) {
  for (const auto& f : fs) {
    if (f.name == name) return &f;
  }
  return nullptr;
}

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
  s.Collect(&fs);
  const auto* total = Family(fs, "fabricscope_collectives_total");
  ASSERT_NE(total, nullptr);
  ASSERT_EQ(total->metric.size(), 1u);
  EXPECT_EQ(total->metric[0].counter.value, 40);
  const auto* dur = Family(fs, "fabricscope_collective_duration_seconds");
  ASSERT_NE(dur, nullptr);
  ASSERT_EQ(dur->metric.size(), 1u);
  EXPECT_EQ(Labels(dur->metric[0]).at("comm"), "aabbccdd");
  EXPECT_EQ(dur->metric[0].histogram.sample_count, 40u);
  EXPECT_EQ(dur->metric[0].histogram.bucket[0].cumulative_count, 40u);
  // (4e9 x 1 s + 8e9 x 3 s) / 4 s = 7e9.
  const auto* bw = Family(fs, "fabricscope_collective_bus_bandwidth_bytes_per_second");
  ASSERT_NE(bw, nullptr);
  EXPECT_DOUBLE_EQ(bw->metric[0].gauge.value, 7e9);

  // A later window without collectives keeps the last busBw of that node.
  v1::Batch quiet;
  *quiet.mutable_gpu()->add_collective_totals() = Totals(0xaabbccdd11223344, "AllReduce", 30, 0, 0);
  s.OnBatch("n2", quiet);
  fs.clear();
  s.Collect(&fs);
  EXPECT_DOUBLE_EQ(
      Family(fs, "fabricscope_collective_bus_bandwidth_bytes_per_second")->metric[0].gauge.value,
      7e9);
  // A new agent instance restarts its node's totals.
  s.ResetNode("n2");
  fs.clear();
  s.Collect(&fs);
  EXPECT_EQ(Family(fs, "fabricscope_collectives_total")->metric[0].counter.value, 10);
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
  s.Collect(&fs);
  std::map<std::string, uint64_t> by_comm;
  for (const auto& m : Family(fs, "fabricscope_collective_duration_seconds")->metric) {
    by_comm[Labels(m).at("comm")] = m.histogram.sample_count;
  }
  // The two busiest communicators (40 and 30 collectives) keep their label; 20 + 10 fold.
  ASSERT_EQ(by_comm.size(), 3u);
  EXPECT_EQ(by_comm.at("00000004"), 40u);
  EXPECT_EQ(by_comm.at("00000003"), 30u);
  EXPECT_EQ(by_comm.at("other"), 30u);
  const auto* pairs = Family(fs, "fabricscope_rank_pair_bytes_total");
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

TEST(GpuState, JsonKeepsTheNewestAndConvertsTimes) {
  GpuState::Options o;
  o.recent_collectives_per_node = 3;
  GpuState s(o);
  v1::Batch b;
  b.set_unix_offset_ns(1'000'000'000'000'000'000);
  for (int i = 0; i < 5; ++i) {
    v1::Collective* c = b.add_collectives();
    c->set_comm_hash(0x42);
    c->set_func("Broadcast");
    c->set_seq(static_cast<uint64_t>(i));
    c->set_start_ns(500'000'000);
    c->set_end_ns(1'500'000'000);
  }
  v1::KernelSpan* k = b.add_kernel_spans();
  k->set_name("gemm");
  k->set_start_ns(0);
  k->set_end_ns(2'000);
  s.OnBatch("n", b);
  const std::string all = s.CollectivesJson("", 0);
  EXPECT_EQ(all.find("\"seq\":1,"), std::string::npos) << all;  // only the newest 3 kept
  EXPECT_NE(all.find("\"seq\":2"), std::string::npos) << all;
  EXPECT_NE(all.find("\"comm\":\"0000000000000042\""), std::string::npos) << all;
  EXPECT_NE(all.find("\"start_unix_seconds\":1000000000.5"), std::string::npos) << all;
  const std::string one = s.CollectivesJson("n", 1);
  EXPECT_NE(one.find("\"seq\":4"), std::string::npos) << one;
  EXPECT_EQ(one.find("\"seq\":3"), std::string::npos) << one;
  EXPECT_EQ(s.CollectivesJson("other-node", 0), "{\"collectives\":[]}");
  const std::string kernels = s.KernelsJson("", 0);
  EXPECT_NE(kernels.find("\"name\":\"gemm\""), std::string::npos) << kernels;
  EXPECT_NE(kernels.find("\"duration_seconds\":2e-06"), std::string::npos) << kernels;
}

}  // namespace
}  // namespace fabricscope::exporters

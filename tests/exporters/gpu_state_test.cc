#include "exporters/gpu_state.h"

#include <google/protobuf/struct.pb.h>
#include <google/protobuf/util/json_util.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
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
  // A communicator the agent no longer reports is forgotten, its busBw with it: what a node
  // holds is bounded by one window's communicators (limits: max_communicators_per_node).
  v1::Batch moved_on;
  *moved_on.mutable_gpu()->add_collective_totals() =
      Totals(0x5566778811223344, "AllReduce", 1, 0, 0);
  s.OnBatch("n1", moved_on);
  fs.clear();
  s.Collect(&fs);
  for (const auto& m :
       Family(fs, "fabricscope_collective_bus_bandwidth_bytes_per_second")->metric) {
    if (Labels(m).at("comm") == "aabbccdd") {
      EXPECT_DOUBLE_EQ(m.gauge.value, 8e9);  // n2's alone
    }
    EXPECT_NE(Labels(m).at("comm"), "55667788");  // no window with a duration yet
  }
  s.OnBatch("n1", a);
  // A new agent instance restarts its node's totals.
  s.ResetNode("n2");
  fs.clear();
  s.Collect(&fs);
  EXPECT_EQ(Family(fs, "fabricscope_collectives_total")->metric[0].counter.value, 10);
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
  s.Collect(&fs);
  const auto* f = Family(fs, "fabricscope_collective_timing_source_total");
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

// The JSON document `json` parsed back; fails the test when it is not valid JSON.
google::protobuf::Struct ParseJson(const std::string& json) {
  google::protobuf::Struct root;
  EXPECT_TRUE(google::protobuf::util::JsonStringToMessage(json, &root).ok()) << json;
  return root;
}

// The field names of one JSON object, sorted.
std::vector<std::string> Keys(const google::protobuf::Struct& s) {
  std::vector<std::string> keys;
  for (const auto& [k, v] : s.fields()) keys.push_back(k);
  std::sort(keys.begin(), keys.end());
  return keys;
}

v1::Collective FullCollective() {
  v1::Collective c;
  c.set_comm_hash(0x0123456789abcdef);
  c.set_rank(3);
  c.set_nranks(16);
  c.set_func("ReduceScatter");
  c.set_seq(77);
  c.set_bytes(1ull << 30);
  c.set_count(1ull << 28);
  c.set_datatype("bfloat16");
  c.set_algo("Ring");
  c.set_proto("LL128");
  c.set_channels(24);
  c.set_root(2);
  c.set_peer(5);
  c.set_enqueue_start_ns(1'000);
  c.set_enqueue_end_ns(2'000);
  c.set_start_ns(3'000'000);
  c.set_end_ns(4'500'000);
  c.set_timing_source(v1::TIMING_SOURCE_KERNEL_CHANNEL);
  c.set_duration_seconds(0.0015);
  c.set_algbw_bytes_per_second(7.25e11);
  c.set_busbw_bytes_per_second(6.796875e11);
  c.set_pid(4242);
  c.set_uid(1000);
  c.set_gpu(6);
  c.set_p2p(true);
  c.set_graph_captured(true);
  c.set_proxy_bytes(123'456'789);
  c.set_proxy_ops(9);
  for (int i = 0; i < 3; ++i) {
    v1::ProxyPeer* p = c.add_proxy_peers();
    p->set_peer(i * 4 + 1);
    p->set_bytes_sent(100u * static_cast<uint64_t>(i + 1));
    p->set_bytes_received(1000u * static_cast<uint64_t>(i + 1));
    p->set_ops(2);
  }
  return c;
}

v1::KernelSpan FullKernel() {
  v1::KernelSpan k;
  k.set_device(2);
  k.set_stream(13);
  k.set_context(1);
  k.set_start_ns(5'000'000);
  k.set_end_ns(5'250'000);
  k.set_name("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)");
  k.set_is_nccl(true);
  k.set_graph_id(31);
  k.set_correlation_id(9'001);
  k.set_pid(4343);
  k.set_memcpy(true);
  k.set_bytes(65'536);
  return k;
}

TEST(GpuState, JsonRoundTripsEveryCollectiveAndKernelField) {
  GpuState s;
  constexpr int64_t kOffset = 1'700'000'000'000'000'000;
  v1::Batch b1;
  b1.set_unix_offset_ns(kOffset);
  *b1.add_collectives() = FullCollective();
  *b1.add_kernel_spans() = FullKernel();
  // A second batch, another clock offset: a collective without peers or times, then a full
  // one whose peers must not be mixed up with the first one's.
  v1::Batch b2;
  b2.set_unix_offset_ns(kOffset + 7'000);
  v1::Collective* bare = b2.add_collectives();
  bare->set_func("Send");
  bare->set_root(-1);
  bare->set_peer(-1);
  bare->set_gpu(-1);
  v1::Collective* second = b2.add_collectives();
  *second = FullCollective();
  second->set_seq(78);
  second->mutable_proxy_peers()->RemoveLast();
  second->mutable_proxy_peers(0)->set_peer(9);
  v1::KernelSpan* kb = b2.add_kernel_spans();
  kb->set_name("gemm");
  kb->set_start_ns(10);
  kb->set_end_ns(5);  // ends before it starts: duration 0
  s.OnBatch("n", b1);
  s.OnBatch("n", b2);

  const google::protobuf::Struct all = ParseJson(s.CollectivesJson("", 0));
  ASSERT_EQ(Keys(all), std::vector<std::string>{"collectives"});
  const auto& list = all.fields().at("collectives").list_value();
  ASSERT_EQ(list.values_size(), 3);
  const v1::Collective want = FullCollective();
  for (int i : {0, 2}) {
    SCOPED_TRACE(i);
    const int64_t off = i == 0 ? kOffset : kOffset + 7'000;
    const auto& f = list.values(i).struct_value().fields();
    EXPECT_EQ(Keys(list.values(i).struct_value()),
              (std::vector<std::string>{"algbw_bytes_per_second",
                                        "algo",
                                        "busbw_bytes_per_second",
                                        "bytes",
                                        "channels",
                                        "comm",
                                        "count",
                                        "datatype",
                                        "duration_seconds",
                                        "end_unix_seconds",
                                        "enqueue_unix_seconds",
                                        "func",
                                        "gpu",
                                        "graph_captured",
                                        "node",
                                        "nranks",
                                        "p2p",
                                        "peer",
                                        "pid",
                                        "proto",
                                        "proxy_bytes",
                                        "proxy_peers",
                                        "rank",
                                        "root",
                                        "seq",
                                        "start_unix_seconds",
                                        "timing_source"}));
    EXPECT_EQ(f.at("node").string_value(), "n");
    EXPECT_EQ(f.at("comm").string_value(), "0123456789abcdef");
    EXPECT_EQ(f.at("rank").number_value(), want.rank());
    EXPECT_EQ(f.at("nranks").number_value(), want.nranks());
    EXPECT_EQ(f.at("func").string_value(), "ReduceScatter");
    EXPECT_EQ(f.at("seq").number_value(), i == 0 ? 77 : 78);
    EXPECT_EQ(f.at("bytes").number_value(), static_cast<double>(want.bytes()));
    EXPECT_EQ(f.at("count").number_value(), static_cast<double>(want.count()));
    EXPECT_EQ(f.at("datatype").string_value(), "bfloat16");
    EXPECT_EQ(f.at("algo").string_value(), "Ring");
    EXPECT_EQ(f.at("proto").string_value(), "LL128");
    EXPECT_EQ(f.at("channels").number_value(), want.channels());
    EXPECT_EQ(f.at("root").number_value(), want.root());
    EXPECT_EQ(f.at("peer").number_value(), want.peer());
    EXPECT_EQ(f.at("timing_source").string_value(), "kernel_channel");
    EXPECT_EQ(f.at("enqueue_unix_seconds").number_value(),
              static_cast<double>(want.enqueue_start_ns() + off) / 1e9);
    EXPECT_EQ(f.at("start_unix_seconds").number_value(),
              static_cast<double>(want.start_ns() + off) / 1e9);
    EXPECT_EQ(f.at("end_unix_seconds").number_value(),
              static_cast<double>(want.end_ns() + off) / 1e9);
    EXPECT_EQ(f.at("duration_seconds").number_value(), want.duration_seconds());
    EXPECT_EQ(f.at("algbw_bytes_per_second").number_value(), want.algbw_bytes_per_second());
    EXPECT_EQ(f.at("busbw_bytes_per_second").number_value(), want.busbw_bytes_per_second());
    EXPECT_EQ(f.at("pid").number_value(), want.pid());
    EXPECT_EQ(f.at("gpu").number_value(), want.gpu());
    EXPECT_TRUE(f.at("p2p").bool_value());
    EXPECT_TRUE(f.at("graph_captured").bool_value());
    EXPECT_EQ(f.at("proxy_bytes").number_value(), static_cast<double>(want.proxy_bytes()));
    const auto& peers = f.at("proxy_peers").list_value();
    ASSERT_EQ(peers.values_size(), i == 0 ? 3 : 2);
    for (int p = 0; p < peers.values_size(); ++p) {
      const auto& pf = peers.values(p).struct_value();
      EXPECT_EQ(Keys(pf), (std::vector<std::string>{"bytes_received", "bytes_sent", "peer"}));
      EXPECT_EQ(pf.fields().at("peer").number_value(), i == 2 && p == 0 ? 9 : p * 4 + 1);
      EXPECT_EQ(pf.fields().at("bytes_sent").number_value(), 100 * (p + 1));
      EXPECT_EQ(pf.fields().at("bytes_received").number_value(), 1000 * (p + 1));
    }
  }
  const auto& f = list.values(1).struct_value().fields();
  EXPECT_EQ(f.size(), 27u);
  EXPECT_EQ(f.at("func").string_value(), "Send");
  EXPECT_EQ(f.at("datatype").string_value(), "");
  EXPECT_EQ(f.at("timing_source").string_value(), "unknown");
  EXPECT_EQ(f.at("enqueue_unix_seconds").number_value(), 0);  // monotonic 0: unknown
  EXPECT_EQ(f.at("root").number_value(), -1);
  EXPECT_EQ(f.at("gpu").number_value(), -1);
  EXPECT_FALSE(f.at("p2p").bool_value());
  EXPECT_EQ(f.at("proxy_peers").list_value().values_size(), 0);

  // The newest 1 of node n: the second full collective, with its own peers.
  const auto newest = ParseJson(s.CollectivesJson("n", 1));
  const auto& one = newest.fields().at("collectives").list_value();
  ASSERT_EQ(one.values_size(), 1);
  EXPECT_EQ(one.values(0).struct_value().fields().at("seq").number_value(), 78);
  const auto& peers = one.values(0).struct_value().fields().at("proxy_peers").list_value();
  ASSERT_EQ(peers.values_size(), 2);
  EXPECT_EQ(peers.values(0).struct_value().fields().at("peer").number_value(), 9);
  EXPECT_EQ(peers.values(1).struct_value().fields().at("bytes_sent").number_value(), 200);

  const auto kernels = ParseJson(s.KernelsJson("", 0));
  const auto& kl = kernels.fields().at("kernels").list_value();
  ASSERT_EQ(kl.values_size(), 2);
  const v1::KernelSpan k = FullKernel();
  const auto& kf = kl.values(0).struct_value().fields();
  EXPECT_EQ(Keys(kl.values(0).struct_value()),
            (std::vector<std::string>{"bytes", "correlation_id", "device", "duration_seconds",
                                      "end_unix_seconds", "graph_id", "is_nccl", "memcpy", "name",
                                      "node", "pid", "start_unix_seconds", "stream"}));
  EXPECT_EQ(kf.at("node").string_value(), "n");
  EXPECT_EQ(kf.at("device").number_value(), 2);
  EXPECT_EQ(kf.at("stream").number_value(), 13);
  EXPECT_EQ(kf.at("name").string_value(), k.name());
  EXPECT_TRUE(kf.at("is_nccl").bool_value());
  EXPECT_TRUE(kf.at("memcpy").bool_value());
  EXPECT_EQ(kf.at("bytes").number_value(), 65'536);
  EXPECT_EQ(kf.at("start_unix_seconds").number_value(),
            static_cast<double>(k.start_ns() + kOffset) / 1e9);
  EXPECT_EQ(kf.at("end_unix_seconds").number_value(),
            static_cast<double>(k.end_ns() + kOffset) / 1e9);
  EXPECT_EQ(kf.at("duration_seconds").number_value(), 250'000 / 1e9);
  EXPECT_EQ(kf.at("pid").number_value(), 4343);
  EXPECT_EQ(kf.at("graph_id").number_value(), 31);
  EXPECT_EQ(kf.at("correlation_id").number_value(), 9'001);
  const auto& kg = kl.values(1).struct_value().fields();
  EXPECT_EQ(kg.size(), 13u);
  EXPECT_EQ(kg.at("name").string_value(), "gemm");
  EXPECT_EQ(kg.at("start_unix_seconds").number_value(),
            static_cast<double>(10 + kOffset + 7'000) / 1e9);
  EXPECT_EQ(kg.at("duration_seconds").number_value(), 0);
  EXPECT_FALSE(kg.at("is_nccl").bool_value());
}

TEST(GpuState, StoredRecordsAreBoundedAndStayValidJson) {
  GpuState s;
  v1::Batch b;
  b.set_unix_offset_ns(std::numeric_limits<int64_t>::max());
  v1::Collective* c = b.add_collectives();
  c->set_func(std::string(10'000, 'f'));
  // A 2-byte character straddling the bound is dropped whole, not cut in half.
  c->set_datatype(std::string(GpuState::kMaxLabelBytes - 1, 'd') + "\u00e9tail");
  c->set_algo(std::string(GpuState::kMaxLabelBytes, 'a'));
  c->set_timing_source(static_cast<v1::TimingSource>(99));
  c->set_start_ns(std::numeric_limits<int64_t>::max());  // past the int64 range with the offset
  for (int i = 0; i < 40; ++i) c->add_proxy_peers()->set_peer(i);
  v1::KernelSpan* k = b.add_kernel_spans();
  k->set_name(std::string(GpuState::kMaxKernelNameBytes + 100, 'k'));
  k->set_start_ns(std::numeric_limits<int64_t>::min());
  k->set_end_ns(std::numeric_limits<int64_t>::max());
  s.OnBatch("n", b);

  const auto root = ParseJson(s.CollectivesJson("", 0));
  const auto& f = root.fields().at("collectives").list_value().values(0).struct_value().fields();
  EXPECT_EQ(f.at("func").string_value(), std::string(GpuState::kMaxLabelBytes, 'f'));
  EXPECT_EQ(f.at("datatype").string_value(), std::string(GpuState::kMaxLabelBytes - 1, 'd'));
  EXPECT_EQ(f.at("algo").string_value(), std::string(GpuState::kMaxLabelBytes, 'a'));
  EXPECT_EQ(f.at("timing_source").string_value(), "unknown");
  // Saturated at the int64 range of Unix ns.
  EXPECT_EQ(f.at("start_unix_seconds").number_value(),
            static_cast<double>(std::numeric_limits<int64_t>::max()) / 1e9);
  const auto& peers = f.at("proxy_peers").list_value();
  ASSERT_EQ(peers.values_size(), static_cast<int>(GpuState::kMaxProxyPeers));
  EXPECT_EQ(peers.values(31).struct_value().fields().at("peer").number_value(), 31);

  const auto kernels = ParseJson(s.KernelsJson("", 0));
  const auto& kf = kernels.fields().at("kernels").list_value().values(0).struct_value().fields();
  EXPECT_EQ(kf.at("name").string_value(), std::string(GpuState::kMaxKernelNameBytes, 'k'));
  EXPECT_EQ(kf.at("duration_seconds").number_value(), 0x1p64 / 1e9);
}

TEST(GpuState, InternedStringsAndProfilesLeaveWithTheirRecords) {
  GpuState::Options o;
  o.recent_collectives_per_node = 2;
  o.recent_kernels_per_node = 2;
  GpuState s;
  GpuState small(o);
  for (int i = 0; i < 10; ++i) {
    v1::Batch b;
    v1::Collective* c = b.add_collectives();
    c->set_func(absl::StrCat("f", i));
    c->set_datatype("float32");
    c->add_proxy_peers()->set_peer(i);
    b.add_kernel_spans()->set_name(absl::StrCat("k", i));
    small.OnBatch("n", b);
    s.OnBatch("n", b);
    s.OnBatch("m", b);
  }
  // small keeps 2 collectives (f8, f9, float32, "") and 2 kernel spans (k8, k9).
  EXPECT_EQ(small.interned_strings(), 6u);
  EXPECT_EQ(small.interned_profiles(), 2u);
  const auto root = ParseJson(small.CollectivesJson("", 0));
  const auto& list = root.fields().at("collectives").list_value();
  ASSERT_EQ(list.values_size(), 2);
  for (int i = 0; i < 2; ++i) {
    const auto& f = list.values(i).struct_value().fields();
    EXPECT_EQ(f.at("func").string_value(), absl::StrCat("f", 8 + i));
    const auto& peers = f.at("proxy_peers").list_value();
    ASSERT_EQ(peers.values_size(), 1);
    EXPECT_EQ(peers.values(0).struct_value().fields().at("peer").number_value(), 8 + i);
  }
  // Two nodes share one copy; a string stays until the last node holding it is reset.
  EXPECT_EQ(s.interned_strings(), 22u);
  EXPECT_EQ(s.interned_profiles(), 10u);
  s.ResetNode("n");
  EXPECT_EQ(s.interned_strings(), 22u);
  EXPECT_EQ(s.interned_profiles(), 10u);
  EXPECT_NE(s.CollectivesJson("", 0).find("\"func\":\"f3\""), std::string::npos);
  s.ResetNode("m");
  EXPECT_EQ(s.interned_strings(), 0u);
  EXPECT_EQ(s.interned_profiles(), 0u);
  small.ResetNode("n");
  EXPECT_EQ(small.interned_strings(), 0u);
  // Freed ids are reused: the same strings again take as many entries.
  for (int i = 0; i < 3; ++i) {
    v1::Batch b;
    b.add_collectives()->set_func("AllReduce");
    b.add_kernel_spans()->set_name("gemm");
    small.OnBatch("n", b);
  }
  EXPECT_EQ(small.interned_strings(), 3u);
  EXPECT_EQ(small.interned_profiles(), 1u);
  EXPECT_EQ(ParseJson(small.KernelsJson("n", 0)).fields().at("kernels").list_value().values_size(),
            2);
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
  s.Collect(&fs);
  std::map<std::string, double> out;
  const auto* f = Family(fs, "fabricscope_traffic_imbalance_ratio");
  if (f == nullptr) return out;
  for (const auto& m : f->metric) {
    auto l = Labels(m);
    EXPECT_EQ(l.at("scope"), "ranks");
    EXPECT_EQ(l.size(), 3u);
    out[l.at("comm") + "/" + l.at("direction")] = m.gauge.value;
  }
  return out;
}

constexpr uint64_t kComm = 0xc0ffee0012345678;

// A 4-rank ring over two nodes (ranks 0, 1 on n1; 2, 3 on n2): rank r sends to r + 1 mod 4,
// with the cumulative totals `t[r]`.
void Ring(GpuState& s, const std::vector<uint64_t>& t) {
  s.OnBatch("n1", RankPairs({{kComm, 0, 1, t[0]}, {kComm, 1, 2, t[1]}}));
  s.OnBatch("n2", RankPairs({{kComm, 2, 3, t[2]}, {kComm, 3, 0, t[3]}}));
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

}  // namespace
}  // namespace fabricscope::exporters

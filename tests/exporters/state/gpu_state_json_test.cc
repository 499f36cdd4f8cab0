// GpuState's JSON of recent collectives and kernel spans (/api/v1/collectives, /api/v1/kernels):
// the newest records, every field round-tripped, bounds on stored records, and the interned
// strings and profiles behind them. (Metrics and rank imbalance: gpu_state_test.cc.)

#include <google/protobuf/struct.pb.h>
#include <google/protobuf/util/json_util.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "exporters/exposition/gpu_render.h"
#include "exporters/state/gpu_state.h"
#include "gtest/gtest.h"

namespace fabricscope::exporters {
namespace {

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
  const std::string all = CollectivesJson(s.RecentCollectives("", 0));
  EXPECT_EQ(all.find("\"seq\":1,"), std::string::npos) << all;  // only the newest 3 kept
  EXPECT_NE(all.find("\"seq\":2"), std::string::npos) << all;
  EXPECT_NE(all.find("\"comm\":\"0000000000000042\""), std::string::npos) << all;
  EXPECT_NE(all.find("\"start_unix_seconds\":1000000000.5"), std::string::npos) << all;
  const std::string one = CollectivesJson(s.RecentCollectives("n", 1));
  EXPECT_NE(one.find("\"seq\":4"), std::string::npos) << one;
  EXPECT_EQ(one.find("\"seq\":3"), std::string::npos) << one;
  EXPECT_EQ(CollectivesJson(s.RecentCollectives("other-node", 0)), "{\"collectives\":[]}");
  const std::string kernels = KernelsJson(s.RecentKernels("", 0));
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

// The clock offset of the first batch of JsonRoundTripsEveryCollectiveAndKernelField; the
// second batch's is 7 us later.
constexpr int64_t kOffset = 1'700'000'000'000'000'000;

// Feeds the two batches of JsonRoundTripsEveryCollectiveAndKernelField to `s`.
void FeedRoundTripBatches(GpuState& s) {
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
}

// Checks collective `i` of the JSON list of JsonRoundTripsEveryCollectiveAndKernelField: 0 (the
// full collective of the first batch) or 2 (the second full one, seq 78, with its own peers).
void ExpectFullCollectiveJson(const google::protobuf::Struct& c, int i) {
  const v1::Collective want = FullCollective();
  const int64_t off = i == 0 ? kOffset : kOffset + 7'000;
  const auto& f = c.fields();
  EXPECT_EQ(Keys(c), (std::vector<std::string>{"algbw_bytes_per_second",
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

// Checks the two kernel spans of JsonRoundTripsEveryCollectiveAndKernelField in the JSON of `s`.
void ExpectKernelsJson(const GpuState& s) {
  const auto kernels = ParseJson(KernelsJson(s.RecentKernels("", 0)));
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

TEST(GpuState, JsonRoundTripsEveryCollectiveAndKernelField) {
  GpuState s;
  FeedRoundTripBatches(s);

  const google::protobuf::Struct all = ParseJson(CollectivesJson(s.RecentCollectives("", 0)));
  ASSERT_EQ(Keys(all), std::vector<std::string>{"collectives"});
  const auto& list = all.fields().at("collectives").list_value();
  ASSERT_EQ(list.values_size(), 3);
  for (int i : {0, 2}) {
    SCOPED_TRACE(i);
    ASSERT_NO_FATAL_FAILURE(ExpectFullCollectiveJson(list.values(i).struct_value(), i));
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
  const auto newest = ParseJson(CollectivesJson(s.RecentCollectives("n", 1)));
  const auto& one = newest.fields().at("collectives").list_value();
  ASSERT_EQ(one.values_size(), 1);
  EXPECT_EQ(one.values(0).struct_value().fields().at("seq").number_value(), 78);
  const auto& peers = one.values(0).struct_value().fields().at("proxy_peers").list_value();
  ASSERT_EQ(peers.values_size(), 2);
  EXPECT_EQ(peers.values(0).struct_value().fields().at("peer").number_value(), 9);
  EXPECT_EQ(peers.values(1).struct_value().fields().at("bytes_sent").number_value(), 200);

  ExpectKernelsJson(s);
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

  const auto root = ParseJson(CollectivesJson(s.RecentCollectives("", 0)));
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

  const auto kernels = ParseJson(KernelsJson(s.RecentKernels("", 0)));
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
  const auto root = ParseJson(CollectivesJson(small.RecentCollectives("", 0)));
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
  EXPECT_NE(CollectivesJson(s.RecentCollectives("", 0)).find("\"func\":\"f3\""), std::string::npos);
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
  EXPECT_EQ(ParseJson(KernelsJson(small.RecentKernels("n", 0)))
                .fields()
                .at("kernels")
                .list_value()
                .values_size(),
            2);
}

// One batch of 40 collectives with 40 function names, more than a batch's string cache searches
// (16), into a ring of 2: the names evicted within the batch are freed once the batch ends, and
// the two kept resolve to their own names.
TEST(GpuState, ABatchOfManyNamesLeavesOnlyWhatItsRecordsHold) {
  GpuState::Options o;
  o.recent_collectives_per_node = 2;
  GpuState s(o);
  v1::Batch b;
  for (int i = 0; i < 40; ++i) {
    v1::Collective* c = b.add_collectives();
    c->set_func(absl::StrCat("g", i));
    c->set_datatype(i % 2 == 0 ? "float32" : "bfloat16");
  }
  s.OnBatch("n", b);
  // g38 (float32), g39 (bfloat16), and "" for algo and proto.
  EXPECT_EQ(s.interned_strings(), 5u);
  EXPECT_EQ(s.interned_profiles(), 2u);
  const auto root = ParseJson(CollectivesJson(s.RecentCollectives("", 0)));
  const auto& list = root.fields().at("collectives").list_value();
  ASSERT_EQ(list.values_size(), 2);
  EXPECT_EQ(list.values(0).struct_value().fields().at("func").string_value(), "g38");
  EXPECT_EQ(list.values(0).struct_value().fields().at("datatype").string_value(), "float32");
  EXPECT_EQ(list.values(1).struct_value().fields().at("func").string_value(), "g39");
  EXPECT_EQ(list.values(1).struct_value().fields().at("datatype").string_value(), "bfloat16");
  s.OnBatch("n", b);  // the same batch again: nothing more held
  EXPECT_EQ(s.interned_strings(), 5u);
  s.ResetNode("n");
  EXPECT_EQ(s.interned_strings(), 0u);
  EXPECT_EQ(s.interned_profiles(), 0u);
}

}  // namespace
}  // namespace fabricscope::exporters

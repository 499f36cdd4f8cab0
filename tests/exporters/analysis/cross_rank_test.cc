#include "exporters/analysis/cross_rank.h"

#include <cmath>
#include <string>

#include "absl/strings/str_cat.h"
#include "exporters/exposition/cross_rank_render.h"
#include "exporters/state/gpu_state.h"
#include "gtest/gtest.h"
#include "tests/common/metric_family.h"
#include "tests/common/units.h"

namespace fabricscope::exporters {
namespace {

constexpr uint64_t kCrossRankComm = 0x1234abcd00000001ULL;

std::string Node(int rank) { return absl::StrCat("node", rank); }

void Hello(CrossRankAnalysis& x, int rank) {
  v1::Hello h;
  h.set_node(Node(rank));
  v1::PortInfo* p = h.add_ports();
  p->set_device(absl::StrCat("veth", rank));
  p->set_port(1);
  x.OnHello(h);
}

// One rank's record of instance `seq` with its analysis (Collective.analysis, as
// agent/collective_analysis.cc CollectiveAnalyzer::Process sends it), its interval in ms since
// an epoch of 1000 s.
v1::Collective Analysis(int rank, uint64_t seq, int64_t start_ms, int64_t end_ms,
                        v1::CollectiveCause cause, double saturated = 0, uint64_t retransmits = 0,
                        double burst_s = 0) {
  v1::Collective c;
  c.set_comm_hash(kCrossRankComm);
  c.set_rank(rank);
  c.set_nranks(4);
  c.set_func("AllReduce");
  c.set_seq(seq);
  c.set_start_ns(start_ms * kMs);
  c.set_end_ns(end_ms * kMs);
  v1::CollectiveAnalysis& a = *c.mutable_analysis();
  a.set_cause(cause);
  a.set_port_index(0);
  a.set_detail(absl::StrCat("rank ", rank));
  v1::PortActivity* p = a.add_ports();
  p->set_port_index(0);
  p->set_samples(10);
  p->set_saturated_ratio(saturated);
  p->set_retransmits(retransmits);
  p->set_microburst_seconds(burst_s);
  return c;
}

void Send(CrossRankAnalysis& x, int rank, const v1::Collective& c) {
  v1::Batch b;
  b.set_unix_offset_ns(1'000'000'000'000);  // each node's own offset; the same here
  *b.add_collectives() = c;
  x.OnBatch(Node(rank), b);
}

using testing::FindFamily;

double Score(const std::vector<prometheus::MetricFamily>& f, int rank) {
  const prometheus::MetricFamily* s = FindFamily(f, "fabricscope_straggler_score");
  if (s == nullptr) return NAN;
  for (const auto& m : s->metric) {
    if (m.label.size() == 2 && m.label[1].value == absl::StrCat(rank)) return m.gauge.value;
  }
  return NAN;
}

double Cause(const std::vector<prometheus::MetricFamily>& f, const std::string& cause) {
  const prometheus::MetricFamily* s = FindFamily(f, "fabricscope_collectives_by_cause_total");
  if (s == nullptr) return NAN;
  for (const auto& m : s->metric) {
    if (m.label[0].value == cause) return m.counter.value;
  }
  return NAN;
}

class CrossRankTest : public ::testing::Test {
 protected:
  CrossRankTest() {
    for (int r = 0; r < 4; ++r) Hello(x_, r);
  }
  std::vector<prometheus::MetricFamily> Metrics() {
    std::vector<prometheus::MetricFamily> f;
    AddCrossRankFamilies(x_.Snapshot(), &f);
    return f;
  }
  CrossRankAnalysis x_;
};

TEST_F(CrossRankTest, LateRankIsAComputeStraggler) {
  // Rank 2 arrives 100 ms late every time; the others wait for it with idle links.
  for (uint64_t seq = 0; seq < 10; ++seq) {
    const int64_t t = 1000 + static_cast<int64_t>(seq) * 500;
    for (int r = 0; r < 4; ++r) {
      const bool late = r == 2;
      Send(x_, r,
           Analysis(r, seq, late ? t + 100 : t + r, t + 130,
                    late ? v1::COLLECTIVE_CAUSE_NORMAL : v1::COLLECTIVE_CAUSE_WAITING_ON_PEERS));
    }
  }
  EXPECT_EQ(x_.instances_total(), 10u);
  EXPECT_EQ(x_.pending(), 0u);
  const auto f = Metrics();
  // Seq 0 carries the ranks' start-up skew: the single-instance rule leaves it alone, and the
  // history has nothing yet. From seq 1 on the skew (100 of 130 ms) names rank 2; from seq 4 the
  // history would too.
  EXPECT_EQ(Cause(f, "compute_straggler"), 9);
  EXPECT_EQ(Cause(f, "normal"), 1);
  EXPECT_NEAR(Score(f, 2), 0.9 * 100.0 / 130.0, 1e-9);  // skew / longest duration, 9 of 10
  EXPECT_EQ(Score(f, 0), 0);
  const prometheus::MetricFamily* skew =
      FindFamily(f, "fabricscope_collective_arrival_skew_seconds");
  ASSERT_NE(skew, nullptr);
  EXPECT_EQ(skew->metric[0].histogram.sample_count, 10u);
  EXPECT_NEAR(skew->metric[0].histogram.sample_sum, 1.0, 1e-9);
  const std::string json = SlowJson(x_.Slowest(2));  // equal durations: seq 0 and 1
  EXPECT_NE(json.find("\"cause\":\"compute_straggler\""), std::string::npos) << json;
  EXPECT_NE(json.find("\"bottleneck\":{\"node\":\"node2\",\"rank\":2"), std::string::npos) << json;
  // The heat map: 4 rank rows x 10 sequence columns; the straggler's row holds the short
  // durations (30 ms), the others 127-130 ms.
  const HeatmapModel m = x_.CollectivesHeatmap("", "", 100);
  ASSERT_EQ(m.rows.size(), 4u);
  ASSERT_EQ(m.cols, 10u);
  EXPECT_EQ(m.rows[2], "2 (node2)");
  EXPECT_NEAR(m.at(2, 0), 0.030, 1e-6);
  EXPECT_NEAR(m.at(0, 9), 0.130, 1e-6);
  EXPECT_EQ(m.col_labels[9], "9");
  // A filter that matches nothing: an empty map that says which filter and where the labels are.
  const HeatmapModel none = x_.CollectivesHeatmap("ffffffff", "", 100);
  EXPECT_TRUE(none.rows.empty());
  EXPECT_NE(none.note.find("none of comm=\"ffffffff\" func=\"\" among the 1 communicator"),
            std::string::npos)
      << none.note;
}

// Before any complete instance the map is empty and its note says what completes one.
TEST_F(CrossRankTest, AnEmptyCollectivesMapSaysWhatItNeeds) {
  const HeatmapModel m = x_.CollectivesHeatmap("", "", 100);
  EXPECT_TRUE(m.rows.empty());
  EXPECT_NE(m.note.find("every rank of its communicator"), std::string::npos) << m.note;
  EXPECT_NE(m.note.find("collectors/nccl/README.md"), std::string::npos) << m.note;
}

TEST_F(CrossRankTest, SaturatedRankIsTheBottleneckAndLossBeatsSaturation) {
  for (int r = 0; r < 4; ++r) {
    Send(x_, r,
         Analysis(r, 0, 1000, 1300,
                  r == 1 ? v1::COLLECTIVE_CAUSE_NETWORK_SATURATED
                         : v1::COLLECTIVE_CAUSE_WAITING_ON_PEERS,
                  r == 1 ? 0.8 : 0.0, 0, r == 1 ? 0.15 : 0.0));
  }
  for (int r = 0; r < 4; ++r) {
    v1::CollectiveCause c = v1::COLLECTIVE_CAUSE_NORMAL;
    if (r == 1) c = v1::COLLECTIVE_CAUSE_NETWORK_SATURATED;
    if (r == 3) c = v1::COLLECTIVE_CAUSE_NETWORK_LOSSY;
    Send(x_, r, Analysis(r, 1, 2000, 2100, c, r == 1 ? 0.9 : 0.0, r == 3 ? 5 : 0));
  }
  const auto f = Metrics();
  EXPECT_EQ(Cause(f, "network_saturated"), 1);
  EXPECT_EQ(Cause(f, "network_lossy"), 1);
  EXPECT_NEAR(Score(f, 1), 0.8 / 2, 1e-9);  // blame 0.8, then 0
  EXPECT_NEAR(Score(f, 3), 1.0 / 2, 1e-9);
  const std::string json = SlowJson(x_.Slowest(0));
  // ?comm= keeps one communicator's instances (its label: the hash's top 32 bits).
  EXPECT_EQ(SlowJson(x_.Slowest(0, "1234abcd")), json);
  EXPECT_EQ(SlowJson(x_.Slowest(0, "00000001")).find("\"comm\":"), std::string::npos);
  EXPECT_NE(json.find("\"bottleneck\":{\"node\":\"node1\",\"rank\":1,\"port\":\"veth1\""),
            std::string::npos)
      << json;
  EXPECT_NE(json.find("\"bottleneck\":{\"node\":\"node3\",\"rank\":3"), std::string::npos);
  // Microburst overlap of node1's port: 0.15 s of 0.3 s, then 0 of 0.1 s.
  const prometheus::MetricFamily* ov = FindFamily(f, "fabricscope_port_microburst_overlap_ratio");
  ASSERT_NE(ov, nullptr);
  bool found = false;
  for (const auto& m : ov->metric) {
    if (m.label[0].value == "node1") {
      // The ring keeps each analysis's seconds as float (CrossRankAnalysis::NodeInfo): ~1e-7.
      EXPECT_NEAR(m.gauge.value, 0.15 / 0.4, 1e-6);
      EXPECT_EQ(m.label[1].value, "veth1");
      found = true;
    }
  }
  EXPECT_TRUE(found);
}

TEST_F(CrossRankTest, SmallSkewIsNormal) {
  for (int r = 0; r < 4; ++r) {
    Send(x_, r, Analysis(r, 0, 1000 + r, 1100, v1::COLLECTIVE_CAUSE_NORMAL));
  }
  const auto f = Metrics();
  EXPECT_EQ(Cause(f, "normal"), 1);
  EXPECT_EQ(Score(f, 3), 0);
}

TEST_F(CrossRankTest, IncompleteInstancesAreEvictedAndCounted) {
  CrossRankOptions o;
  o.pending_timeout_ns = 1'000 * kMs;
  CrossRankAnalysis x(o);
  for (int r = 0; r < 4; ++r) Hello(x, r);
  Send(x, 0, Analysis(0, 0, 1000, 1100, v1::COLLECTIVE_CAUSE_NORMAL));  // others never report
  EXPECT_EQ(x.pending(), 1u);
  Send(x, 0, Analysis(0, 1, 1500, 1600, v1::COLLECTIVE_CAUSE_NORMAL));
  EXPECT_EQ(x.pending(), 2u);  // 500 ms later: still within the timeout
  Send(x, 0, Analysis(0, 2, 3000, 3100, v1::COLLECTIVE_CAUSE_NORMAL));
  EXPECT_EQ(x.pending(), 1u);  // seq 0 and 1 evicted
  std::vector<prometheus::MetricFamily> f;
  AddCrossRankFamilies(x.Snapshot(), &f);
  const prometheus::MetricFamily* ev =
      FindFamily(f, "fabricscope_collective_instances_evicted_total");
  ASSERT_NE(ev, nullptr);
  EXPECT_EQ(ev->metric[0].counter.value, 2);
  // A duplicate report of the same rank does not complete an instance.
  for (int i = 0; i < 4; ++i) Send(x, 0, Analysis(0, 2, 3000, 3100, v1::COLLECTIVE_CAUSE_NORMAL));
  EXPECT_EQ(x.instances_total(), 0u);

  CrossRankOptions small;
  small.max_pending = 3;
  CrossRankAnalysis y(small);
  for (uint64_t s = 0; s < 10; ++s) {
    Send(y, 0, Analysis(0, s, 1000, 1100, v1::COLLECTIVE_CAUSE_NORMAL));
  }
  EXPECT_EQ(y.pending(), 3u);
}

TEST_F(CrossRankTest, RankHeatmapFromProxyPairs) {
  for (int r = 0; r < 4; ++r) {
    v1::Batch b;
    v1::RankPairBytes* p = b.mutable_gpu()->add_rank_pairs();
    p->set_comm_hash(kCrossRankComm);
    p->set_src_rank(r);
    p->set_dst_rank((r + 1) % 4);
    p->set_bytes_total(1000 * (r + 1));
    x_.OnBatch(Node(r), b);
  }
  const HeatmapModel m = x_.RanksHeatmap("");
  ASSERT_EQ(m.rows.size(), 4u);
  ASSERT_EQ(m.cols, 4u);
  for (size_t s = 0; s < 4; ++s) {
    for (size_t d = 0; d < 4; ++d) {
      EXPECT_EQ(m.at(s, d), d == (s + 1) % 4 ? 1000.0f * static_cast<float>(s + 1) : 0.0f)
          << s << "->" << d;
    }
  }
  const HeatmapModel none = x_.RanksHeatmap("ffffffff");
  EXPECT_EQ(none.rows.size(), 0u);
  EXPECT_EQ(none.note, "no communicator labelled \"ffffffff\" among the 1 with proxy traffic");
}

// A rank of INT32_MAX (no real communicator has one) and byte counts near 2^64 from a node:
// the heat map is cut at 1,024 ranks with the real pairs in place, rather than left empty by a
// rank + 1 that overflowed, and a comm's byte sum does not wrap below another's.
TEST_F(CrossRankTest, RankHeatmapSurvivesExtremeRanksAndBytes) {
  v1::Batch b;
  auto pair = [&](uint64_t comm, int32_t src, int32_t dst, uint64_t bytes) {
    v1::RankPairBytes* p = b.mutable_gpu()->add_rank_pairs();
    p->set_comm_hash(comm);
    p->set_src_rank(src);
    p->set_dst_rank(dst);
    p->set_bytes_total(bytes);
  };
  pair(kCrossRankComm, 0, 1, UINT64_MAX - 10);
  pair(kCrossRankComm, 1, 0, 100);  // a plain sum wraps to 89
  pair(kCrossRankComm, INT32_MAX, 0, 5);
  pair(kCrossRankComm + 1, 0, 1, 1'000'000);
  x_.OnBatch(Node(0), b);
  const HeatmapModel m = x_.RanksHeatmap("");
  EXPECT_EQ(m.title, "Rank x rank bytes, comm " + common::CommLabel(kCrossRankComm));
  ASSERT_EQ(m.rows.size(), 1024u);
  EXPECT_EQ(m.at(1, 0), 100.0f);
  EXPECT_EQ(m.at(0, 1), static_cast<float>(UINT64_MAX - 10));
}

// The agent sends all its cumulative pairs in every window (agent/gpu_timeline.cc): a window
// replaces the pairs of each communicator it names. One the node no longer reports (its job
// ended) stays for the heat map while room is left under max_rank_pairs_per_node, the least
// recently reported dropped first: a node cycling through communicators stays bounded.
TEST_F(CrossRankTest, RankPairsOfPastCommunicatorsStayWithinTheNodesBound) {
  CrossRankOptions small;
  small.max_rank_pairs_per_node = 4;
  CrossRankAnalysis x(small);
  auto window = [](uint64_t comm, int pairs, uint64_t bytes) {
    v1::Batch b;
    for (int d = 1; d <= pairs; ++d) {
      v1::RankPairBytes* p = b.mutable_gpu()->add_rank_pairs();
      p->set_comm_hash(comm);
      p->set_src_rank(0);
      p->set_dst_rank(d);
      p->set_bytes_total(bytes);
    }
    return b;
  };
  const uint64_t a = 0x1111000000000001ULL, b = 0x2222000000000001ULL, c = 0x3333000000000001ULL;
  auto rows = [&](uint64_t comm) { return x.RanksHeatmap(common::CommLabel(comm)).rows.size(); };
  x.OnBatch(Node(0), window(a, 2, 100));
  x.OnBatch(Node(0), window(a, 2, 300));  // replaced, not added: still 2 pairs
  EXPECT_EQ(x.RanksHeatmap(common::CommLabel(a)).at(0, 1), 300.0f);
  x.OnBatch(Node(0), window(b, 2, 100));  // a's job ended: 4 pairs, both kept
  EXPECT_EQ(rows(a), 3u);
  EXPECT_EQ(rows(b), 3u);
  x.OnBatch(Node(0), window(c, 1, 100));  // 5 > 4: the least recently reported (a) goes
  EXPECT_EQ(rows(a), 0u);
  EXPECT_EQ(rows(b), 3u);
  EXPECT_EQ(rows(c), 2u);
  // A window bigger than the bound on its own is kept whole (the ingest limit bounds it).
  x.OnBatch(Node(0), window(a, 6, 100));
  EXPECT_EQ(rows(a), 7u);
  EXPECT_EQ(rows(b), 0u);
  EXPECT_EQ(rows(c), 0u);
}

// The communicator shards each keep their own diagnosis; what is shown is the max_comms
// communicators seen most recently over all of them, in the metrics and the JSON alike.
TEST(CrossRankDiagnosis, ShowsTheMostRecentCommunicatorsOverAllShards) {
  CrossRankOptions o;
  o.diagnosis.max_comms = 3;
  CrossRankAnalysis x(o);
  for (int r = 0; r < 4; ++r) Hello(x, r);
  constexpr int kComms = 20;  // spread over the shards by hash
  for (int k = 0; k < kComms; ++k) {
    for (int r = 0; r < 4; ++r) {
      v1::Collective c = Analysis(r, 1, 1000 + k * 10, 1005 + k * 10, v1::COLLECTIVE_CAUSE_NORMAL);
      c.set_comm_hash(kCrossRankComm + static_cast<uint64_t>(k) * 0x100000000ULL);
      Send(x, r, c);
    }
  }
  ASSERT_EQ(x.instances_total(), static_cast<uint64_t>(kComms));
  const std::string json = DiagnosisJson(x.Diagnoses());
  std::vector<prometheus::MetricFamily> f;
  AddCrossRankFamilies(x.Snapshot(), &f);
  const prometheus::MetricFamily* info = FindFamily(f, "fabricscope_diagnosis_info");
  ASSERT_NE(info, nullptr);
  EXPECT_EQ(info->metric.size(), 3u);
  for (int k = 0; k < kComms; ++k) {
    const std::string label =
        common::CommLabel(kCrossRankComm + static_cast<uint64_t>(k) * 0x100000000ULL);
    const bool recent = k >= kComms - 3;
    EXPECT_EQ(json.find(absl::StrCat("\"comm\":\"", label, "\"")) != std::string::npos, recent)
        << label << "\n"
        << json;
    bool in_metrics = false;
    for (const auto& m : info->metric) {
      for (const auto& l : m.label)
        in_metrics = in_metrics || (l.name == "comm" && l.value == label);
    }
    EXPECT_EQ(in_metrics, recent) << label;
  }
}

}  // namespace
}  // namespace fabricscope::exporters

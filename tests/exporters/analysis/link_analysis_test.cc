#include "exporters/analysis/link_analysis.h"

#include <gtest/gtest.h>

#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "collectors/common/utilization_codec.h"
#include "exporters/exposition/link_render.h"
#include "exporters/heatmap/heatmap_svg.h"
#include "tests/common/agent_counter.h"
#include "tests/common/units.h"

namespace fabricscope::exporters {

using common::EncodeUtilization;
namespace {

constexpr int64_t kSec = 1'000'000'000;
constexpr int64_t kOffset = 1'700'000'000 * kSec;  // monotonic -> Unix

v1::Hello Hello(const std::string& node, int ports, uint64_t instance = 1) {
  v1::Hello h;
  h.set_node(node);
  h.set_instance_id(instance);
  for (int i = 0; i < ports; ++i) {
    v1::PortInfo* p = h.add_ports();
    p->set_device("mlx5_" + std::to_string(i));
    p->set_port(1);
    p->set_rdma(true);
    p->set_line_rate_bytes_per_second(1'000'000'000);
  }
  return h;
}

// A batch for window [w, w + 1 s): per port, `util(port, bucket)` at 1 ms buckets (NaN = no
// data) and `bytes[port]` transmitted.
template <typename F>
v1::Batch Window(uint64_t seq, int64_t w, int ports, F util, std::vector<uint64_t> bytes = {}) {
  v1::Batch b;
  b.set_seq(seq);
  b.set_unix_offset_ns(kOffset);
  b.set_window_start_ns(w);
  b.set_window_end_ns(w + kSec);
  for (int p = 0; p < ports; ++p) {
    v1::UtilizationSeries* s = b.add_utilization_series();
    s->set_port_index(static_cast<uint32_t>(p));
    s->set_start_ns(w);
    s->set_bucket_ns(kMs);
    for (int k = 0; k < 1000; ++k) {
      s->mutable_transmit()->push_back(static_cast<char>(EncodeUtilization(util(p, k))));
      s->mutable_receive()->push_back(static_cast<char>(EncodeUtilization(0.0)));
    }
    v1::PortWindow* pw = b.add_ports();
    pw->set_port_index(static_cast<uint32_t>(p));
    pw->mutable_transmit()->set_has_bytes(true);
    pw->mutable_receive()->set_has_bytes(true);
    pw->mutable_transmit()->set_bytes(bytes.empty() ? 1000 : bytes[static_cast<size_t>(p)]);
  }
  return b;
}

TEST(LinkAnalysis, LinksHeatmapPutsABurstInTheRightLinkAndTimeCells) {
  LinkAnalysis a;
  a.OnHello(Hello("n1", 2));
  // Port 1 bursts at line rate for buckets 300-304 of the second window.
  a.OnBatch("n1", Window(1, 10 * kSec, 2, [](int, int) { return 0.1; }));
  a.OnBatch("n1", Window(2, 11 * kSec, 2,
                         [](int p, int k) { return p == 1 && k >= 300 && k < 305 ? 1.0 : 0.1; }));
  LinkAnalysis::LinkQuery q;
  q.seconds = 2;
  q.direction = "transmit";
  const HeatmapModel m = a.LinksHeatmap(q);
  ASSERT_EQ(m.rows.size(), 2u);
  EXPECT_EQ(m.rows[0], "n1/mlx5_0:1 tx");
  EXPECT_EQ(m.rows[1], "n1/mlx5_1:1 tx");
  EXPECT_EQ(m.cols, 2000u);
  EXPECT_EQ(m.bucket_ns, kMs);
  EXPECT_EQ(m.start_unix_ns, kOffset + 10 * kSec);
  for (size_t c = 0; c < m.cols; ++c) {
    const bool hot = c >= 1300 && c < 1305;
    EXPECT_FLOAT_EQ(m.at(1, c), hot ? 1.0f : 0.1f) << c;
    EXPECT_FLOAT_EQ(m.at(0, c), 0.1f) << c;
  }
  // 10 ms buckets: the maximum of each, so the 5 ms burst fills column 130.
  q.bucket_ns = 10 * kMs;
  const HeatmapModel coarse = a.LinksHeatmap(q);
  EXPECT_EQ(coarse.cols, 200u);
  EXPECT_FLOAT_EQ(coarse.at(1, 130), 1.0f);
  EXPECT_FLOAT_EQ(coarse.at(1, 129), 0.1f);
  // from/to select a range; buckets outside the history are "no data".
  LinkAnalysis::LinkQuery r;
  r.from_unix_ns = kOffset + 11 * kSec + 295 * kMs;
  r.to_unix_ns = kOffset + 11 * kSec + 310 * kMs;
  r.node = "n1";
  const HeatmapModel range = a.LinksHeatmap(r);
  ASSERT_EQ(range.rows.size(), 4u);  // both directions
  EXPECT_EQ(range.cols, 15u);
  EXPECT_FLOAT_EQ(range.at(2, 5), 1.0f);  // mlx5_1 tx, bucket 300
  EXPECT_FLOAT_EQ(range.at(3, 5), 0.0f);  // mlx5_1 rx
  r.node = "other";
  EXPECT_TRUE(a.LinksHeatmap(r).rows.empty());
  EXPECT_EQ(a.LinksHeatmap(r).note,
            "no node named \"other\" has sent link utilization (1 node has)");
  // A span of ~285 years (from=1&to=9e9 over HTTP): the work is bounded by the history held,
  // not by the span asked for (it looped span / 1 ms times per row under the lock), and the
  // held burst is still in its (widened) cell.
  LinkAnalysis::LinkQuery huge;
  huge.from_unix_ns = 1'000'000'000;
  huge.to_unix_ns = 9'000'000'000'000'000'000;
  huge.direction = "transmit";
  const HeatmapModel wide = a.LinksHeatmap(huge);
  ASSERT_EQ(wide.rows.size(), 2u);
  float hottest = 0;
  for (size_t c = 0; c < wide.cols; ++c) {
    if (!std::isnan(wide.at(1, c))) hottest = std::max(hottest, wide.at(1, c));
  }
  EXPECT_FLOAT_EQ(hottest, 1.0f);
}

TEST(LinkAnalysis, HistoryIsBoundedAndTheCellCapWidensBuckets) {
  LinkAnalysisOptions o;
  o.history_seconds = 1;
  o.max_cells = 500;
  LinkAnalysis a(o);
  a.OnHello(Hello("n1", 1));
  a.OnBatch("n1", Window(1, 10 * kSec, 1, [](int, int k) { return k == 10 ? 0.9 : 0.2; }));
  a.OnBatch("n1", Window(2, 11 * kSec, 1, [](int, int) { return 0.4; }));
  EXPECT_EQ(a.series_bytes(), 2 * 1000 + 2000 * sizeof(double));  // 2 directions + period ring
  LinkAnalysis::LinkQuery q;
  q.seconds = 2;
  q.direction = "transmit";
  const HeatmapModel m = a.LinksHeatmap(q);
  EXPECT_LE(m.rows.size() * m.cols, 500u);
  EXPECT_EQ(m.bucket_ns, 4 * kMs);  // 2000 columns -> 4 ms each
  EXPECT_NE(m.note.find("widened"), std::string::npos);
  // The first window left the 1 s history: no data there, the second is 0.4.
  EXPECT_TRUE(std::isnan(m.at(0, 2)));
  EXPECT_FLOAT_EQ(m.at(0, 499), 0.4f);
}

TEST(LinkAnalysis, ImbalanceIsTheCoefficientOfVariationOfPortBytes) {
  LinkAnalysis a;
  a.OnHello(Hello("n1", 4));
  a.OnBatch("n1", Window(1, 10 * kSec, 4, [](int, int) { return 0.1; }, {100, 100, 100, 500}));
  std::vector<prometheus::MetricFamily> f;
  AddLinkFamilies(a.Snapshot(), &f);
  bool found = false;
  for (const auto& fam : f) {
    if (fam.name != "fabricscope_traffic_imbalance_ratio") continue;
    for (const auto& m : fam.metric) {
      ASSERT_EQ(m.label.size(), 3u);
      EXPECT_EQ(m.label[0].name, "scope");
      EXPECT_EQ(m.label[0].value, "rails");
      if (m.label[2].value == "transmit") {
        // mean 200, population std sqrt((3 x 100^2 + 300^2) / 4) = 173.2 -> 0.866.
        EXPECT_NEAR(m.gauge.value, std::sqrt(3.0) / 2, 1e-9);
        found = true;
      }
    }
  }
  EXPECT_TRUE(found);
}

TEST(LinkAnalysis, StepPeriodFromTrafficAndAnomaliesAgainstTheBaseline) {
  LinkAnalysisOptions o;
  o.period_every_batches = 1;
  o.min_baseline_windows = 10;
  LinkAnalysis a(o);
  a.OnHello(Hello("n1", 1));
  // A 250 ms step: 40 ms of line rate, then 0.05.
  auto step = [](int, int k) { return k % 250 < 40 ? 1.0 : 0.05; };
  for (int i = 0; i < 15; ++i) {
    a.OnBatch("n1", Window(static_cast<uint64_t>(i + 1), (10 + i) * kSec, 1, step,
                           {static_cast<uint64_t>(1000 + i % 3)}));
  }
  const auto p = a.StepPeriod("n1");
  ASSERT_TRUE(p.has_value());
  EXPECT_NEAR(p->period_seconds, 0.25, 0.005);
  EXPECT_EQ(AnomaliesJson(a.Anomalies("")), "{\"anomalies\":[]}");
  // A window with 50x the bytes departs from the baseline.
  a.OnBatch("n1", Window(16, 25 * kSec, 1, step, {50'000}));
  const std::string json = AnomaliesJson(a.Anomalies("n1"));
  EXPECT_NE(json.find("\"kind\":\"bytes_high\""), std::string::npos) << json;
  std::vector<prometheus::MetricFamily> f;
  AddLinkFamilies(a.Snapshot(), &f);
  double period = 0, events = 0;
  for (const auto& fam : f) {
    if (fam.name == "fabricscope_step_period_seconds") period = fam.metric[0].gauge.value;
    if (fam.name == "fabricscope_anomaly_events_total") events = fam.metric[0].counter.value;
  }
  EXPECT_NEAR(period, 0.25, 0.005);
  EXPECT_EQ(events, 1);
}

TEST(LinkAnalysis, LossConcentratedOnOneLinkIsSystematic) {
  LinkAnalysis a;
  a.OnHello(Hello("n1", 4));
  for (int i = 0; i < 5; ++i) {
    v1::Batch b =
        Window(static_cast<uint64_t>(i + 1), (10 + i) * kSec, 4, [](int, int) { return 0.1; });
    for (int p = 0; p < 4; ++p) {
      testing::AddAgentCounter(b.mutable_ports(p), "hw_counters", "out_of_sequence",
                               p == 2 ? 20 : 1);
    }
    a.OnBatch("n1", b);
  }
  const std::string json = LossPatternsJson(a.Patterns());
  EXPECT_NE(json.find("\"classification\":\"systematic\""), std::string::npos) << json;
  EXPECT_NE(json.find("link n1/mlx5_2:1 holds 100 of 115"), std::string::npos) << json;
  std::vector<prometheus::MetricFamily> f;
  AddLinkFamilies(a.Snapshot(), &f);
  for (const auto& fam : f) {
    if (fam.name != "fabricscope_loss_concentration_ratio") continue;
    ASSERT_EQ(fam.metric.size(), 4u);
    EXPECT_NEAR(fam.metric[2].gauge.value, 100.0 / 115, 1e-9);
    EXPECT_NEAR(fam.metric[0].gauge.value, 5.0 / 115, 1e-9);
  }
  // Spread evenly: random.
  LinkAnalysis even;
  even.OnHello(Hello("n1", 4));
  v1::Batch b = Window(1, 10 * kSec, 4, [](int, int) { return 0.1; });
  for (int p = 0; p < 4; ++p) {
    v1::ErrorCounter* e = b.mutable_ports(p)->add_errors();
    e->set_kind("port_rcv_errors");
    e->set_delta(10);
  }
  even.OnBatch("n1", b);
  EXPECT_NE(LossPatternsJson(even.Patterns()).find("\"classification\":\"random\""),
            std::string::npos);
}

// Window i (seq i + 1, starting at 10 + i s) of `ports` ports at a flat 10% utilization.
v1::Batch FlatWindow(int i, int ports) {
  return Window(static_cast<uint64_t>(i + 1), (10 + i) * kSec, ports, [](int, int) { return 0.1; });
}

void AddCounter(v1::Batch* b, int port, const std::string& name, uint64_t delta) {
  testing::AddAgentCounter(b->mutable_ports(port), "ethtool", name, delta);
}

// The "reasons" array of a LossPatternsJson() answer, as text.
std::string Reasons(const std::string& json) {
  const size_t from = json.find("\"reasons\":[");
  if (from == std::string::npos) return "<no reasons>";
  return json.substr(from, json.find(']', from) - from + 1);
}

TEST(LinkAnalysis, LossOnOnePriorityOverManyLinksIsSystematic) {
  // Two nodes x 4 ports, 5 windows. Every link discards the same on priority 3 (3 a window) and
  // priority 0 (1 a window): no link concentrates loss, priority 3 does. Pause counters and
  // malformed priority names are not priority-tagged loss (the malformed ones, named "discards",
  // still count as the link's loss events).
  constexpr int kPorts = 4, kWindows = 5, kLinks = 2 * kPorts;
  constexpr uint64_t kPrio3 = 3, kPrio0 = 1, kMalformed = 50;
  LinkAnalysis a;
  a.OnHello(Hello("n1", kPorts));
  a.OnHello(Hello("n2", kPorts, 2));
  for (int i = 0; i < kWindows; ++i) {
    for (const char* node : {"n1", "n2"}) {
      v1::Batch b = FlatWindow(i, kPorts);
      for (int p = 0; p < kPorts; ++p) {
        AddCounter(&b, p, "rx_prio3_discards", kPrio3);
        AddCounter(&b, p, "rx_prio0_buf_discard", kPrio0);
        AddCounter(&b, p, "rx_prio3_pause", 1000);
        AddCounter(&b, p, "rx_prio3_pause_duration", 5000);
        AddCounter(&b, p, "rx_prio9_discards", kMalformed);
        AddCounter(&b, p, "rx_prio_discards", kMalformed);
      }
      a.OnBatch(node, b);
    }
  }
  const uint64_t prio3 = kPrio3 * kWindows * kLinks, prio0 = kPrio0 * kWindows * kLinks;
  const uint64_t link_total = (kPrio3 + kPrio0 + 2 * kMalformed) * kWindows * kLinks;
  const std::string json = LossPatternsJson(a.Patterns());
  EXPECT_NE(json.find("\"classification\":\"systematic\""), std::string::npos) << json;
  EXPECT_EQ(Reasons(json), absl::StrCat("\"reasons\":[\"priority 3 holds ", prio3, " of ",
                                        prio3 + prio0, " priority-tagged loss events\"]"))
      << json;
  EXPECT_NE(json.find(absl::StrCat("\"total_loss_events\":", link_total)), std::string::npos)
      << json;
  EXPECT_NE(
      json.find(absl::StrFormat("\"total_priority_loss_events\":%d,\"priorities\":["
                                "{\"priority\":3,\"loss_events\":%d,\"share\":%.9g},"
                                "{\"priority\":0,\"loss_events\":%d,\"share\":%.9g}]",
                                prio3 + prio0, prio3, static_cast<double>(prio3) / (prio3 + prio0),
                                prio0, static_cast<double>(prio0) / (prio3 + prio0))),
      std::string::npos)
      << json;
  EXPECT_NE(json.find("one PFC priority"), std::string::npos) << json;
}

TEST(LinkAnalysis, PriorityLossOnOneLinkNamesTheLink) {
  LinkAnalysis a;
  a.OnHello(Hello("n1", 4));
  for (int i = 0; i < 5; ++i) {
    v1::Batch b = FlatWindow(i, 4);
    for (int p = 0; p < 4; ++p) AddCounter(&b, p, "rx_prio5_cong_discard", p == 1 ? 8 : 1);
    a.OnBatch("n1", b);
  }
  // Priority 5: 5 x (8 + 3 x 1) = 55 events, 40 of them on mlx5_1.
  const std::string json = LossPatternsJson(a.Patterns());
  EXPECT_NE(
      Reasons(json).find("\"priority 5 holds 55 of 55 priority-tagged loss events, 40 of them on "
                         "link n1/mlx5_1:1\""),
      std::string::npos)
      << json;
  EXPECT_NE(Reasons(json).find("\"link n1/mlx5_1:1 holds 40 of 55 loss events\""),
            std::string::npos)
      << json;
}

TEST(LinkAnalysis, LossSpreadOverPrioritiesAndLinksIsRandom) {
  LinkAnalysis a;
  a.OnHello(Hello("n1", 4));
  for (int i = 0; i < 3; ++i) {
    v1::Batch b = FlatWindow(i, 4);
    for (int p = 0; p < 4; ++p) {
      for (int q = 0; q < 8; ++q) AddCounter(&b, p, absl::StrCat("rx_prio", q, "_discards"), 2);
    }
    a.OnBatch("n1", b);
  }
  const std::string json = LossPatternsJson(a.Patterns());
  EXPECT_NE(json.find("\"classification\":\"random\""), std::string::npos) << json;
  EXPECT_EQ(Reasons(json), "\"reasons\":[]") << json;
  // 8 priorities x 3 windows x 4 ports x 2 = 192; each priority 24, an eighth.
  EXPECT_NE(json.find("\"total_priority_loss_events\":192"), std::string::npos) << json;
  for (int q = 0; q < 8; ++q) {
    EXPECT_NE(json.find(absl::StrCat("{\"priority\":", q, ",\"loss_events\":24,\"share\":0.125}")),
              std::string::npos)
        << q << " " << json;
  }
}

TEST(LinkAnalysis, PauseAndMalformedPriorityNamesAreNotPriorityLoss) {
  LinkAnalysis a;
  a.OnHello(Hello("n1", 2));
  for (int i = 0; i < 3; ++i) {
    v1::Batch b = FlatWindow(i, 2);
    for (int p = 0; p < 2; ++p) {
      AddCounter(&b, p, "rx_prio3_pause", 500);
      AddCounter(&b, p, "tx_prio3_pause_duration", 500);
      AddCounter(&b, p, "rx_prio3_packets", 500);
      AddCounter(&b, p, "rx_prio3_marked", 500);
      AddCounter(&b, p, "rx_prio9_discards", 7);
      AddCounter(&b, p, "rx_prio_discards", 7);
      AddCounter(&b, p, "rx_prio33_discards", 7);
    }
    a.OnBatch("n1", b);
  }
  const std::string json = LossPatternsJson(a.Patterns());
  EXPECT_NE(json.find("\"total_priority_loss_events\":0,\"priorities\":[]"), std::string::npos)
      << json;
  // The malformed "discards" counters are still the links' loss: 3 windows x 2 ports x 21.
  EXPECT_NE(json.find("\"total_loss_events\":126"), std::string::npos) << json;
  EXPECT_NE(json.find("\"classification\":\"random\""), std::string::npos) << json;
}

TEST(LinkAnalysis, PriorityLossCountsOnlyTheLastLossWindows) {
  LinkAnalysisOptions o;
  o.loss_windows = 3;
  LinkAnalysis a(o);
  a.OnHello(Hello("n1", 2));
  // Windows 1-2: priority 3; windows 3-5 (the last 3): priority 6.
  for (int i = 0; i < 5; ++i) {
    v1::Batch b = FlatWindow(i, 2);
    AddCounter(&b, 0, i < 2 ? "rx_prio3_discards" : "rx_prio6_discards", 10);
    a.OnBatch("n1", b);
  }
  const std::string json = LossPatternsJson(a.Patterns());
  EXPECT_NE(json.find("\"total_priority_loss_events\":30,\"priorities\":[{\"priority\":6,"),
            std::string::npos)
      << json;
  EXPECT_EQ(json.find("\"priority\":3"), std::string::npos) << json;
}

// No capture yet: an empty map, computed from now (it was INT64_MIN - 10 s, a signed overflow
// that UBSan reported through tests/fuzz/http_query_fuzz.cc).
TEST(LinkAnalysis, NodesHeatmapWithoutCapturesIsEmpty) {
  LinkAnalysis a;
  const HeatmapModel m = a.NodesHeatmap(10);
  EXPECT_TRUE(m.rows.empty());
  EXPECT_TRUE(m.col_labels.empty());
  // And it says why, and what turns capture on (drawn in the SVG's "no data yet" frame).
  EXPECT_NE(m.note.find("no captured flows in the last 10 s"), std::string::npos) << m.note;
  EXPECT_NE(m.note.find("--capture=IFACE"), std::string::npos) << m.note;
}

// The node-level `tcp` pseudo-port's retransmissions (RetransSegs of /proc/net/snmp: every
// interface and loopback together) are the node's, not a link's: they are listed in node_wide
// and take no part in the links' concentration, which on a machine with loopback traffic
// only once said "most on vm/tcp:0" (issue 35).
TEST(LinkAnalysis, TheTcpPseudoPortIsNodeWideLossNotALink) {
  LinkAnalysis a;
  v1::Hello h = Hello("vm", 2);
  v1::PortInfo* tcp = h.add_ports();
  tcp->set_device("tcp");
  tcp->set_node_level(true);
  a.OnHello(h);
  for (int i = 0; i < 5; ++i) {
    v1::Batch b = FlatWindow(i, 2);
    v1::PortWindow* pw = b.add_ports();
    pw->set_port_index(2);
    testing::AddAgentCounter(pw, "tcp", "RetransSegs", 30);
    testing::AddAgentCounter(b.mutable_ports(1), "hw_counters", "out_of_sequence", 1);
    a.OnBatch("vm", b);
  }
  const LossPatterns p = a.Patterns();
  ASSERT_EQ(p.links.size(), 1u);
  EXPECT_EQ(p.links[0].device, "mlx5_1");
  EXPECT_EQ(p.total, 5u);  // the link's five, without the 150 retransmitted segments
  EXPECT_STREQ(p.classification, "insufficient_data");
  ASSERT_EQ(p.node_wide.size(), 1u);
  EXPECT_EQ(p.node_wide[0].node, "vm");
  EXPECT_EQ(p.node_wide[0].device, "tcp");
  EXPECT_EQ(p.node_wide[0].events, 150u);
  EXPECT_NE(LossPatternsJson(p).find(
                "\"node_wide\":[{\"node\":\"vm\",\"device\":\"tcp\",\"loss_events\":150}]"),
            std::string::npos)
      << LossPatternsJson(p);
}

TEST(LinkAnalysis, NodesHeatmapMapsAddressesToNodesAndCountsAPairOnce) {
  LinkAnalysis a;
  v1::Hello h1 = Hello("n1", 1), h2 = Hello("n2", 1, 2);
  h1.add_addresses("10.0.0.1");
  h2.add_addresses("10.0.0.2");
  a.OnHello(h1);
  a.OnHello(h2);
  auto with_peers = [](uint64_t seq,
                       std::vector<std::tuple<const char*, const char*, uint64_t>> peers) {
    v1::Batch b = Window(seq, 10 * kSec, 1, [](int, int) { return 0.1; });
    b.mutable_capture()->set_interface("eth0");
    for (const auto& [s, d, n] : peers) {
      v1::PeerBytes* pb = b.mutable_capture()->add_top_peers();
      pb->set_src(s);
      pb->set_dst(d);
      pb->set_bytes(n);
    }
    return b;
  };
  // Both ends see n1 -> n2; n2 also talks to an unknown IP.
  a.OnBatch("n1", with_peers(1, {{"10.0.0.1", "10.0.0.2", 5000}}));
  a.OnBatch("n2", with_peers(1, {{"10.0.0.1", "10.0.0.2", 4900}, {"10.0.0.2", "192.0.2.9", 70}}));
  const HeatmapModel m = a.NodesHeatmap(10);
  ASSERT_EQ(m.rows, (std::vector<std::string>{"192.0.2.9", "n1", "n2"}));
  EXPECT_EQ(m.col_labels, m.rows);
  EXPECT_FLOAT_EQ(m.at(1, 2), 5000);  // n1 -> n2: the larger report, not the sum
  EXPECT_FLOAT_EQ(m.at(2, 0), 70);
  EXPECT_FLOAT_EQ(m.at(2, 1), 0);
  EXPECT_DOUBLE_EQ(m.scale_max, 5000);
  // A job's nodes (?job=): pairs with an end outside them leave.
  const HeatmapModel job = a.NodesHeatmap(10, {"n1", "n2"});
  ASSERT_EQ(job.rows, (std::vector<std::string>{"n1", "n2"}));
  EXPECT_FLOAT_EQ(job.at(0, 1), 5000);
  EXPECT_TRUE(a.NodesHeatmap(10, {"n2"}).rows.empty());
}

// No port with utilization data: the window ends now (not at the epoch), one column, and a note
// that says why the plot is empty.
TEST(LinkAnalysis, AnEmptyLinksHeatmapEndsNowAndSaysWhy) {
  LinkAnalysis a;
  a.OnHello(Hello("n1", 2));
  const int64_t before = absl::ToUnixNanos(absl::Now());
  LinkAnalysis::LinkQuery q;
  q.seconds = 10;
  const HeatmapModel m = a.LinksHeatmap(q);
  const int64_t after = absl::ToUnixNanos(absl::Now());
  EXPECT_TRUE(m.rows.empty());
  EXPECT_EQ(m.cols, 1u);
  EXPECT_GE(m.start_unix_ns, before - 10 * kSec - kMs);
  EXPECT_LE(m.start_unix_ns, after - 10 * kSec);
  EXPECT_NE(m.note.find("line rate"), std::string::npos) << m.note;
  EXPECT_EQ(m.title, "Link utilization, 10 s (no data)");  // not "at 10000 ms" (issue 35)
  const std::string svg = RenderHeatmapSvg(m);
  EXPECT_NE(svg.find("line rate"), std::string::npos);
}

TEST(LinkAnalysis, FlightRecordingsAndRecorderBytesAreKept) {
  LinkAnalysis a;
  a.OnHello(Hello("n1", 2));
  v1::Batch b = Window(1, 10 * kSec, 2, [](int, int) { return 0.1; });
  b.mutable_flight_recorder()->set_bytes(123456);
  v1::FlightRecording* r = b.add_flight_recordings();
  r->set_port_index(1);
  r->set_reason("burst_with_loss");
  r->set_from_ns(10 * kSec);
  r->set_to_ns(10 * kSec + 5 * kMs);
  r->add_time_ns(10 * kSec + kMs);
  r->add_interval_ns(kMs);
  r->add_transmit_bytes(999);
  r->add_receive_bytes(1);
  r->add_transmit_utilization(0.999f);
  r->add_receive_utilization(0.001f);
  v1::FlightRecording* bad = b.add_flight_recordings();
  bad->set_port_index(9);  // no such port: skipped
  a.OnBatch("n1", b);
  const std::string json = FlightRecordingsJson(a.FlightRecordings(""));
  EXPECT_NE(json.find("\"device\":\"mlx5_1\""), std::string::npos) << json;
  EXPECT_NE(json.find("\"transmit_bytes\":999"), std::string::npos) << json;
  EXPECT_EQ(json.find("\"port\":9"), std::string::npos);
  // Times keep their microseconds: a unix time of ~1.7e9 s needs 16 significant digits.
  const int64_t sample_unix_ns = 10 * kSec + kMs + kOffset;
  const std::string want = absl::StrCat("\"time_unix_seconds\":", sample_unix_ns / kSec, ".",
                                        absl::StrFormat("%03d", (sample_unix_ns % kSec) / kMs));
  EXPECT_NE(json.find(want), std::string::npos) << want << "\n" << json;
  std::vector<prometheus::MetricFamily> f;
  AddLinkFamilies(a.Snapshot(), &f);
  bool found = false;
  for (const auto& fam : f) {
    if (fam.name == "fabricscope_flight_recorder_bytes") {
      EXPECT_EQ(fam.metric[0].gauge.value, 123456);
      found = true;
    }
  }
  EXPECT_TRUE(found);
}

TEST(LinkAnalysis, MalformedSeriesAreIgnored) {
  LinkAnalysis a;
  a.OnBatch("unknown", Window(1, 10 * kSec, 1, [](int, int) { return 0.5; }));  // no Hello
  a.OnHello(Hello("n1", 1));
  v1::Batch b = Window(1, 10 * kSec, 1, [](int, int) { return 0.5; });
  b.mutable_utilization_series(0)->set_port_index(7);
  v1::UtilizationSeries* zero = b.add_utilization_series();
  zero->set_port_index(0);
  zero->set_bucket_ns(0);
  zero->set_transmit("abc");
  a.OnBatch("n1", b);
  LinkAnalysis::LinkQuery q;
  EXPECT_TRUE(a.LinksHeatmap(q).rows.empty());
}

}  // namespace
}  // namespace fabricscope::exporters

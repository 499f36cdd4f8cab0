// The metric catalog (exporters/exposition/metric_catalog.inc) is the one declaration of every
// family: its names and label names follow Prometheus conventions, what ClusterState::Collect
// renders comes from it with only the labels it declares, and README's Metrics section documents
// exactly it.
#include "exporters/exposition/metric_catalog.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <iterator>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "exporters/exposition/cluster_render.h"
#include "exporters/exposition/cross_rank_render.h"
#include "exporters/exposition/fabric_render.h"
#include "exporters/exposition/link_render.h"
#include "exporters/exposition/metric_util.h"
#include "exporters/state/cluster_state.h"

namespace fabricscope::exporters {
namespace {

using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::SizeIs;

std::string Readme() {
  std::ifstream in(std::string(FABRICSCOPE_SOURCE_DIR) + "/exporters/README.md");
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// README's "## Metrics" section, up to the next "## ".
std::string MetricsSection() {
  const std::string readme = Readme();
  const size_t from = readme.find("\n## Metrics\n");
  if (from == std::string::npos) return "";
  const size_t to = readme.find("\n## ", from + 1);
  return readme.substr(from, to == std::string::npos ? std::string::npos : to - from);
}

TEST(MetricCatalog, NamesAreUniqueAndFollowPrometheusConventions) {
  std::set<std::string> names;
  const std::regex valid("fabricscope_[a-z0-9_]+");
  for (size_t i = 0; i < kMetricCount; ++i) {
    const MetricInfo& m = kMetricCatalog[i];
    const std::string name = m.name;
    EXPECT_EQ(static_cast<size_t>(m.id), i) << name;
    EXPECT_TRUE(names.insert(name).second) << "declared twice: " << name;
    EXPECT_TRUE(std::regex_match(name, valid)) << name;
    EXPECT_FALSE(std::string(m.help).empty()) << name;
    const bool total = name.size() > 6 && name.substr(name.size() - 6) == "_total";
    EXPECT_EQ(total, m.type == prometheus::MetricType::Counter)
        << name << ": _total is for counters, and every counter has it";
    for (const char* unit : {"_milliseconds", "_microseconds", "_kilobytes", "_megabytes",
                             "_percent", "_bits_per_second"}) {
      EXPECT_EQ(name.find(unit), std::string::npos) << name << ": use base units";
    }
    // The declared unit is the name's last word before _total, and a name that ends with a
    // unit declares it.
    const std::string base = total ? name.substr(0, name.size() - 6) : name;
    auto ends = [&](const std::string& suffix) {
      return base.size() > suffix.size() && base.substr(base.size() - suffix.size()) == suffix;
    };
    const std::string unit = UnitName(m.unit);
    if (!unit.empty()) {
      EXPECT_TRUE(ends("_" + unit)) << name << " declares unit " << unit;
    }
    for (MetricUnit u : {MetricUnit::kSeconds, MetricUnit::kBytes, MetricUnit::kRatio,
                         MetricUnit::kBytesPerSecond, MetricUnit::kPerSecond}) {
      if (ends(std::string("_") + UnitName(u))) {
        const bool finer = u == MetricUnit::kPerSecond && m.unit == MetricUnit::kBytesPerSecond;
        EXPECT_TRUE(m.unit == u || finer) << name << " ends with the unit " << UnitName(u);
      }
    }
  }
}

const MetricInfo* InfoByName(const std::string& name) {
  for (const MetricInfo& m : kMetricCatalog) {
    if (name == m.name) return &m;
  }
  return nullptr;
}

// Each entry's labels: names as Prometheus allows them, one space apart, each once, none the
// text format reserves (le: histogram buckets; quantile: summaries; __*: Prometheus' own) and
// none the scraper attaches (job, instance; the operator's namespace, pod, ...).
TEST(MetricCatalog, LabelNamesAreWellFormed) {
  const std::regex valid("[a-z_][a-z0-9_]*");
  for (const MetricInfo& m : kMetricCatalog) {
    const std::string labels = m.labels;
    if (labels.empty()) continue;
    EXPECT_NE(labels.front(), ' ') << m.name << ": \"" << labels << "\"";
    EXPECT_NE(labels.back(), ' ') << m.name << ": \"" << labels << "\"";
    EXPECT_EQ(labels.find("  "), std::string::npos) << m.name << ": \"" << labels << "\"";
    std::set<std::string> seen;
    for (const std::string& l : std::vector<std::string>(absl::StrSplit(labels, ' '))) {
      if (l.empty()) continue;  // a stray space, reported above
      EXPECT_TRUE(std::regex_match(l, valid)) << m.name << ": label \"" << l << "\"";
      EXPECT_NE(l.rfind("__", 0), 0u) << m.name << ": label \"" << l << "\" is reserved";
      EXPECT_NE(l, "le") << m.name << ": le is the histogram bucket's label";
      EXPECT_NE(l, "quantile") << m.name << ": quantile is the summary's label";
      // Labels the scraper attaches itself: Prometheus sets job and instance on every series
      // (configuration docs, scrape_config), the Prometheus Operator's ServiceMonitor and
      // PodMonitor add namespace, pod, container, service and endpoint. A scraped label of the
      // same name becomes exported_<name> unless the scrape sets honor_labels, and with it
      // overrides the target's: either way a query on it means something else than it says.
      for (const char* target :
           {"job", "instance", "namespace", "pod", "container", "service", "endpoint"}) {
        EXPECT_NE(l, target) << m.name << ": " << target
                             << " is a label Prometheus or its operator attaches to every series";
      }
      EXPECT_TRUE(seen.insert(l).second) << m.name << ": label \"" << l << "\" declared twice";
    }
  }
}

// Nothing Collect() renders bypasses the catalog, and each family keeps its catalog type.
TEST(MetricCatalog, EveryRenderedFamilyIsInTheCatalogWithItsType) {
  ClusterState s;
  v1::Hello h;
  h.set_node("n1");
  h.set_instance_id(7);
  h.set_resume_seq(1);
  h.add_ports()->set_device("mlx5_0");
  ASSERT_TRUE(s.OnHello(h).ok());
  v1::Batch b;
  b.set_seq(1);
  b.set_window_end_ns(1'000'000'000);
  v1::PortWindow* w = b.add_ports();
  w->set_port_index(0);
  w->mutable_transmit()->set_has_bytes(true);
  b.mutable_agent()->set_has_spool(true);
  ASSERT_TRUE(s.OnBatch("n1", 7, b).ok());
  size_t families = 0;
  const std::vector<prometheus::MetricFamily> collected = ClusterFamilies(s);
  EXPECT_THAT(UndeclaredLabels(collected), IsEmpty());
  for (const prometheus::MetricFamily& f : collected) {
    bool found = false;
    for (const MetricInfo& m : kMetricCatalog) {
      if (f.name == m.name) {
        found = true;
        EXPECT_EQ(f.type, m.type) << f.name;
        EXPECT_EQ(f.help, m.help) << f.name;
      }
    }
    EXPECT_TRUE(found) << f.name
                       << " is rendered but not in exporters/exposition/metric_catalog.inc";
    ++families;
  }
  EXPECT_GE(families, 20u);  // a node with one port, an agent and the aggregator itself
}

// A histogram of one bound and two buckets, as the message checks accept it.
void FillHistogram(v1::Histogram* h, double bound) {
  h->add_upper_bounds(bound);
  h->add_bucket_counts(1);
  h->add_bucket_counts(1);
  h->set_count(2);
  h->set_sum(bound * 1.5);
}

// An RDMA port's window with everything a port can report: link, counters by group, derived
// signals, errors, saturated counters, resets and both directions' utilization.
void FillRdmaPort(uint32_t index, uint64_t seq, v1::PortWindow* w) {
  w->set_port_index(index);
  w->set_utilization_valid(true);
  w->set_unavailable_reads(1);
  (*w->mutable_counter_resets_by_group())["hw_counters"] = 1;
  w->add_saturated_counters("port_xmit_data");
  w->mutable_neighbor()->set_source("lldp");
  w->mutable_neighbor()->set_chassis_name("leaf-1");
  v1::LinkState* link = w->mutable_link();
  link->set_state(4);
  link->set_phys_state(5);
  link->set_rate_bytes_per_second(50'000'000'000);
  link->set_flaps_total(1);
  for (v1::DirectionWindow* d : {w->mutable_transmit(), w->mutable_receive()}) {
    d->set_has_bytes(true);
    d->set_has_packets(true);
    d->set_bytes(1000 * (index + 1));
    d->set_bytes_total(1000 * (index + 1) * seq);
    d->set_packets_total(10 * seq);
    d->set_mean_utilization(0.25);
    d->set_peak_utilization(0.9);
    d->set_microbursts_total(seq);
    FillHistogram(d->mutable_sample_utilization(), 0.5);
    FillHistogram(d->mutable_microburst_duration_seconds(), 0.001);
  }
  v1::ErrorCounter* e = w->add_errors();
  e->set_kind("symbol_error");
  e->set_total(seq);
  e->set_delta(1);
  e->set_saturated(true);
  for (const char* group : {"hw_counters", "ethtool"}) {
    v1::CounterValue* c = w->add_counters();
    c->set_group(group);
    c->set_name(std::string(group) == "ethtool" ? "rx_prio3_pause" : "np_cnp_sent");
    c->set_total(seq);
  }
  v1::DerivedSignals* d = w->mutable_derived();
  d->set_loss_ratio(0.01);
  d->set_retransmits_total(seq);
  d->set_retransmits_per_second(1);
  d->set_out_of_sequence_total(seq);
  d->set_cnp_sent_total(seq);
  d->set_cnp_sent_per_second(1);
  d->set_cnp_handled_total(seq);
  d->set_cnp_handled_per_second(1);
  d->set_ecn_marked_total(seq);
  d->set_ecn_marked_ratio(0.1);
  v1::PriorityPause* pause = d->add_pause();
  pause->set_priority(3);
  pause->set_direction(v1::DIRECTION_RECEIVE);
  pause->set_seconds_total(0.5);
  pause->set_time_ratio(0.05);
  v1::Discard* discard = d->add_discards();
  discard->set_reason("rx_discards_phy");
  discard->set_total(seq);
  d->set_bit_error_ratio(1e-12);
  d->set_transmit_wait_seconds_total(0.25);
  d->set_transmit_wait_ratio(0.02);
}

// The node's TCP counters (a node_level port).
void FillTcpPort(uint32_t index, uint64_t seq, v1::PortWindow* w) {
  w->set_port_index(index);
  v1::CounterValue* c = w->add_counters();
  c->set_group("tcp");
  c->set_name("RetransSegs");
  c->set_total(seq);
  w->mutable_derived()->set_tcp_retransmitted_segments_total(seq);
  w->mutable_derived()->set_tcp_sent_segments_total(100 * seq);
  w->mutable_derived()->set_tcp_retransmitted_ratio(0.01);
}

// The agent's own statistics, its spool, and a packet capture.
void FillAgentAndCapture(uint64_t seq, v1::Batch* b) {
  v1::AgentStats* a = b->mutable_agent();
  FillHistogram(a->mutable_sample_interval_seconds(), 0.001);
  (*a->mutable_overruns_by_sampler())["fast"] = 1;
  (*a->mutable_overruns_by_sampler())["slow"] = 2;
  v1::GroupResolution* r = a->add_resolutions();
  r->set_group("hw_counters");
  r->set_effective_resolution_seconds(0.1);
  v1::CounterReadCost* cost = a->add_read_costs();
  cost->set_port_index(0);
  cost->set_counter("port_xmit_data");
  cost->set_mean_seconds(1e-6);
  a->set_has_spool(true);
  a->set_spool_bytes(4096);
  (*a->mutable_spool_dropped_batches_total())["full"] = seq;
  v1::CaptureWindow* c = b->mutable_capture();
  c->set_interface("eth0");
  c->set_frames_total(100 * seq);
  for (const char* kind : {"nak_sequence_error", "rnr_nak", "nak_other", "psn_gap", "go_back_n"}) {
    (*c->mutable_events_total())[kind] = seq;
  }
  v1::PeerBytes* peer = c->add_top_peers();
  peer->set_src("10.0.0.1");
  peer->set_dst("10.0.0.2");
  peer->set_bytes(1000);
  b->mutable_flight_recorder()->set_bytes(1 << 20);
  b->mutable_collective_analysis()->set_network_share_ratio(0.4);
  b->mutable_collective_analysis()->set_share_seconds(1);
}

// The GPU window: ingest counters, collective and kernel totals, and rank pairs whose bytes grow
// unevenly (rank 1 sends 3x rank 0) so that the second batch yields a rank imbalance.
void FillGpu(uint64_t seq, v1::Batch* b) {
  constexpr uint64_t kComm = 0xc0ffee0012345678;
  v1::GpuWindow* g = b->mutable_gpu();
  v1::GpuIngestStats* in = g->mutable_ingest();
  in->set_connections(2);
  in->set_datagrams_total(10 * seq);
  (*in->mutable_dropped_records_total())["nccl"] = seq;
  (*in->mutable_dropped_datagrams_total())["truncated"] = seq;
  (*in->mutable_rejected_connections_total())["uid"] = seq;
  in->set_repaired_string_bytes_total(3);
  v1::CollectiveTotals* t = g->add_collective_totals();
  t->set_comm_hash(kComm);
  t->set_func("AllReduce");
  t->set_count(10 * seq);
  t->set_bus_bytes_total(1000 * seq);
  FillHistogram(t->mutable_duration_seconds(), 0.001);
  t->set_window_count(1);
  t->set_window_busbw_bytes_per_second(4e9);
  t->set_window_seconds(0.5);
  for (uint64_t n : {0, 2, 7, 1, 0}) t->add_count_by_timing_source(n * seq);
  v1::KernelTotals* k = g->add_kernel_totals();
  k->set_device(0);
  k->set_kernels_total(5 * seq);
  k->set_kernel_seconds_total(0.01 * static_cast<double>(seq));
  for (int32_t rank : {0, 1}) {
    v1::RankPairBytes* p = g->add_rank_pairs();
    p->set_comm_hash(kComm);
    p->set_src_rank(rank);
    p->set_dst_rank(1 - rank);
    p->set_bytes_total(1000 * (1 + 2 * static_cast<uint64_t>(rank)) * seq);
  }
}

// A batch of the rich node: two RDMA ports, the TCP counters, a microburst, agent, capture, GPU.
v1::Batch RichBatch(uint64_t seq) {
  v1::Batch b;
  b.set_seq(seq);
  b.set_window_end_ns(static_cast<int64_t>(seq) * 1'000'000'000);
  b.set_unix_offset_ns(1'700'000'000'000'000'000);
  FillRdmaPort(0, seq, b.add_ports());
  FillRdmaPort(1, seq, b.add_ports());
  FillTcpPort(2, seq, b.add_ports());
  v1::Microburst* m = b.add_microbursts();
  m->set_port_index(0);
  m->set_direction(v1::DIRECTION_TRANSMIT);
  m->set_start_ns(static_cast<int64_t>(seq) * 1'000'000'000 - 500'000'000);
  m->set_duration_ns(250'000);
  m->set_peak_utilization(1.0);
  FillAgentAndCapture(seq, &b);
  FillGpu(seq, &b);
  return b;
}

// Rank `rank` of a two-rank all-reduce, instance `seq`: rank 1 starts 20 ms late, so that the
// aggregator matches every instance across both nodes and names a straggler.
v1::Collective AnalysedCollective(int32_t rank, uint64_t seq) {
  v1::Collective c;
  c.set_comm_hash(0xfeed0000beef0001);
  c.set_rank(rank);
  c.set_nranks(2);
  c.set_func("AllReduce");
  c.set_seq(seq);
  c.set_bytes(1 << 20);
  const int64_t start = 100'000'000 + static_cast<int64_t>(seq) * 50'000'000;
  c.set_start_ns(start + (rank == 1 ? 20'000'000 : 0));
  c.set_end_ns(start + 40'000'000);
  v1::CollectiveAnalysis* a = c.mutable_analysis();
  a->set_cause(rank == 1 ? v1::COLLECTIVE_CAUSE_NORMAL : v1::COLLECTIVE_CAUSE_WAITING_ON_PEERS);
  a->set_port_index(0);
  v1::PortActivity* pa = a->add_ports();
  pa->set_port_index(0);
  pa->set_samples(40);
  pa->set_microburst_seconds(0.001);
  return c;
}

// A node reporting about everything an agent can (two RDMA ports, TCP, capture, spool, GPU):
// every label any of its families carries is one the catalog declares for that family.
TEST(MetricCatalog, EveryLabelARichNodeRendersIsDeclared) {
  ClusterState::Options options;
  options.metrics = common::MetricProfile::kFull;  // every family, the opt-in ones too
  ClusterState s(options);
  v1::Hello h;
  h.set_node("n1");
  h.set_instance_id(7);
  h.set_resume_seq(1);
  h.set_agent_version("test");
  h.set_boot_id("boot");
  for (const char* device : {"mlx5_0", "mlx5_1"}) {
    v1::PortInfo* p = h.add_ports();
    p->set_device(device);
    p->set_port(1);
    p->set_rdma(true);
    p->set_line_rate_bytes_per_second(50'000'000'000);
  }
  v1::PortInfo* tcp = h.add_ports();
  tcp->set_device("tcp");
  tcp->set_node_level(true);
  ASSERT_TRUE(s.OnHello(h).ok());
  for (uint64_t seq : {1, 2}) ASSERT_TRUE(s.OnBatch("n1", 7, RichBatch(seq)).ok());
  // A second node holds rank 1 of a communicator whose rank 0 is on n1.
  h.set_node("n2");
  h.set_instance_id(8);
  ASSERT_TRUE(s.OnHello(h).ok());
  v1::Batch ranks[2];
  for (uint64_t seq = 0; seq < 40; ++seq) {
    for (int32_t r : {0, 1}) *ranks[r].add_collectives() = AnalysedCollective(r, seq);
  }
  ranks[0].set_seq(3);
  ranks[1].set_seq(2);
  for (v1::Batch& b : ranks) b.set_unix_offset_ns(1'700'000'000'000'000'000);
  ASSERT_TRUE(s.OnBatch("n1", 7, ranks[0]).ok());
  ASSERT_TRUE(s.OnBatch("n2", 8, ranks[1]).ok());
  const std::vector<prometheus::MetricFamily> collected = ClusterFamilies(s);
  EXPECT_THAT(UndeclaredLabels(collected), IsEmpty());
  std::set<std::string> rendered;
  for (const prometheus::MetricFamily& f : collected) rendered.insert(f.name);
  // The families whose labels go beyond node/device/port: each must be rendered for the check
  // to mean something.
  for (const char* name : {"fabricscope_port_pause_seconds_total",
                           "fabricscope_port_discards_total",
                           "fabricscope_port_hw_events_total",
                           "fabricscope_port_ethtool_stat_total",
                           "fabricscope_port_counter_saturated",
                           "fabricscope_port_neighbor_info",
                           "fabricscope_port_counter_resets_total",
                           "fabricscope_port_errors_saturated",
                           "fabricscope_port_sample_utilization_ratio",
                           "fabricscope_node_sample_utilization_ratio",
                           "fabricscope_tcp_events_total",
                           "fabricscope_flow_naks_total",
                           "fabricscope_flow_lost_packets_total",
                           "fabricscope_flow_retransmits_total",
                           "fabricscope_capture_dropped_packets_total",
                           "fabricscope_peer_bytes",
                           "fabricscope_agent_info",
                           "fabricscope_agent_sampler_overruns_total",
                           "fabricscope_agent_group_resolution_seconds",
                           "fabricscope_agent_read_cost_seconds",
                           "fabricscope_agent_spool_dropped_batches_total",
                           "fabricscope_traffic_imbalance_ratio",
                           "fabricscope_collective_duration_seconds",
                           "fabricscope_collective_timing_source_total",
                           "fabricscope_rank_pair_bytes_total",
                           "fabricscope_plugin_dropped_events_total",
                           "fabricscope_gpu_kernels_total",
                           "fabricscope_gpu_ingest_dropped_datagrams_total",
                           "fabricscope_collectives_by_cause_total",
                           "fabricscope_collective_network_share_ratio",
                           "fabricscope_straggler_score",
                           "fabricscope_port_microburst_overlap_ratio",
                           "fabricscope_diagnosis_info"}) {
    EXPECT_TRUE(rendered.count(name)) << name << " was not rendered";
  }
  // Each family comes from the area the catalog declares: the link and cross-rank analyses'
  // own Collect render only theirs, and ClusterState adds only port, GPU (with the ranks'
  // imbalance) and peer families.
  std::vector<prometheus::MetricFamily> links, cross_rank, fabric;
  AddLinkFamilies(s.links().Snapshot(), &links);
  AddFabricFamilies(s.Fabric(), &fabric);
  AddCrossRankFamilies(s.cross_rank().Snapshot(), &cross_rank);
  ASSERT_FALSE(links.empty());
  ASSERT_FALSE(cross_rank.empty());
  std::set<std::string> from_modules;
  auto expect_area = [&](const prometheus::MetricFamily& f, std::set<MetricArea> areas) {
    const MetricInfo* m = InfoByName(f.name);
    ASSERT_NE(m, nullptr) << f.name;
    EXPECT_TRUE(areas.count(m->area)) << f.name << " has area " << static_cast<int>(m->area);
  };
  for (const auto& f : links) {
    expect_area(f, {MetricArea::kLinks, MetricArea::kImbalance});
    from_modules.insert(f.name);
  }
  for (const auto& f : cross_rank) {
    expect_area(f, {MetricArea::kCrossRank, MetricArea::kDiagnosis});
    from_modules.insert(f.name);
  }
  for (const auto& f : fabric) {
    expect_area(f, {MetricArea::kFabric});
    from_modules.insert(f.name);
  }
  size_t own = 0;
  for (const auto& f : collected) {
    if (from_modules.count(f.name)) continue;
    ++own;
    expect_area(f,
                {MetricArea::kPorts, MetricArea::kGpu, MetricArea::kPeers, MetricArea::kImbalance});
  }
  EXPECT_GT(own, 40u);
}

// The check can fail: a label the family does not declare is reported once per (family, label),
// and so is a family the catalog does not have.
TEST(MetricCatalog, UndeclaredLabelsReportsWhatTheCatalogLacks) {
  prometheus::MetricFamily loss = MakeFamily(Metric::kPortLossRatio);  // node device port
  AddValue(loss, {{"node", "n1"}, {"device", "mlx5_0"}, {"port", "1"}}, 0.5);
  EXPECT_THAT(UndeclaredLabels({loss}), IsEmpty());
  AddValue(loss, {{"node", "n1"}, {"device", "mlx5_0"}, {"port", "1"}, {"color", "red"}}, 0.5);
  AddValue(loss, {{"node", "n2"}, {"color", "blue"}}, 0.5);
  prometheus::MetricFamily stray;
  stray.name = "fabricscope_not_in_the_catalog_total";
  stray.type = prometheus::MetricType::Counter;
  AddValue(stray, {}, 1);
  const std::vector<std::string> found = UndeclaredLabels({loss, stray});
  ASSERT_THAT(found, SizeIs(2));
  EXPECT_THAT(found[0], HasSubstr("fabricscope_port_loss_ratio: label \"color\""));
  EXPECT_THAT(found[1], HasSubstr("fabricscope_not_in_the_catalog_total: not in the metric"));
}

// The names a README cell writes: "`fabricscope_a_{b,c}_total`" is fabricscope_a_b_total and
// fabricscope_a_c_total; "`fabricscope_a_total{kind}`" is fabricscope_a_total.
std::vector<std::string> Expand(std::string token) {
  // A brace group at the end is the family's labels ("..._total{kind}"), not alternatives.
  // So is one cut short by a label value ("..._ratio{scope=\"rails\"...").
  if (!token.empty() && token.back() == '}') token.resize(token.rfind('{'));
  if (const size_t open = token.find('{');
      open != std::string::npos && token.find('}', open) == std::string::npos) {
    token.resize(open);
  }
  const size_t open = token.find('{');
  const size_t close = token.find('}', open);
  if (open == std::string::npos || close == std::string::npos) return {token};
  std::vector<std::string> out;
  size_t from = open + 1;
  while (from <= close) {
    size_t comma = token.find(',', from);
    if (comma == std::string::npos || comma > close) comma = close;
    for (const std::string& rest : Expand(token.substr(close + 1))) {
      out.push_back(token.substr(0, open) + token.substr(from, comma - from) + rest);
    }
    from = comma + 1;
  }
  return out;
}

// README's metric table documents the catalog: every family there (by its full name, with
// {a,b} alternatives, or as "`..._rest`" / "`_rest`" after its group's first name), and no name
// the catalog lacks.
TEST(MetricCatalog, ReadmeDocumentsExactlyTheCatalog) {
  const std::string section = MetricsSection();
  ASSERT_FALSE(section.empty()) << "exporters/README.md has no \"## Metrics\" section";
  std::set<std::string> written;
  const std::regex mentioned("`(fabricscope_[a-z0-9_{},]+)");
  for (auto it = std::sregex_iterator(section.begin(), section.end(), mentioned);
       it != std::sregex_iterator(); ++it) {
    for (const std::string& n : Expand((*it)[1].str())) written.insert(n);
  }
  std::set<std::string> catalog;
  for (const MetricInfo& m : kMetricCatalog) {
    const std::string name = m.name;
    catalog.insert(name);
    const std::string rest = name.substr(name.find('_', std::string("fabricscope_").size()));
    EXPECT_TRUE(written.count(name) || section.find("`..." + rest + "`") != std::string::npos ||
                section.find("`" + rest + "`") != std::string::npos)
        << name << " is not in exporters/README.md's Metrics section";
  }
  for (std::string name : written) {
    for (const std::string sfx : {"_bucket", "_sum", "_count"}) {
      if (!catalog.count(name) && name.size() > sfx.size() &&
          name.compare(name.size() - sfx.size(), sfx.size(), sfx) == 0) {
        name.resize(name.size() - sfx.size());
      }
    }
    EXPECT_TRUE(catalog.count(name)) << "README names " << name << ", which is not exported";
  }
}

}  // namespace
}  // namespace fabricscope::exporters

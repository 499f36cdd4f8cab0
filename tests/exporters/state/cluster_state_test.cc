#include "exporters/state/cluster_state.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <map>

#include "absl/strings/str_cat.h"
#include "exporters/exposition/cluster_json.h"
#include "exporters/exposition/cluster_render.h"
#include "exporters/exposition/gpu_render.h"
#include "exporters/ingest/admission.h"
#include "exporters/ingest/message_checks.h"
#include "tests/common/metric_family.h"

namespace fabricscope::exporters {
namespace {

using prometheus::MetricFamily;
using ::testing::HasSubstr;

v1::Hello Hello(const std::string& node, uint64_t instance, uint64_t resume = 1) {
  v1::Hello h;
  h.set_node(node);
  h.set_instance_id(instance);
  h.set_resume_seq(resume);
  h.set_agent_version("test");
  for (uint32_t port : {1u, 2u}) {
    v1::PortInfo* p = h.add_ports();
    p->set_device("mlx5_0");
    p->set_port(port);
    p->set_line_rate_bytes_per_second(port == 1 ? 50'000'000'000 : 0);
  }
  return h;
}

v1::Batch Batch(uint64_t seq, uint64_t tx_total) {
  v1::Batch b;
  b.set_seq(seq);
  b.set_window_end_ns(5'000'000'000);
  b.set_unix_offset_ns(1'700'000'000'000'000'000);
  for (uint32_t i = 0; i < 2; ++i) {
    v1::PortWindow* w = b.add_ports();
    w->set_port_index(i);
    w->set_utilization_valid(i == 0);
    w->mutable_transmit()->set_bytes_total(tx_total + i);
    w->mutable_transmit()->set_has_bytes(true);
    w->mutable_transmit()->set_mean_utilization(0.25);
    w->mutable_transmit()->set_peak_utilization(0.97);
    w->mutable_transmit()->set_microbursts_total(seq);
    v1::Histogram* h = w->mutable_transmit()->mutable_microburst_duration_seconds();
    h->add_upper_bounds(0.001);
    h->add_upper_bounds(0.01);
    h->add_bucket_counts(2);
    h->add_bucket_counts(3);
    h->add_bucket_counts(1);
    h->set_count(6);
    h->set_sum(0.05);
    v1::ErrorCounter* e = w->add_errors();
    e->set_kind("symbol_error");
    e->set_total(65535);
    e->set_saturated(true);
  }
  v1::Microburst* m = b.add_microbursts();
  m->set_port_index(0);
  m->set_direction(v1::DIRECTION_TRANSMIT);
  m->set_start_ns(4'000'000'000);
  m->set_duration_ns(250'000);
  m->set_peak_utilization(1.02);
  m->set_bytes(12'750'000);
  return b;
}

using testing::FindFamily;

// fabricscope_aggregator_rejected_batches_total for `reason`, or over every reason.
double Rejected(const std::vector<MetricFamily>& fams, const std::string& reason = "") {
  double sum = 0;
  for (const auto& m : FindFamily(fams, "fabricscope_aggregator_rejected_batches_total")->metric) {
    if (reason.empty() || m.label.at(0).value == reason) sum += m.counter.value;
  }
  return sum;
}

std::string Label(const prometheus::ClientMetric& m, const std::string& name) {
  for (const auto& l : m.label) {
    if (l.name == name) return l.value;
  }
  return "";
}

TEST(ClusterState, DuplicatesAreAckedButNotApplied) {
  ClusterState s;
  ASSERT_EQ(*s.OnHello(Hello("n1", 7)), 0u);
  EXPECT_EQ(*s.OnBatch("n1", 7, Batch(1, 1000)), 1u);
  EXPECT_EQ(*s.OnBatch("n1", 7, Batch(2, 2000)), 2u);
  EXPECT_EQ(*s.OnBatch("n1", 7, Batch(1, 999999)), 2u);  // resent after a reconnect
  auto fams = ClusterFamilies(s);
  const MetricFamily* tx = FindFamily(fams, "fabricscope_port_transmit_bytes_total");
  ASSERT_NE(tx, nullptr);
  EXPECT_EQ(tx->metric[0].counter.value, 2000);
  EXPECT_EQ(
      FindFamily(fams, "fabricscope_aggregator_duplicate_batches_total")->metric[0].counter.value,
      1);
  EXPECT_EQ(FindFamily(fams, "fabricscope_aggregator_batches_total")->metric[0].counter.value, 2);
}

TEST(ClusterState, ReconnectOfTheSameInstanceKeepsProgress) {
  ClusterState s;
  ASSERT_TRUE(s.OnHello(Hello("n1", 7)).ok());
  ASSERT_TRUE(s.OnBatch("n1", 7, Batch(1, 1)).ok());
  EXPECT_EQ(*s.OnHello(Hello("n1", 7, /*resume=*/1)), 1u);
  EXPECT_EQ(*s.OnHello(Hello("n1", 7, /*resume=*/4)), 3u);
}

TEST(ClusterState, NewInstanceReplacesTheNode) {
  ClusterState s;
  ASSERT_TRUE(s.OnHello(Hello("n1", 7)).ok());
  ASSERT_TRUE(s.OnBatch("n1", 7, Batch(5, 5)).ok());
  EXPECT_EQ(*s.OnHello(Hello("n1", 8)), 0u);  // agent restarted: sequence starts over
  EXPECT_EQ(*s.OnBatch("n1", 8, Batch(1, 10)), 1u);
  EXPECT_EQ(s.OnBatch("n1", 7, Batch(6, 6)).status().code(),
            absl::StatusCode::kFailedPrecondition);  // the old instance is gone
  EXPECT_EQ(s.node_count(), 1u);
}

// A node silent for node_expiry leaves /metrics and memory, counted; a reconnect brings it back.
TEST(ClusterState, SilentNodesExpireAndComeBackOnReconnect) {
  ClusterState s;
  ASSERT_TRUE(s.OnHello(Hello("n1", 7)).ok());
  ASSERT_TRUE(s.OnBatch("n1", 7, Batch(1, 100)).ok());
  ASSERT_TRUE(s.OnHello(Hello("n2", 8)).ok());
  const absl::Time now = absl::Now();
  EXPECT_TRUE(s.ExpireNodes(now + absl::Minutes(5), absl::Minutes(10)).empty());
  EXPECT_TRUE(s.ExpireNodes(now + absl::Hours(5), absl::ZeroDuration()).empty());  // never
  EXPECT_EQ(s.ExpireNodes(now + absl::Minutes(11), absl::Minutes(10)),
            (std::vector<std::string>{"n1", "n2"}));
  EXPECT_EQ(s.node_count(), 0u);
  auto fams = ClusterFamilies(s);
  EXPECT_EQ(FindFamily(fams, "fabricscope_aggregator_expired_nodes_total")->metric[0].counter.value,
            2);
  EXPECT_EQ(FindFamily(fams, "fabricscope_port_transmit_bytes_total"), nullptr);
  EXPECT_EQ(MicroburstsJson(s.RecentMicrobursts("")), "{\"microbursts\":[]}");
  // The old stream's next batch finds no Hello; the agent reconnects and totals continue.
  EXPECT_EQ(s.OnBatch("n1", 7, Batch(2, 200)).status().code(),
            absl::StatusCode::kFailedPrecondition);
  v1::Hello again = Hello("n1", 7, 2);
  again.set_acked_seq(1);
  ASSERT_TRUE(s.OnHello(again).ok());
  ASSERT_TRUE(s.OnBatch("n1", 7, Batch(2, 200)).ok());
  fams = ClusterFamilies(s);
  EXPECT_EQ(FindFamily(fams, "fabricscope_port_transmit_bytes_total")->metric[0].counter.value,
            200);
  EXPECT_EQ(FindFamily(fams, "fabricscope_aggregator_lost_batches_total")->metric[0].counter.value,
            0);
  EXPECT_EQ(s.node_count(), 1u);
}

TEST(ClusterState, NodesJsonSaysWhatEachInstanceGotHere) {
  ClusterState s;
  ASSERT_TRUE(s.OnHello(Hello("n1", 7)).ok());
  ASSERT_TRUE(s.OnBatch("n1", 7, Batch(1, 1)).ok());
  ASSERT_TRUE(s.OnBatch("n1", 7, Batch(1, 1)).ok());  // a duplicate
  ASSERT_TRUE(s.OnBatch("n1", 7, Batch(4, 4)).ok());  // 2 and 3 lost
  const std::string json = NodesJson(s);
  EXPECT_THAT(json, HasSubstr("\"node\":\"n1\""));
  EXPECT_THAT(json, HasSubstr("\"instance_id\":\"7\""));
  EXPECT_THAT(json, HasSubstr("\"acked_seq\":4"));
  EXPECT_THAT(json, HasSubstr("\"batches\":2"));
  EXPECT_THAT(json, HasSubstr("\"duplicate_batches\":1"));
  EXPECT_THAT(json, HasSubstr("\"lost_batches\":2"));
  ASSERT_TRUE(s.OnHello(Hello("n1", 8)).ok());  // a new instance starts its counts afresh
  EXPECT_THAT(NodesJson(s), HasSubstr("\"batches\":0"));
}

TEST(ClusterState, GapInsideAStreamIsCountedLost) {
  ClusterState s;
  ASSERT_TRUE(s.OnHello(Hello("n1", 7)).ok());
  EXPECT_EQ(*s.OnBatch("n1", 7, Batch(3, 3)), 3u);
  EXPECT_EQ(FindFamily(ClusterFamilies(s), "fabricscope_aggregator_lost_batches_total")
                ->metric[0]
                .counter.value,
            2);
}

// A Hello that resumes past batches this aggregator never stored: those an aggregator acked
// (Hello.acked_seq: stored before a restart of this one) are not lost; those above it are (the
// agent dropped them unacked: full queue, refused, a stopped aggregator's outage).
TEST(ClusterState, HelloResumingPastUnackedBatchesCountsThemLost) {
  auto lost = [](ClusterState& s) {
    return FindFamily(ClusterFamilies(s), "fabricscope_aggregator_lost_batches_total")
        ->metric[0]
        .counter.value;
  };
  ClusterState restarted;  // knows nothing; the agent had 1..499 acked, 500.. unacked
  v1::Hello h = Hello("n1", 7, 500);
  h.set_acked_seq(499);
  EXPECT_EQ(*restarted.OnHello(h), 499u);
  EXPECT_EQ(lost(restarted), 0);
  ClusterState s;
  ASSERT_TRUE(s.OnHello(Hello("n1", 7)).ok());
  ASSERT_TRUE(s.OnBatch("n1", 7, Batch(1, 1)).ok());
  ASSERT_TRUE(s.OnBatch("n1", 7, Batch(2, 2)).ok());
  // Reconnect: 2 acked, 3..31 dropped from a 30-batch queue, 32 the first it still holds.
  h = Hello("n1", 7, 32);
  h.set_acked_seq(2);
  EXPECT_EQ(*s.OnHello(h), 31u);
  EXPECT_EQ(lost(s), 29);
  // The same Hello again (a second reconnect) counts nothing more.
  EXPECT_EQ(*s.OnHello(h), 31u);
  EXPECT_EQ(lost(s), 29);
  // A hostile resume_seq far past any real agent is not counted as 2^63 losses.
  h.set_resume_seq(uint64_t{1} << 62);
  ASSERT_TRUE(s.OnHello(h).ok());
  EXPECT_EQ(lost(s), 29);
}

// An early batch (Batch.early: collective records ahead of their window) takes a sequence
// number but no window: the ports, the window-gap count and the next window are untouched.
TEST(ClusterState, EarlyBatchTakesASeqButNoWindow) {
  ClusterState s;
  ASSERT_TRUE(s.OnHello(Hello("n1", 7)).ok());
  v1::Batch first = Batch(1, 1000);
  first.set_window_start_ns(4'000'000'000);
  ASSERT_TRUE(s.OnBatch("n1", 7, first).ok());
  v1::Batch early;
  early.set_seq(2);
  early.set_early(true);
  early.set_window_start_ns(5'400'000'000);
  early.set_window_end_ns(5'400'000'000);
  early.set_unix_offset_ns(first.unix_offset_ns());
  v1::Collective* c = early.add_collectives();
  c->set_comm_hash(0xabc);
  c->set_func("AllReduce");
  c->set_start_ns(5'100'000'000);
  c->set_end_ns(5'200'000'000);
  EXPECT_EQ(*s.OnBatch("n1", 7, early), 2u);
  v1::Batch next = Batch(3, 2000);
  next.set_window_start_ns(5'000'000'000);
  next.set_window_end_ns(6'000'000'000);
  EXPECT_EQ(*s.OnBatch("n1", 7, next), 3u);
  auto fams = ClusterFamilies(s);
  EXPECT_EQ(FindFamily(fams, "fabricscope_aggregator_window_gaps_total")->metric[0].counter.value,
            0);
  EXPECT_EQ(FindFamily(fams, "fabricscope_aggregator_lost_batches_total")->metric[0].counter.value,
            0);
  EXPECT_EQ(FindFamily(fams, "fabricscope_aggregator_batches_total")->metric[0].counter.value, 3);
  EXPECT_EQ(FindFamily(fams, "fabricscope_port_transmit_bytes_total")->metric[0].counter.value,
            2000);
  EXPECT_THAT(CollectivesJson(s.RecentCollectives("", 10)), HasSubstr("\"func\":\"AllReduce\""));
}

// Histograms the text format cannot carry (a NaN bound, bounds out of order, more buckets than
// bounds + 1, counts past the total, an infinite sum) drop their batch, counted and acked; the
// next good batch is applied, and what is exported stays valid.
TEST(ClusterState, BatchWithABadHistogramIsDroppedAndCounted) {
  ClusterState s;
  Admission in(s);  // what a stream's Hellos and batches pass
  ASSERT_TRUE(in.OnHello(Hello("n1", 7)).ok());
  using Mutate = std::function<void(v1::Histogram*)>;
  const std::vector<std::pair<Mutate, std::string>> cases = {
      {[](v1::Histogram* h) { h->set_upper_bounds(0, std::nan("")); }, "upper bound 0 not finite"},
      {[](v1::Histogram* h) { h->set_upper_bounds(1, 0.0005); },
       "upper_bounds not increasing at 1"},
      {[](v1::Histogram* h) { h->add_bucket_counts(0); }, "4 bucket counts for 2 bounds"},
      {[](v1::Histogram* h) { h->set_count(2); }, "bucket counts exceed count"},
      {[](v1::Histogram* h) { h->set_sum(INFINITY); }, "sum not finite"},
  };
  uint64_t seq = 0;
  for (const auto& [mutate, why] : cases) {
    ++seq;
    v1::Batch b = Batch(seq, 1000 * seq);
    mutate(b.mutable_ports(1)->mutable_transmit()->mutable_microburst_duration_seconds());
    EXPECT_EQ(*in.OnBatch("n1", 7, b), seq) << why;  // acked: resending cannot fix it
    const absl::Status st = CheckHistograms(b);
    EXPECT_THAT(std::string(st.message()),
                HasSubstr("ports[1].transmit.microburst_duration_seconds: " + why));
  }
  ++seq;
  EXPECT_EQ(*in.OnBatch("n1", 7, Batch(seq, 77)), seq);
  const auto fams = ClusterFamilies(s);
  EXPECT_EQ(Rejected(fams, "histogram"), cases.size());
  EXPECT_EQ(FindFamily(fams, "fabricscope_port_transmit_bytes_total")->metric[0].counter.value, 77);
  EXPECT_TRUE(CheckHistograms(Batch(1, 1)).ok());
}

TEST(ClusterState, MalformedInputIsRefusedAndCounted) {
  ClusterState s;
  Admission in(s);  // what a stream's Hellos and batches pass
  EXPECT_EQ(in.OnHello(v1::Hello()).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(in.OnBatch("nobody", 1, Batch(1, 1)).status().code(),
            absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(in.OnHello(Hello("n1", 7)).ok());
  v1::Batch bad = Batch(1, 1);
  bad.mutable_ports(1)->set_port_index(2);
  EXPECT_EQ(*in.OnBatch("n1", 7, bad), 1u);  // dropped and counted, but acked
  v1::Batch bad_burst = Batch(2, 1);
  bad_burst.mutable_microbursts(0)->set_port_index(1000);
  EXPECT_EQ(*in.OnBatch("n1", 7, bad_burst), 2u);
  EXPECT_EQ(Rejected(ClusterFamilies(s)), 3);
  EXPECT_EQ(Rejected(ClusterFamilies(s), "before_hello"), 1);  // "nobody"'s batch
  EXPECT_EQ(Rejected(ClusterFamilies(s), "port_index"), 2);
  // Nothing of the rejected batches was applied; the next good one is.
  EXPECT_EQ(FindFamily(ClusterFamilies(s), "fabricscope_port_transmit_bytes_total"), nullptr);
  EXPECT_EQ(*in.OnBatch("n1", 7, Batch(3, 77)), 3u);
  EXPECT_EQ(FindFamily(ClusterFamilies(s), "fabricscope_port_transmit_bytes_total")
                ->metric[0]
                .counter.value,
            77);
}

// Hostile inputs of issue 13 that crashed or froze the aggregator: the same instance announcing
// more ports than before (it wrote past its port vector), and a utilization series whose bucket
// length or span is outside the agent's bounds (the heat-map ingest looped over its span).
TEST(ClusterState, SameInstanceWithMorePortsAndAbsurdSeriesAreSafe) {
  ClusterState s;
  Admission in(s);  // what a stream's Hellos and batches pass
  ASSERT_TRUE(in.OnHello(Hello("n1", 7)).ok());
  ASSERT_TRUE(in.OnBatch("n1", 7, Batch(1, 10)).ok());
  v1::Hello more = Hello("n1", 7, 2);
  for (uint32_t port = 3; port <= 6; ++port) {
    v1::PortInfo* p = more.add_ports();
    p->set_device("mlx5_1");
    p->set_port(port);
  }
  ASSERT_TRUE(in.OnHello(more).ok());
  v1::Batch b = Batch(2, 20);
  v1::PortWindow* w = b.add_ports();
  w->set_port_index(5);
  w->mutable_transmit()->set_bytes_total(555);
  w->mutable_transmit()->set_has_bytes(true);
  EXPECT_EQ(*in.OnBatch("n1", 7, b), 2u);
  double port5 = -1;
  const auto fams = ClusterFamilies(s);
  for (const auto& m : FindFamily(fams, "fabricscope_port_transmit_bytes_total")->metric) {
    for (const auto& l : m.label) {
      if (l.name == "device" && l.value == "mlx5_1") port5 = m.counter.value;
    }
  }
  EXPECT_EQ(port5, 555);

  for (int64_t bucket :
       {int64_t{100'000'000'000'000'000}, int64_t{0}, int64_t{-5}, int64_t{1'000}}) {
    v1::Batch bad = Batch(0, 30);
    v1::UtilizationSeries* u = bad.add_utilization_series();
    u->set_port_index(0);
    u->set_start_ns(1);
    u->set_bucket_ns(bucket);
    u->set_transmit(std::string(100, '\x10'));
    static uint64_t seq = 3;
    bad.set_seq(seq);
    EXPECT_EQ(*in.OnBatch("n1", 7, bad), seq++) << bucket;  // refused, counted, acked
  }
  v1::Batch long_span = Batch(7, 30);
  v1::UtilizationSeries* u = long_span.add_utilization_series();
  u->set_bucket_ns(1'000'000'000);  // 1 s buckets, 4 h of them: past the agent's 1 h window
  u->set_transmit(std::string(4 * 3600, '\x10'));
  EXPECT_EQ(*in.OnBatch("n1", 7, long_span), 7u);
  EXPECT_EQ(Rejected(ClusterFamilies(s)), 5);
  // A series within bounds is taken (1 ms buckets over the window).
  v1::Batch good = Batch(8, 30);
  u = good.add_utilization_series();
  u->set_bucket_ns(1'000'000);
  u->set_transmit(std::string(1000, '\x10'));
  EXPECT_EQ(*in.OnBatch("n1", 7, good), 8u);
  EXPECT_EQ(Rejected(ClusterFamilies(s)), 5);
}

// A sequence number jumping from 1 to 2^63 (issue 13): refused and counted, nothing lost, and
// the instance's next real batch is taken.
TEST(ClusterState, AnAbsurdSequenceJumpIsRefused) {
  ClusterState s;
  ASSERT_TRUE(s.OnHello(Hello("n1", 7)).ok());
  ASSERT_TRUE(s.OnBatch("n1", 7, Batch(1, 10)).ok());
  EXPECT_EQ(*s.OnBatch("n1", 7, Batch(uint64_t{1} << 63, 20)), 1u);  // dropped, ack unchanged
  EXPECT_EQ(*s.OnBatch("n1", 7, Batch(2, 30)), 2u);
  const auto fams = ClusterFamilies(s);
  EXPECT_EQ(Rejected(fams, "seq_jump"), 1);
  EXPECT_EQ(Rejected(fams), 1);
  EXPECT_EQ(FindFamily(fams, "fabricscope_aggregator_lost_batches_total")->metric[0].counter.value,
            0);
  EXPECT_EQ(FindFamily(fams, "fabricscope_port_transmit_bytes_total")->metric[0].counter.value, 30);
}

TEST(ClusterState, ExportsLabelsValuesAndCumulativeHistograms) {
  ClusterState s;
  ASSERT_TRUE(s.OnHello(Hello("n1", 7)).ok());
  ASSERT_TRUE(s.OnBatch("n1", 7, Batch(1, 4000)).ok());
  auto fams = ClusterFamilies(s);
  const MetricFamily* tx = FindFamily(fams, "fabricscope_port_transmit_bytes_total");
  ASSERT_EQ(tx->metric.size(), 2u);
  EXPECT_EQ(Label(tx->metric[1], "node"), "n1");
  EXPECT_EQ(Label(tx->metric[1], "device"), "mlx5_0");
  EXPECT_EQ(Label(tx->metric[1], "port"), "2");
  EXPECT_EQ(tx->metric[1].counter.value, 4001);
  // Port 2 has no line rate: no utilization series for it.
  const MetricFamily* util = FindFamily(fams, "fabricscope_port_utilization_ratio");
  ASSERT_EQ(util->metric.size(), 2u);  // port 1, transmit + receive
  EXPECT_EQ(Label(util->metric[0], "direction"), "transmit");
  EXPECT_DOUBLE_EQ(util->metric[0].gauge.value, 0.25);
  EXPECT_EQ(FindFamily(fams, "fabricscope_port_line_rate_bytes_per_second")->metric.size(), 1u);
  // The basic profile (the default): the node-level histogram, no per-port one.
  EXPECT_EQ(FindFamily(fams, "fabricscope_microburst_duration_seconds"), nullptr);
  const MetricFamily* node_dur = FindFamily(fams, "fabricscope_node_microburst_duration_seconds");
  ASSERT_NE(node_dur, nullptr);
  ASSERT_EQ(node_dur->metric.size(), 1u);
  EXPECT_EQ(Label(node_dur->metric[0], "node"), "n1");
  EXPECT_GE(node_dur->metric[0].histogram.sample_count, 6u);
  ClusterState::Options full_options;
  full_options.metrics = common::MetricProfile::kFull;
  ClusterState full(full_options);
  ASSERT_TRUE(full.OnHello(Hello("n1", 7)).ok());
  ASSERT_TRUE(full.OnBatch("n1", 7, Batch(1, 4000)).ok());
  const auto full_fams = ClusterFamilies(full);
  const MetricFamily* dur = FindFamily(full_fams, "fabricscope_microburst_duration_seconds");
  ASSERT_NE(dur, nullptr);
  const auto& h = dur->metric[0].histogram;
  ASSERT_EQ(h.bucket.size(), 3u);
  EXPECT_EQ(h.bucket[0].cumulative_count, 2u);
  EXPECT_EQ(h.bucket[1].cumulative_count, 5u);
  EXPECT_EQ(h.bucket[2].cumulative_count, 6u);
  EXPECT_TRUE(std::isinf(h.bucket[2].upper_bound));
  EXPECT_EQ(h.sample_count, 6u);
  const MetricFamily* sat = FindFamily(fams, "fabricscope_port_errors_saturated");
  EXPECT_EQ(sat->metric[0].gauge.value, 1);
  const MetricFamily* last = FindFamily(fams, "fabricscope_agent_last_batch_timestamp_seconds");
  EXPECT_DOUBLE_EQ(last->metric[0].gauge.value, 1'700'000'005.0);
}

// A link that retrained while the agent ran: the window carries the rate in effect, which
// replaces the Hello's (agent/pipeline.cc); 0 (an older agent) leaves the Hello's rate.
TEST(ClusterState, ALinkRateChangeReplacesTheHellosRate) {
  ClusterState s;
  ASSERT_TRUE(s.OnHello(Hello("n1", 7)).ok());
  v1::Batch b = Batch(1, 4000);
  b.mutable_ports(0)->set_line_rate_bytes_per_second(25'000'000'000);
  b.mutable_ports(1)->set_line_rate_bytes_per_second(12'500'000'000);
  ASSERT_TRUE(s.OnBatch("n1", 7, b).ok());
  ASSERT_TRUE(s.OnBatch("n1", 7, Batch(2, 5000)).ok());  // no rate: the last one stands
  auto fams = ClusterFamilies(s);
  const MetricFamily* rate = FindFamily(fams, "fabricscope_port_line_rate_bytes_per_second");
  ASSERT_EQ(rate->metric.size(), 2u);
  EXPECT_EQ(rate->metric[0].gauge.value, 25e9);
  EXPECT_EQ(rate->metric[1].gauge.value, 12.5e9);
}

// Per-window counter resets and unavailable reads are summed over the stored windows (a
// duplicate batch is not counted twice) and exported per port, resets by counter group.
TEST(ClusterState, CounterResetsAndUnavailableReadsAreExportedAsTotals) {
  ClusterState s;
  ASSERT_TRUE(s.OnHello(Hello("n1", 7)).ok());
  for (uint64_t seq : {1, 2, 2}) {
    v1::Batch b = Batch(seq, 4000 * seq);
    b.mutable_ports(0)->set_unavailable_reads(3);
    b.mutable_ports(0)->set_counter_resets(seq);
    (*b.mutable_ports(0)->mutable_counter_resets_by_group())["hw_counters"] = 1;
    if (seq == 2) (*b.mutable_ports(0)->mutable_counter_resets_by_group())["counters"] = 1;
    ASSERT_TRUE(s.OnBatch("n1", 7, b).ok());
  }
  auto fams = ClusterFamilies(s);
  const MetricFamily* un = FindFamily(fams, "fabricscope_port_unavailable_reads_total");
  ASSERT_EQ(un->metric.size(), 2u);
  EXPECT_EQ(un->metric[0].counter.value, 6);
  EXPECT_EQ(un->metric[1].counter.value, 0);
  const MetricFamily* resets = FindFamily(fams, "fabricscope_port_counter_resets_total");
  std::map<std::string, double> got;
  for (const auto& m : resets->metric) {
    EXPECT_EQ(Label(m, "port"), "1");
    got[Label(m, "kind")] = m.counter.value;
  }
  EXPECT_EQ(got, (std::map<std::string, double>{{"counters", 1}, {"hw_counters", 2}}));
}

// A byte counter stuck at its maximum in the latest window: a gauge of 1 for it, gone once it
// moves again.
TEST(ClusterState, AStuckByteCounterIsExportedSaturated) {
  ClusterState s;
  ASSERT_TRUE(s.OnHello(Hello("n1", 7)).ok());
  v1::Batch b = Batch(1, 4000);
  b.mutable_ports(0)->add_saturated_counters("port_xmit_data");
  ASSERT_TRUE(s.OnBatch("n1", 7, b).ok());
  auto fams = ClusterFamilies(s);
  const MetricFamily* sat = FindFamily(fams, "fabricscope_port_counter_saturated");
  ASSERT_EQ(sat->metric.size(), 1u);
  EXPECT_EQ(Label(sat->metric[0], "counter"), "port_xmit_data");
  EXPECT_EQ(Label(sat->metric[0], "port"), "1");
  ASSERT_TRUE(s.OnBatch("n1", 7, Batch(2, 5000)).ok());
  fams = ClusterFamilies(s);
  sat = FindFamily(fams, "fabricscope_port_counter_saturated");
  EXPECT_TRUE(sat == nullptr || sat->metric.empty());
}

TEST(ClusterState, RecentMicroburstsJsonInUnixTime) {
  ClusterState s;
  ASSERT_TRUE(s.OnHello(Hello("n1", 7)).ok());
  ASSERT_TRUE(s.OnBatch("n1", 7, Batch(1, 1)).ok());
  const std::string json = MicroburstsJson(s.RecentMicrobursts(""));
  EXPECT_THAT(json, HasSubstr("\"node\":\"n1\""));
  EXPECT_THAT(json, HasSubstr("\"direction\":\"transmit\""));
  EXPECT_THAT(json, HasSubstr("\"start_unix_seconds\":1700000004"));
  EXPECT_THAT(json, HasSubstr("\"duration_seconds\":0.00025"));
  EXPECT_THAT(json, HasSubstr("\"bytes\":12750000"));
  EXPECT_EQ(MicroburstsJson(s.RecentMicrobursts("other")), "{\"microbursts\":[]}");
}

TEST(ClusterState, RecentMicroburstsAreBounded) {
  ClusterState::Options o;
  o.recent_bursts_per_node = 3;
  ClusterState s(o);
  ASSERT_TRUE(s.OnHello(Hello("n1", 7)).ok());
  for (uint64_t i = 1; i <= 10; ++i) ASSERT_TRUE(s.OnBatch("n1", 7, Batch(i, i)).ok());
  const std::string json = MicroburstsJson(s.RecentMicrobursts("n1"));
  size_t count = 0;
  for (size_t p = json.find("\"node\""); p != std::string::npos; p = json.find("\"node\"", p + 1))
    ++count;
  EXPECT_EQ(count, 3u);
}

double RefusedStreams(const ClusterState& s, const std::string& reason) {
  const std::vector<MetricFamily> fams = ClusterFamilies(s);  // kept alive for the loop
  for (const auto& m : FindFamily(fams, "fabricscope_aggregator_refused_streams_total")->metric) {
    if (m.label[0].value == reason) return m.counter.value;
  }
  return -1;
}

// Issue 13's rows: a Hello with 100,000 ports took the aggregator from 22 MB to 2.13 GB, and
// 5,000 invented node names to 381 MB. Both are refused now, named and counted, and the nodes
// already held keep working.
TEST(ClusterState, HellosPastTheLimitsAreRefusedAndCounted) {
  ClusterState::Options o;
  o.max_nodes = 3;
  ClusterState s(o);
  Admission in(s);  // what a stream's Hellos and batches pass
  v1::Hello huge = Hello("n1", 7);
  for (int i = 0; i < 100'000; ++i) huge.add_ports()->set_device("mlx5_0");
  absl::StatusOr<uint64_t> r = in.OnHello(huge);
  EXPECT_TRUE(absl::IsInvalidArgument(r.status())) << r.status();
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("ports: 100002 ports, at most 256"));
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(in.OnHello(Hello(absl::StrCat("n", i), 7)).ok());
  for (int i = 3; i < 5'000; ++i) {
    r = in.OnHello(Hello(absl::StrCat("invented-", i), 7));
    ASSERT_TRUE(absl::IsResourceExhausted(r.status())) << i << ": " << r.status();
  }
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("holds 3 nodes, its limit"));
  EXPECT_EQ(s.node_count(), 3u);
  EXPECT_EQ(RefusedStreams(s, "invalid_hello"), 1);
  EXPECT_EQ(RefusedStreams(s, "node_limit"), 4'997);
  // A node already held reconnects (a new instance too) at the limit.
  EXPECT_TRUE(in.OnHello(Hello("n1", 8)).ok());
  EXPECT_EQ(*in.OnBatch("n1", 8, Batch(1, 10)), 1u);
}

TEST(ClusterState, HelloStringsAreBoundedAndFreeOfControlCharacters) {
  ClusterState s;
  Admission in(s);  // what a stream's Hellos and batches pass
  auto refused = [&](const v1::Hello& h) {
    absl::StatusOr<uint64_t> r = in.OnHello(h);
    return r.ok() ? std::string("accepted") : std::string(r.status().message());
  };
  EXPECT_THAT(refused(Hello("", 1)), HasSubstr("node: empty"));
  EXPECT_THAT(refused(Hello(std::string(254, 'a'), 1)), HasSubstr("node: 254 bytes, at most 253"));
  EXPECT_THAT(refused(Hello("n1\nfabricscope_fake 1", 1)),
              HasSubstr("node: control character 0xa at byte 2"));
  v1::Hello h = Hello("n1", 1);
  h.mutable_ports(0)->set_device(std::string(65, 'd'));
  EXPECT_THAT(refused(h), HasSubstr("ports[0].device: 65 bytes, at most 64"));
  h = Hello("n1", 1);
  h.mutable_ports(0)->set_netdev("eth\x7f");
  EXPECT_THAT(refused(h), HasSubstr("ports[0].netdev: control character 0x7f"));
  h = Hello("n1", 1);
  h.add_addresses(std::string(100, '1'));
  EXPECT_THAT(refused(h), HasSubstr("addresses[0]: 100 bytes"));
  h = Hello("n1", 1);
  h.set_window_seconds(std::nan(""));
  EXPECT_THAT(refused(h), HasSubstr("window_seconds: nan is not a duration"));
  EXPECT_EQ(RefusedStreams(s, "invalid_hello"), 7);
  EXPECT_EQ(s.node_count(), 0u);
  EXPECT_EQ(refused(Hello(std::string(253, 'a'), 1)), "accepted");
}

}  // namespace
}  // namespace fabricscope::exporters

// The figures of a collective's analysis that the aggregator's absolute evidence reads
// (exporters/analysis/path_evidence.h): each direction's peak, the busy transmit rate, the line
// rate judged at, and the node's own bytes of the communicator (agent/collective_analysis.h).
#include <utility>
#include <vector>

#include "agent/collective_analysis.h"
#include "gtest/gtest.h"
#include "tests/agent/collective_test_util.h"

namespace fabricscope::agent {
namespace {

using namespace collective_test;  // NOLINT: the shared helpers

class CollectivePathTest : public ::testing::Test {
 protected:
  CollectivePathTest() : recorder_(3, 10, kMs) {}
  // One 1 ms sample of port 0 ending at t_ms, tx and rx bytes (kRate is 1e6 bytes a sample).
  void Sample(int t_ms, uint64_t tx, uint64_t rx) {
    FlightSample s;
    s.t_ns = t_ms * kMs;
    s.interval_ns = kMs;
    s.tx_bytes = tx;
    s.rx_bytes = rx;
    recorder_.Record(0, s);
  }
  FlightRecorder recorder_;
};

// A port that sends in bursts at 0.8 of line rate and idles between (a ring's fast link, waiting
// for the slow one) has a busy transmit rate of 0.8, whatever share of the time it idled; the
// receive direction has a peak of its own.
TEST_F(CollectivePathTest, BusyTransmitRateIsTheMedianOfItsBusySamples) {
  for (int t = 1; t <= 100; ++t) {
    const bool busy = t % 4 == 0;  // a quarter of the samples
    Sample(t, busy ? 800'000 : 10'000, 300'000);
  }
  Sample(101, 990'000, 300'000);  // one fast sample: the peak, not the busy rate
  CollectiveAnalysisOptions o;
  o.rails = {"eth0"};
  CollectiveAnalyzer a(Ports(), recorder_, o);
  const v1::CollectiveAnalysis r = a.Analyze(Coll(1, 0, 101 * kMs));
  ASSERT_EQ(r.ports_size(), 1);
  const v1::PortActivity& p = r.ports(0);
  EXPECT_NEAR(p.transmit_busy_utilization(), 0.8, 1e-9);
  EXPECT_NEAR(p.transmit_peak_utilization(), 0.99, 1e-9);
  EXPECT_NEAR(p.receive_peak_utilization(), 0.3, 1e-9);
  EXPECT_NEAR(p.peak_utilization(), 0.99, 1e-9);
  EXPECT_EQ(p.line_rate_bytes_per_second(), kRate);
}

// A link that sends steadily at a quarter of its line rate (a slow hop further on) has a busy
// transmit rate of 0.25; one that sent nothing has none.
TEST_F(CollectivePathTest, SteadySlowSenderHasALowBusyRate) {
  for (int t = 1; t <= 50; ++t) Sample(t, 250'000, 250'000);
  CollectiveAnalysisOptions o;
  o.rails = {"eth0", "eth1"};
  CollectiveAnalyzer a(Ports(), recorder_, o);
  const v1::CollectiveAnalysis r = a.Analyze(Coll(1, 0, 50 * kMs));
  ASSERT_EQ(r.ports_size(), 2);
  EXPECT_NEAR(r.ports(0).transmit_busy_utilization(), 0.25, 1e-9);
  EXPECT_EQ(r.ports(1).transmit_busy_utilization(), 0);  // eth1: no samples
  EXPECT_EQ(r.ports(1).line_rate_bytes_per_second(), kRate);
}

// Own bytes: every collective of the same communicator this node's ranks ran, pro rata to its
// overlap with the one analysed (8 local ranks: their 8 shares); another communicator's are
// another flow's.
TEST_F(CollectivePathTest, OwnBytesAreTheNodesRanksOfTheCommunicatorProRata) {
  Fill(recorder_, 0, 0, 1000, 0.5);
  CollectiveAnalysisOptions o;
  o.delay_ns = 0;
  o.rails = {"eth0"};
  CollectiveAnalyzer a(Ports(), recorder_, o);
  v1::Collective mine = Coll(1, 100 * kMs, 200 * kMs);
  mine.set_proxy_bytes(1'000'000);
  v1::Collective local = mine;  // another local rank of the communicator, half overlapping
  local.set_rank(2);
  local.set_start_ns(150 * kMs);
  local.set_end_ns(250 * kMs);
  local.set_proxy_bytes(2'000'000);
  v1::Collective other = mine;  // another job's communicator, the same interval
  other.set_comm_hash(0xdef);
  other.set_proxy_bytes(5'000'000);
  v1::Collective none = mine;  // no proxy bytes (an intra-node collective): no own bytes
  none.set_comm_hash(0x123);
  none.set_proxy_bytes(0);
  for (const v1::Collective& c : {mine, local, other, none}) AddCollective(a, c);
  v1::Batch b;
  b.set_window_start_ns(0);
  b.set_window_end_ns(1000 * kMs);
  a.Process(1000 * kMs, &b);
  ASSERT_EQ(b.collectives_size(), 4);
  EXPECT_EQ(b.collectives(0).analysis().own_bytes(), 2'000'000u);  // 1 M + half of 2 M
  EXPECT_EQ(b.collectives(1).analysis().own_bytes(), 2'500'000u);  // 2 M + half of 1 M
  EXPECT_EQ(b.collectives(2).analysis().own_bytes(), 5'000'000u);  // its own only
  EXPECT_EQ(b.collectives(3).analysis().own_bytes(), 0u);
  // The other communicators' bytes during each, pro rata alike (CollectiveAnalysis.sharers),
  // most first: what names the job that shared the node's link.
  auto sharers = [&](int i) {
    std::vector<std::pair<uint64_t, uint64_t>> v;
    for (const v1::SharerBytes& s : b.collectives(i).analysis().sharers()) {
      v.emplace_back(s.comm_hash(), s.bytes());
    }
    return v;
  };
  using V = std::vector<std::pair<uint64_t, uint64_t>>;
  EXPECT_EQ(sharers(0), (V{{0xdef, 5'000'000}}));             // the other job, whole
  EXPECT_EQ(sharers(1), (V{{0xdef, 2'500'000}}));             // half of it overlaps rank 2's
  EXPECT_EQ(sharers(2), (V{{mine.comm_hash(), 2'000'000}}));  // 1 M + half of 2 M
  // The intra-node one had no network bytes of its own, but others' ran beside it.
  EXPECT_EQ(sharers(3), (V{{0xdef, 5'000'000}, {mine.comm_hash(), 2'000'000}}));
  EXPECT_EQ(b.collectives(3).analysis().sharers_bytes_total(), 7'000'000u);
}

// A collective's analysis waits for the node's other busy communicators (one whose last
// transfer ended within 1 s before it began) to report a transfer past its end, so that
// another job's longer collective is in its sharers; 0.5 s past its end it goes without them.
TEST_F(CollectivePathTest, AnalysisWaitsForTheBusyOthersThenGoesWithout) {
  Fill(recorder_, 0, 0, 2000, 0.5);
  CollectiveAnalysisOptions o;
  o.delay_ns = 0;
  o.rails = {"eth0"};
  CollectiveAnalyzer a(Ports(), recorder_, o);
  v1::Collective other = Coll(1, 10 * kMs, 90 * kMs);  // another job's, busy before mine
  other.set_comm_hash(0xdef);
  other.set_proxy_bytes(900);
  AddCollective(a, other);
  v1::Batch b;
  a.Process(95 * kMs, &b);
  ASSERT_EQ(b.collectives_size(), 1);  // nothing else ran: it goes at once
  v1::Collective mine = Coll(2, 100 * kMs, 200 * kMs);
  mine.set_proxy_bytes(1'000);
  AddCollective(a, mine);
  b.Clear();
  a.Process(300 * kMs, &b);
  EXPECT_EQ(b.collectives_size(), 0);  // 0xdef has not reported past 200 ms: it waits
  v1::Collective longer = other;       // its collective that ran through mine, reported late
  longer.set_start_ns(90 * kMs);
  longer.set_end_ns(290 * kMs);
  longer.set_proxy_bytes(2'000);
  AddCollective(a, longer);
  b.Clear();
  a.Process(310 * kMs, &b);
  ASSERT_GE(b.collectives_size(), 1);
  const v1::CollectiveAnalysis& got = b.collectives(0).analysis();
  ASSERT_EQ(got.sharers_size(), 1);
  EXPECT_EQ(got.sharers(0).comm_hash(), 0xdefu);
  EXPECT_EQ(got.sharers(0).bytes(), 1'000u);  // 100 of its 200 ms
  ASSERT_EQ(b.collectives_size(), 1);         // 0xdef's own waits for mine to report past 290 ms
  // Another of mine, and 0xdef silent since 290 ms: it waits until 0.5 s past its end (0xdef's
  // goes 0.5 s past its own).
  v1::Collective next = Coll(3, 300 * kMs, 400 * kMs);
  next.set_proxy_bytes(1'000);
  AddCollective(a, next);
  b.Clear();
  a.Process(900 * kMs, &b);
  ASSERT_EQ(b.collectives_size(), 1);
  EXPECT_EQ(b.collectives(0).comm_hash(), 0xdefu);
  b.Clear();
  a.Process(901 * kMs, &b);
  ASSERT_EQ(b.collectives_size(), 1);
  EXPECT_EQ(b.collectives(0).seq(), 3u);
}

// The competing-flow rule weighs the ports' bytes against the node's own bytes of the
// communicator: two local ranks whose transfers share the port are not each other's competing
// flow, where one rank's proxy bytes alone would read 2x.
TEST_F(CollectivePathTest, LocalRanksOfOneCommunicatorAreNotAnotherFlow) {
  Fill(recorder_, 0, 0, 3000, 0.5);  // 750,000 bytes per 1 ms sample, both directions
  CollectiveAnalysisOptions o;
  o.delay_ns = 0;
  o.rails = {"eth0"};
  CollectiveAnalyzer a(Ports(), recorder_, o);
  v1::Batch b;
  // Both local ranks' records of an instance arrive, then it is analysed (as the samples come in).
  auto add = [&](uint64_t seq, int64_t start_ms, int64_t ms, double share = 0.5) {
    for (int rank : {1, 2}) {  // `share` of the port's bytes each
      v1::Collective c = Coll(seq, start_ms * kMs, (start_ms + ms) * kMs);
      c.set_rank(rank);
      c.set_proxy_bytes(static_cast<uint64_t>(share * 750'000.0 * static_cast<double>(ms)));
      AddCollective(a, c);
    }
    a.Process((start_ms + ms) * kMs, &b, /*close_window=*/false);
  };
  for (int i = 0; i < 40; ++i) add(i, i * 50 + 1, 10);
  add(40, 2100, 20);  // slow, and both ranks' bytes are all the port moved
  // Slow, and half the port's bytes another flow's: the clean instances above are the baseline
  // it is judged against (with one rank's bytes as its own, none would have been clean).
  add(41, 2200, 20, 0.25);
  ASSERT_EQ(b.collectives_size(), 84);
  for (int i = 0; i < 82; ++i) {
    const v1::CollectiveAnalysis& r = b.collectives(i).analysis();
    EXPECT_EQ(r.cause(), v1::COLLECTIVE_CAUSE_NORMAL) << i << ": " << r.detail();
    EXPECT_NEAR(static_cast<double>(r.own_bytes()), 750'000.0 * (i >= 80 ? 20 : 10), 2) << i;
  }
  for (int i : {82, 83}) {
    const v1::CollectiveAnalysis& r = b.collectives(i).analysis();
    EXPECT_EQ(r.cause(), v1::COLLECTIVE_CAUSE_NETWORK_SATURATED) << i << ": " << r.detail();
    EXPECT_NE(r.detail().find("moved 2.00x the collective's own 7500000"), std::string::npos)
        << r.detail();
  }
}

}  // namespace
}  // namespace fabricscope::agent

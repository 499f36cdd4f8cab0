#include "agent/collective_analysis.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "tests/agent/collective_test_util.h"

namespace fabricscope::agent {
namespace {

using namespace collective_test;  // NOLINT: the shared helpers

class CollectiveAnalysisTest : public ::testing::Test {
 protected:
  CollectiveAnalysisTest() : recorder_(3, 10, kMs) {}
  FlightRecorder recorder_;
};

TEST_F(CollectiveAnalysisTest, CandidatesAreNetdevsWithoutRdma) {
  CollectiveAnalyzer a(Ports(), recorder_, {});
  EXPECT_EQ(a.candidate_ports(), (std::vector<uint32_t>{0, 2}));
  CollectiveAnalysisOptions o;
  o.rails = {"eth1"};
  CollectiveAnalyzer b(Ports(), recorder_, o);
  EXPECT_EQ(b.candidate_ports(), (std::vector<uint32_t>{2}));
}

TEST_F(CollectiveAnalysisTest, BytesArePartsOfTheOverlappingSamples) {
  Fill(recorder_, 0, 0, 100, 0.5);  // 500,000 tx bytes per ms
  CollectiveAnalyzer a(Ports(), recorder_, {});
  // [10.5 ms, 20.25 ms]: 9.75 samples' worth.
  const v1::CollectiveAnalysis r = a.Analyze(Coll(1, 10 * kMs + kMs / 2, 20 * kMs + kMs / 4));
  ASSERT_EQ(r.ports_size(), 2);
  EXPECT_EQ(r.ports(0).port_index(), 0u);
  EXPECT_EQ(r.ports(0).transmit_bytes(), 4'875'000u);
  EXPECT_EQ(r.ports(0).receive_bytes(), 2'437'500u);
  EXPECT_EQ(r.ports(0).samples(), 11u);
  EXPECT_NEAR(r.ports(0).mean_utilization(), 0.5, 1e-9);
  EXPECT_NEAR(r.ports(0).peak_utilization(), 0.5, 1e-6);
  EXPECT_EQ(r.ports(0).saturated_ratio(), 0);
  EXPECT_EQ(r.ports(1).samples(), 0u);  // eth1 has no samples
  EXPECT_EQ(r.cause(), v1::COLLECTIVE_CAUSE_NORMAL);
  EXPECT_EQ(r.port_index(), 0);
}

TEST_F(CollectiveAnalysisTest, SaturatedPortNamesTheCause) {
  Fill(recorder_, 0, 0, 100, 0.3);
  Fill(recorder_, 2, 0, 40, 0.2);
  Fill(recorder_, 2, 40, 100, 0.97);
  CollectiveAnalyzer a(Ports(), recorder_, {});
  // [30, 80] ms: eth1 saturated for 40 of 50 ms.
  const v1::CollectiveAnalysis r = a.Analyze(Coll(1, 30 * kMs, 80 * kMs));
  EXPECT_EQ(r.cause(), v1::COLLECTIVE_CAUSE_NETWORK_SATURATED);
  EXPECT_EQ(r.port_index(), 2);
  EXPECT_NEAR(r.ports(1).saturated_ratio(), 0.8, 1e-9);
  EXPECT_NE(r.detail().find("eth1"), std::string::npos) << r.detail();
}

TEST_F(CollectiveAnalysisTest, MicroburstOverlapCountsAsSaturation) {
  Fill(recorder_, 0, 0, 100, 0.5);
  CollectiveAnalyzer a(Ports(), recorder_, {});
  a.OnMicroburst(0, 5 * kMs, 25 * kMs);  // overlaps [10, 40] by 15 ms: half
  const v1::CollectiveAnalysis r = a.Analyze(Coll(1, 10 * kMs, 40 * kMs));
  EXPECT_EQ(r.ports(0).microbursts(), 1u);
  EXPECT_NEAR(r.ports(0).microburst_seconds(), 0.015, 1e-12);
  EXPECT_EQ(r.cause(), v1::COLLECTIVE_CAUSE_NETWORK_SATURATED);
  // A burst after the collective does not count.
  EXPECT_EQ(a.Analyze(Coll(2, 50 * kMs, 90 * kMs)).cause(), v1::COLLECTIVE_CAUSE_NORMAL);
}

// A link that retrained (OnLineRate, from the pipeline) judges the collectives analysed from
// then on at its new rate: 50% of 1 GB/s is 100% of the 0.5 GB/s the port now runs at.
TEST_F(CollectiveAnalysisTest, ALinkThatRetrainedIsJudgedAtItsNewRate) {
  Fill(recorder_, 0, 0, 100, 0.5);
  CollectiveAnalyzer a(Ports(), recorder_, {});
  v1::CollectiveAnalysis r = a.Analyze(Coll(1, 10 * kMs, 40 * kMs));
  EXPECT_EQ(r.cause(), v1::COLLECTIVE_CAUSE_NORMAL);
  EXPECT_NEAR(r.ports(0).mean_utilization(), 0.5, 1e-9);
  a.OnLineRate(0, 50 * kMs, kRate / 2);
  a.OnLineRate(7, 50 * kMs, kRate / 2);  // no such port: ignored
  a.OnLineRate(2, 50 * kMs, 0);          // no rate (link down): the last one stays
  r = a.Analyze(Coll(2, 10 * kMs, 40 * kMs));
  EXPECT_NEAR(r.ports(0).mean_utilization(), 1.0, 1e-9);
  EXPECT_NEAR(r.ports(1).mean_utilization(), 0, 1e-9);  // eth1: no samples, rate unchanged
  EXPECT_EQ(r.cause(), v1::COLLECTIVE_CAUSE_NETWORK_SATURATED);
  EXPECT_EQ(r.port_index(), 0);
}

TEST_F(CollectiveAnalysisTest, LossInsideTheIntervalMakesItLossy) {
  Fill(recorder_, 0, 0, 100, 0.97);  // saturated too: loss wins
  Fill(recorder_, 2, 0, 100, 0.5);
  CollectiveAnalysisOptions o;
  o.lossy_min_ratio = 1e-6;  // any retransmission counts
  CollectiveAnalyzer a(Ports(), recorder_, o);
  a.OnCounterDelta(1, 0, 60 * kMs, 70 * kMs, 3);  // TCP retransmits: every netdev
  a.OnCounterDelta(0, 0, 0, 10 * kMs, 9);         // rx_dropped, before the collective
  v1::CollectiveAnalysis r = a.Analyze(Coll(1, 20 * kMs, 65 * kMs));
  EXPECT_EQ(r.cause(), v1::COLLECTIVE_CAUSE_NETWORK_LOSSY);
  EXPECT_EQ(r.ports(0).retransmits(), 3u);
  EXPECT_EQ(r.ports(1).retransmits(), 3u);
  EXPECT_EQ(r.ports(0).loss_events(), 0u);
  // Same interval, no retransmits: the drop at [0, 10] ms does not overlap [20, 55].
  r = a.Analyze(Coll(2, 20 * kMs, 55 * kMs));
  EXPECT_EQ(r.cause(), v1::COLLECTIVE_CAUSE_NETWORK_SATURATED);
  r = a.Analyze(Coll(3, 5 * kMs, 15 * kMs));
  EXPECT_EQ(r.ports(0).loss_events(), 9u);
  EXPECT_EQ(r.cause(), v1::COLLECTIVE_CAUSE_NETWORK_LOSSY);
  EXPECT_EQ(r.port_index(), 0);
  // By default the events must reach 2% of the packets moved (bytes / 1500): 3 retransmits in
  // ~65 MB (~44,000 packets) is not a lossy link, 1,000 are.
  CollectiveAnalyzer b(Ports(), recorder_, {});
  b.OnCounterDelta(1, 0, 60 * kMs, 70 * kMs, 3);
  EXPECT_EQ(b.Analyze(Coll(1, 20 * kMs, 65 * kMs)).cause(), v1::COLLECTIVE_CAUSE_NETWORK_SATURATED);
  b.OnCounterDelta(1, 0, 60 * kMs, 70 * kMs, 997);
  EXPECT_EQ(b.Analyze(Coll(1, 20 * kMs, 65 * kMs)).cause(), v1::COLLECTIVE_CAUSE_NETWORK_LOSSY);
}

// One mlx5 buffer drop raises rx_discards_phy and rx_prio<p>_discards (exporters/
// loss_patterns.h IsLossBreakdown): the collective's loss events count it once.
TEST_F(CollectiveAnalysisTest, APerPriorityDiscardCountsOnceWithTheDiscardsOfThePort) {
  std::vector<PortDescriptor> ports = Ports();
  for (const char* name : {"rx_discards_phy", "rx_prio3_discards"}) {
    CounterDescriptor c;
    c.name = name;
    c.group = "ethtool";
    c.role = CounterRole::kOther;
    c.meaning = collectors::MeaningOf(c.group, c.name).meaning;
    ports[0].counters.push_back(c);  // counters 2 and 3 of eth0
  }
  Fill(recorder_, 0, 0, 100, 0.2);
  CollectiveAnalyzer a(ports, recorder_, {});
  a.OnCounterDelta(0, 2, 20 * kMs, 30 * kMs, 4);  // rx_discards_phy
  a.OnCounterDelta(0, 3, 20 * kMs, 30 * kMs, 4);  // rx_prio3_discards: the same 4 drops
  EXPECT_EQ(a.Analyze(Coll(1, 10 * kMs, 40 * kMs)).ports(0).loss_events(), 4u);
}

// An InfiniBand link shows congestion as time waiting for credits (PortXmitWait), not as ECN:
// a collective whose port waited for 40% of it is network_saturated on that port even at a low
// utilization, and the detail says so.
TEST_F(CollectiveAnalysisTest, TransmitWaitMakesItSaturated) {
  std::vector<PortDescriptor> ports = Ports();
  ports[0].lanes = 4;  // 4X at kRate
  CounterDescriptor wait;
  wait.name = "port_xmit_wait";
  wait.group = "counters";
  wait.role = CounterRole::kOther;
  wait.meaning = collectors::MeaningOf(wait.group, wait.name).meaning;
  ports[0].counters.push_back(wait);  // counter 2 of eth0
  Fill(recorder_, 0, 0, 100, 0.2);
  CollectiveAnalyzer a(ports, recorder_, {});
  const double tick = 4.0 / static_cast<double>(kRate);
  const auto ticks = static_cast<uint64_t>(std::llround(0.4 * 0.05 / tick));  // 40% of 50 ms
  a.OnCounterDelta(0, 2, 30 * kMs, 80 * kMs, ticks);
  const v1::CollectiveAnalysis r = a.Analyze(Coll(1, 30 * kMs, 80 * kMs));
  EXPECT_NEAR(r.ports(0).transmit_wait_seconds(), 0.02, 1e-9);
  EXPECT_EQ(r.cause(), v1::COLLECTIVE_CAUSE_NETWORK_SATURATED);
  EXPECT_EQ(r.port_index(), 0);
  EXPECT_NE(r.detail().find("waited for credits 40% of it (port_xmit_wait)"), std::string::npos)
      << r.detail();
  // The same wait outside the interval leaves it normal.
  EXPECT_EQ(a.Analyze(Coll(2, 85 * kMs, 99 * kMs)).cause(), v1::COLLECTIVE_CAUSE_NORMAL);
}

// Packet-capture loss events count on the captured interface's port, inside the interval only,
// and only the kinds that mean a lost packet.
TEST_F(CollectiveAnalysisTest, CapturedLossOnTheCapturedInterfaceMakesItLossy) {
  Fill(recorder_, 0, 0, 100, 0.5);
  Fill(recorder_, 2, 0, 100, 0.5);
  CollectiveAnalysisOptions o;
  o.lossy_min_ratio = 1e-6;
  CollectiveAnalyzer a(Ports(), recorder_, o);
  const int64_t offset = 1'700'000'000'000'000'000;  // unix = monotonic + offset
  v1::CaptureWindow w;
  w.set_interface("eth1");
  auto add = [&](const char* kind, int64_t mono_ns) {
    v1::PacketLossEvent* e = w.add_loss_events();
    e->set_kind(kind);
    e->set_time_unix_ns(mono_ns + offset);
  };
  add("psn_gap", 30 * kMs);
  add("go_back_n", 31 * kMs);
  add("fast_retransmission", 45 * kMs);
  add("spurious_retransmission", 40 * kMs);  // no packet was lost
  add("rnr_nak", 41 * kMs);                  // the receiver was not ready: not the network
  add("retransmission", 90 * kMs);           // after the collective
  EXPECT_EQ(a.AddCaptureLoss(w, offset), 4u);
  const v1::CollectiveAnalysis r = a.Analyze(Coll(1, 20 * kMs, 60 * kMs));
  ASSERT_EQ(r.ports_size(), 2);
  EXPECT_EQ(r.ports(0).captured_loss_events(), 0u);  // eth0 was not captured
  EXPECT_EQ(r.ports(1).captured_loss_events(), 3u);
  EXPECT_EQ(r.cause(), v1::COLLECTIVE_CAUSE_NETWORK_LOSSY);
  EXPECT_EQ(r.port_index(), 2);
  EXPECT_NE(r.detail().find("3 loss events in the capture"), std::string::npos) << r.detail();
  // The counters see the same losses: the larger count decides, they are not added up.
  a.OnCounterDelta(1, 0, 25 * kMs, 35 * kMs, 2);  // TCP RetransSegs
  const v1::CollectiveAnalysis both = a.Analyze(Coll(1, 20 * kMs, 60 * kMs));
  EXPECT_EQ(both.ports(1).retransmits(), 2u);
  EXPECT_EQ(both.ports(1).captured_loss_events(), 3u);
  EXPECT_EQ(both.cause(), v1::COLLECTIVE_CAUSE_NETWORK_LOSSY);
  // Before the losses: normal.
  EXPECT_EQ(a.Analyze(Coll(2, 2 * kMs, 20 * kMs)).cause(), v1::COLLECTIVE_CAUSE_NORMAL);
  // A capture on an interface the collectives cannot use is not joined.
  w.set_interface("eth9");
  EXPECT_EQ(a.AddCaptureLoss(w, offset), 0u);
  w.set_interface("");
  EXPECT_EQ(a.AddCaptureLoss(w, offset), 0u);
}

// With the default ratio rule (2%), captured events are weighed against the packets moved: 3 in
// 30 MB (~20,000 packets of 1,500 bytes) is not a lossy link, 1,000 are.
TEST_F(CollectiveAnalysisTest, CapturedLossIsWeighedAgainstThePacketsMoved) {
  Fill(recorder_, 2, 0, 100, 0.5);
  CollectiveAnalyzer a(Ports(), recorder_, {});
  v1::CaptureWindow w;
  w.set_interface("eth1");
  for (int i = 0; i < 3; ++i) {
    v1::PacketLossEvent* e = w.add_loss_events();
    e->set_kind("psn_gap");
    e->set_time_unix_ns(30 * kMs + i);
  }
  a.AddCaptureLoss(w, 0);
  EXPECT_EQ(a.Analyze(Coll(1, 20 * kMs, 60 * kMs)).cause(), v1::COLLECTIVE_CAUSE_NORMAL);
  w.clear_loss_events();
  for (int i = 0; i < 997; ++i) {
    v1::PacketLossEvent* e = w.add_loss_events();
    e->set_kind("retransmission");
    e->set_time_unix_ns(40 * kMs + i);
  }
  a.AddCaptureLoss(w, 0);
  const v1::CollectiveAnalysis r = a.Analyze(Coll(1, 20 * kMs, 60 * kMs));
  EXPECT_EQ(r.ports(1).captured_loss_events(), 1000u);
  EXPECT_EQ(r.cause(), v1::COLLECTIVE_CAUSE_NETWORK_LOSSY);
}

TEST_F(CollectiveAnalysisTest, ShortSamplesAreMergedBeforeJudgingUtilization) {
  // 1 ms samples at 0.5, but a late tick leaves a 100 us sample holding 300,000 bytes (3.0 on
  // its own): merged with the next 1.9 ms sample it is 0.375.
  for (int t = 1; t <= 50; ++t) {
    FlightSample s;
    s.interval_ns = kMs;
    s.t_ns = t * kMs;
    s.tx_bytes = 500'000;
    if (t == 20) {
      s.t_ns = 19 * kMs + kMs / 10;
      s.interval_ns = kMs / 10;
      s.tx_bytes = 300'000;
    } else if (t == 21) {
      s.interval_ns = 1900 * 1000;
      s.t_ns = 21 * kMs;
      s.tx_bytes = 450'000;
    }
    recorder_.Record(0, s);
  }
  CollectiveAnalysisOptions o;
  o.sample_period_ns = kMs;
  CollectiveAnalyzer a(Ports(), recorder_, o);
  const v1::CollectiveAnalysis r = a.Analyze(Coll(1, 10 * kMs, 40 * kMs));
  EXPECT_NEAR(r.ports(0).peak_utilization(), 0.5, 1e-9);
  EXPECT_EQ(r.ports(0).saturated_ratio(), 0);
}

TEST_F(CollectiveAnalysisTest, PauseAboveTheRatioIsLossy) {
  Fill(recorder_, 0, 0, 100, 0.5);
  CollectiveAnalyzer a(Ports(), recorder_, {});
  a.OnCounterDelta(0, 1, 30 * kMs, 40 * kMs, 400);  // 400 us paused in a 20 ms collective: 2%
  const v1::CollectiveAnalysis r = a.Analyze(Coll(1, 30 * kMs, 50 * kMs));
  EXPECT_NEAR(r.ports(0).pause_seconds(), 0.0004, 1e-12);
  EXPECT_EQ(r.cause(), v1::COLLECTIVE_CAUSE_NETWORK_LOSSY);
  EXPECT_NE(r.detail().find("0.0004 s paused during it (PFC, 2% of its duration)"),
            std::string::npos)
      << r.detail();
  CollectiveAnalysisOptions o;
  o.lossy_min_pause_ratio = 0.05;
  CollectiveAnalyzer b(Ports(), recorder_, o);
  b.OnCounterDelta(0, 1, 30 * kMs, 40 * kMs, 400);
  EXPECT_EQ(b.Analyze(Coll(1, 30 * kMs, 50 * kMs)).cause(), v1::COLLECTIVE_CAUSE_NORMAL);
}

TEST_F(CollectiveAnalysisTest, IdleLinksMeanWaitingOnPeers) {
  Fill(recorder_, 0, 0, 100, 0.05);
  Fill(recorder_, 2, 0, 100, 0.1);
  CollectiveAnalyzer a(Ports(), recorder_, {});
  v1::CollectiveAnalysis r = a.Analyze(Coll(1, 10 * kMs, 60 * kMs));
  EXPECT_EQ(r.cause(), v1::COLLECTIVE_CAUSE_WAITING_ON_PEERS);
  EXPECT_EQ(r.port_index(), 2);  // the busiest port
  // Too short to call it waiting: latency-bound.
  r = a.Analyze(Coll(2, 10 * kMs, 11 * kMs));
  EXPECT_EQ(r.cause(), v1::COLLECTIVE_CAUSE_NORMAL);
  // No samples at all.
  EXPECT_EQ(a.Analyze(Coll(3, 500 * kMs, 600 * kMs)).cause(), v1::COLLECTIVE_CAUSE_UNKNOWN);
}

// An enqueue-only interval (no completion signal) is microseconds of host work: not joined.
TEST_F(CollectiveAnalysisTest, IntervalsWithoutCompletionAreNotJoined) {
  Fill(recorder_, 0, 0, 100, 0.5);
  CollectiveAnalyzer a(Ports(), recorder_, {});
  v1::Collective enqueued = Coll(1, 10 * kMs, 10 * kMs + 2000);
  enqueued.set_timing_source(v1::TIMING_SOURCE_ENQUEUE_ONLY);
  v1::Batch b;
  AddCollective(a, enqueued, &b);
  ASSERT_EQ(b.collectives_size(), 1);  // sent at once, without an analysis
  EXPECT_FALSE(b.collectives(0).has_analysis());
  AddCollective(a, Coll(2, 20 * kMs, 50 * kMs), &b);
  EXPECT_EQ(b.collectives_size(), 1);  // queued until its samples are in
  b.set_window_start_ns(0);
  b.set_window_end_ns(100 * kMs);
  a.Process(100 * kMs, &b);
  ASSERT_EQ(b.collectives_size(), 2);
  EXPECT_EQ(b.collectives(0).seq(), 1u);
  EXPECT_EQ(b.collectives(1).seq(), 2u);
  EXPECT_TRUE(b.collectives(1).has_analysis());
  EXPECT_EQ(b.collective_analysis().analyzed_total(), 1u);
}

// Past max_pending a collective is sent at once without an analysis (and counted), and at
// shutdown Release sends the queued ones: a record is never lost for want of its analysis.
TEST_F(CollectiveAnalysisTest, APendingQueueFullOrReleasedStillSendsEveryCollective) {
  Fill(recorder_, 0, 0, 100, 0.5);
  CollectiveAnalysisOptions o;
  o.max_pending = 1;
  CollectiveAnalyzer a(Ports(), recorder_, o);
  v1::Batch b;
  AddCollective(a, Coll(1, 10 * kMs, 20 * kMs), &b);
  AddCollective(a, Coll(2, 30 * kMs, 40 * kMs), &b);
  ASSERT_EQ(b.collectives_size(), 1);
  EXPECT_EQ(b.collectives(0).seq(), 2u);
  EXPECT_FALSE(b.collectives(0).has_analysis());
  EXPECT_EQ(a.Release(&b), 1u);
  ASSERT_EQ(b.collectives_size(), 2);
  EXPECT_EQ(b.collectives(1).seq(), 1u);
  EXPECT_FALSE(b.collectives(1).has_analysis());
  v1::Batch next;
  next.set_window_start_ns(0);
  next.set_window_end_ns(100 * kMs);
  a.Process(100 * kMs, &next);
  EXPECT_EQ(next.collectives_size(), 0);  // released: not sent twice
  EXPECT_EQ(next.collective_analysis().dropped_total(), 1u);
  EXPECT_EQ(next.collective_analysis().pending(), 0u);
}

TEST_F(CollectiveAnalysisTest, WaitsForTheSamplesBeforeAnalysing) {
  Fill(recorder_, 0, 0, 100, 0.5);
  CollectiveAnalyzer a(Ports(), recorder_, {});  // delay 25 ms
  AddCollective(a, Coll(1, 10 * kMs, 50 * kMs));
  AddCollective(a, Coll(2, 60 * kMs, 90 * kMs));
  v1::Batch b1;
  b1.set_window_start_ns(0);
  b1.set_window_end_ns(100 * kMs);
  a.Process(100 * kMs, &b1);
  ASSERT_EQ(b1.collectives_size(), 1);
  EXPECT_EQ(b1.collectives(0).seq(), 1u);
  EXPECT_EQ(b1.collective_analysis().pending(), 1u);
  v1::Batch b2;
  b2.set_window_start_ns(100 * kMs);
  b2.set_window_end_ns(200 * kMs);
  a.Process(200 * kMs, &b2);
  ASSERT_EQ(b2.collectives_size(), 1);
  EXPECT_EQ(b2.collectives(0).seq(), 2u);
  EXPECT_EQ(b2.collective_analysis().analyzed_total(), 2u);
  EXPECT_EQ(b2.collective_analysis().by_cause_total().at("normal"), 2u);
  // Share over the previous window [0, 100) ms: 40 + 30 ms.
  EXPECT_NEAR(b2.collective_analysis().network_share_ratio(), 0.7, 1e-9);
  EXPECT_FALSE(b2.collective_analysis().step_marker());
}

TEST_F(CollectiveAnalysisTest, StepMarkerMeasuresTheShareOfIterations) {
  CollectiveAnalysisOptions o;
  o.step_marker = "AllReduce";
  o.delay_ns = 0;
  CollectiveAnalyzer a(Ports(), recorder_, o);
  // Iterations of 100 ms starting with a 25 ms all-reduce.
  for (int i = 0; i < 5; ++i)
    AddCollective(a, Coll(i, i * 100 * kMs + 1, i * 100 * kMs + 25 * kMs + 1));
  v1::Batch b;
  b.set_window_start_ns(1000 * kMs);
  b.set_window_end_ns(2000 * kMs);
  a.Process(1000 * kMs, &b);
  EXPECT_TRUE(b.collective_analysis().step_marker());
  EXPECT_NEAR(b.collective_analysis().share_seconds(), 0.4, 1e-9);  // 4 complete iterations
  EXPECT_NEAR(b.collective_analysis().network_share_ratio(), 0.25, 1e-9);
}

TEST_F(CollectiveAnalysisTest, SlowCollectiveGetsTheRecorderSamples) {
  Fill(recorder_, 0, 0, 3000, 0.5);
  CollectiveAnalysisOptions o;
  o.delay_ns = 0;
  o.recordings_per_window = 64;
  CollectiveAnalyzer a(Ports(), recorder_, o);
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> jitter(0, 1000);
  for (int i = 0; i < 40; ++i) {  // 10-11 ms each
    const int64_t s = i * 50 * kMs + 1;
    AddCollective(a, Coll(i, s, s + 10 * kMs + jitter(rng) * 1000));
  }
  AddCollective(a, Coll(40, 2500 * kMs, 2530 * kMs));  // 30 ms
  v1::Batch b;
  b.set_window_start_ns(2000 * kMs);
  b.set_window_end_ns(3000 * kMs);
  a.Process(3000 * kMs, &b);
  ASSERT_EQ(b.collectives_size(), 41);
  int slow = 0;
  for (const auto& c : b.collectives()) slow += c.analysis().slow() ? 1 : 0;
  const v1::CollectiveAnalysis& last = b.collectives(40).analysis();
  EXPECT_TRUE(last.slow());
  EXPECT_GT(last.p99_seconds(), 0.010);
  EXPECT_LT(last.p99_seconds(), 0.0115);
  EXPECT_LE(slow, 6);  // a few of the jittered ones exceed the running estimate
  ASSERT_GE(b.flight_recordings_size(), 1);
  const v1::FlightRecording& r = b.flight_recordings(b.flight_recordings_size() - 1);
  EXPECT_EQ(r.reason(), "slow_collective");
  EXPECT_EQ(r.port_index(), 0u);
  // 30 ms + 10 ms margin each side at 1 ms.
  EXPECT_EQ(r.time_ns_size(), 51);
  EXPECT_EQ(b.collective_analysis().slow_total(), static_cast<uint64_t>(slow));
}

// The slow-tail rule: a loss far below 2% of the packets names the collective network_lossy
// when it took >= lossy_tail_ratio x its kind's clean median; the same loss in a collective of
// ordinary length, or while the rank's links sat idle waiting for a peer, does not.
TEST_F(CollectiveAnalysisTest, LossInTheSlowTailIsLossyWhateverItsShare) {
  Fill(recorder_, 0, 0, 2600, 0.5);
  Fill(recorder_, 0, 2600, 3000, 0.05);  // idle from 2.6 s: waiting on peers
  Fill(recorder_, 2, 0, 3000, 0.05);
  CollectiveAnalysisOptions o;
  o.delay_ns = 0;
  o.lossy_min_rate = 0;  // the tail rule alone (the rate rule: the next test)
  o.lossy_min_hits = 1;  // a single lossy collective here: no recurrence test
  o.lossy_max_p_value = 1;
  for (const double tail : {1.05, 0.0}) {
    o.lossy_tail_ratio = tail;
    CollectiveAnalyzer a(Ports(), recorder_, o);
    std::mt19937 rng(11);
    std::uniform_int_distribution<int> jitter(0, 400);
    for (int i = 0; i < 40; ++i) {  // clean: 10.0-10.4 ms
      const int64_t s = i * 50 * kMs + 1;
      AddCollective(a, Coll(i, s, s + 10 * kMs + jitter(rng) * 1000));
    }
    // 3 TCP retransmissions (~0.07% of ~4,000 packets) in each of the next four.
    for (int64_t at : {2100, 2200, 2300, 2700}) a.OnCounterDelta(1, 0, at * kMs, (at + 5) * kMs, 3);
    AddCollective(a, Coll(40, 2100 * kMs, 2112 * kMs));           // 12 ms: 1.17x the clean median
    AddCollective(a, Coll(41, 2200 * kMs, 2210 * kMs));           // 10 ms: not in the tail
    AddCollective(a, Coll(42, 2300 * kMs, 2312 * kMs, 1 << 26));  // another kind: no history
    AddCollective(a, Coll(43, 2700 * kMs, 2712 * kMs));  // 12 ms, but idle: waiting on peers
    AddCollective(a, Coll(44, 2400 * kMs, 2412 * kMs));  // 12 ms, no loss: slow, not lossy
    v1::Batch b;
    b.set_window_start_ns(2000 * kMs);
    b.set_window_end_ns(3000 * kMs);
    a.Process(3000 * kMs, &b);
    ASSERT_EQ(b.collectives_size(), 45);
    int lossy_clean = 0;
    for (int i = 0; i < 40; ++i) {
      lossy_clean += b.collectives(i).analysis().cause() == v1::COLLECTIVE_CAUSE_NETWORK_LOSSY;
    }
    EXPECT_EQ(lossy_clean, 0);
    const v1::CollectiveAnalysis& tail_loss = b.collectives(40).analysis();
    if (tail > 0) {
      EXPECT_EQ(tail_loss.cause(), v1::COLLECTIVE_CAUSE_NETWORK_LOSSY) << tail_loss.detail();
      EXPECT_EQ(tail_loss.port_index(), 0);
      EXPECT_NE(tail_loss.detail().find("3 retransmitted"), std::string::npos)
          << tail_loss.detail();
      EXPECT_NE(tail_loss.detail().find("took 1.1"), std::string::npos) << tail_loss.detail();
    } else {
      EXPECT_EQ(tail_loss.cause(), v1::COLLECTIVE_CAUSE_NORMAL) << tail_loss.detail();
    }
    EXPECT_EQ(b.collectives(41).analysis().cause(), v1::COLLECTIVE_CAUSE_NORMAL);
    EXPECT_EQ(b.collectives(42).analysis().cause(), v1::COLLECTIVE_CAUSE_NORMAL);
    EXPECT_EQ(b.collectives(43).analysis().cause(), v1::COLLECTIVE_CAUSE_WAITING_ON_PEERS);
    EXPECT_EQ(b.collectives(44).analysis().cause(), v1::COLLECTIVE_CAUSE_NORMAL);
  }
}

// The persistent-loss rule: once a port's collectives carry loss far more often than a healthy
// port's (the binomial test over a suffix of its last 16) and its events there reach 2e-4 of
// its packets, each collective that carried one is network_lossy, slowed or not; a spurious
// event now and then on a clean port, or one burst, never gets there.
TEST_F(CollectiveAnalysisTest, PersistentlyLossyPortNamesTheCollectivesThatCarriedLoss) {
  Fill(recorder_, 0, 0, 4000, 0.5);  // ~5,000 packets per 10 ms collective
  Fill(recorder_, 2, 0, 4000, 0.5);
  CollectiveAnalysisOptions o;
  o.delay_ns = 0;
  o.lossy_tail_ratio = 0;  // the rate rule alone
  CollectiveAnalyzer a(Ports(), recorder_, o);
  for (int i = 0; i < 80; ++i) {
    const int64_t s = i * 50 * kMs + 1;
    AddCollective(a, Coll(i, s, s + 10 * kMs));
    // Clean: one dropped frame every 10th collective (2e-5), and at 20 a burst of 40 in one
    // collective (a host stall's retransmission timeouts: not recurring). From 40 on: 4 per
    // collective (8e-4).
    const uint64_t drops = i < 40 ? (i % 10 == 5 ? 1 : i == 20 ? 40 : 0) : 4;
    if (drops > 0) a.OnCounterDelta(0, 0, s + 2 * kMs, s + 3 * kMs, drops);
  }
  v1::Batch b;
  b.set_window_start_ns(0);
  b.set_window_end_ns(4000 * kMs);
  a.Process(4000 * kMs, &b);
  ASSERT_EQ(b.collectives_size(), 80);
  int first_named = -1;
  for (int i = 0; i < 80; ++i) {
    const v1::CollectiveAnalysis& c = b.collectives(i).analysis();
    if (i < 40) {
      EXPECT_NE(c.cause(), v1::COLLECTIVE_CAUSE_NETWORK_LOSSY) << i << ": " << c.detail();
    } else if (c.cause() == v1::COLLECTIVE_CAUSE_NETWORK_LOSSY) {
      if (first_named < 0) first_named = i;
      EXPECT_EQ(c.port_index(), 0);
      EXPECT_NE(c.detail().find("4 lost"), std::string::npos) << c.detail();
      EXPECT_NE(c.detail().find("of which carried loss (binomial p = "), std::string::npos)
          << c.detail();
      if (i == first_named) {
        EXPECT_NE(c.detail().find("over its last 4 collectives, 4 of which"), std::string::npos)
            << c.detail();
      }
    } else {
      EXPECT_LT(first_named, 0) << i << " not named after " << first_named;
    }
  }
  // 4 lossy collectives in a row: P(X >= 4), X ~ B(4, 0.1) = 1e-4; at 8e-4 of the packets.
  EXPECT_EQ(first_named, 43);
}

// A competing flow: the port moved twice the collective's own proxy bytes while it took twice
// its kind's clean median: network_saturated at 0.5 of line rate, where the utilization rule
// sees nothing. The same share in a collective of ordinary length, or a long collective that
// moved only its own bytes, is normal.
TEST_F(CollectiveAnalysisTest, AnotherFlowOnTheLinkIsSaturationEvenBelowLineRate) {
  Fill(recorder_, 0, 0, 3000, 0.5);  // tx 0.5 MB + rx 0.25 MB per 1 ms sample
  CollectiveAnalysisOptions o;
  o.delay_ns = 0;
  o.rails = {"eth0"};
  CollectiveAnalyzer a(Ports(), recorder_, o);
  auto add = [&](uint64_t seq, int64_t start_ms, int64_t ms, double own_share) {
    v1::Collective c = Coll(seq, start_ms * kMs, (start_ms + ms) * kMs);
    c.set_proxy_bytes(static_cast<uint64_t>(750'000.0 * static_cast<double>(ms) / own_share));
    AddCollective(a, c);
  };
  for (int i = 0; i < 40; ++i) add(i, i * 50 + 1, 10, 1.0);  // its own bytes only
  add(40, 2100, 20, 2.0);  // twice as long, half of the bytes someone else's
  add(41, 2200, 10, 2.0);  // the same share, not slow
  add(42, 2300, 20, 1.0);  // slow, but every byte its own
  v1::Batch b;
  b.set_window_start_ns(2000 * kMs);
  b.set_window_end_ns(3000 * kMs);
  a.Process(3000 * kMs, &b);
  ASSERT_EQ(b.collectives_size(), 43);
  for (int i = 0; i < 40; ++i) {
    EXPECT_EQ(b.collectives(i).analysis().cause(), v1::COLLECTIVE_CAUSE_NORMAL) << i;
  }
  const v1::CollectiveAnalysis& shared = b.collectives(40).analysis();
  EXPECT_EQ(shared.cause(), v1::COLLECTIVE_CAUSE_NETWORK_SATURATED) << shared.detail();
  EXPECT_EQ(shared.port_index(), 0);
  EXPECT_NE(shared.detail().find("moved 2.00x the collective's own"), std::string::npos)
      << shared.detail();
  EXPECT_NE(shared.detail().find("took 2.00x"), std::string::npos) << shared.detail();
  EXPECT_EQ(b.collectives(41).analysis().cause(), v1::COLLECTIVE_CAUSE_NORMAL);
  EXPECT_EQ(b.collectives(42).analysis().cause(), v1::COLLECTIVE_CAUSE_NORMAL);
}

// An early Process (close_window = false) appends the ready analyses and spends the window's
// recording budget, but writes no window stats; the window's Process then starts the budget
// again.
TEST_F(CollectiveAnalysisTest, EarlyProcessSharesTheWindowsRecordingBudget) {
  Fill(recorder_, 0, 0, 1000, 0.5);
  CollectiveAnalysisOptions o;
  o.delay_ns = 0;
  o.min_history = 1;
  o.recordings_per_window = 1;
  CollectiveAnalyzer a(Ports(), recorder_, o);
  AddCollective(a, Coll(1, 1 * kMs, 11 * kMs));
  AddCollective(a, Coll(2, 20 * kMs, 50 * kMs));  // slow: a recording of its busiest port
  v1::Batch early;
  a.Process(60 * kMs, &early, /*close_window=*/false);
  ASSERT_EQ(early.collectives_size(), 2);
  EXPECT_TRUE(early.collectives(1).analysis().slow());
  EXPECT_EQ(early.flight_recordings_size(), 1);
  EXPECT_FALSE(early.has_collective_analysis());
  AddCollective(a, Coll(3, 70 * kMs, 120 * kMs));  // slow again: the budget is spent
  v1::Batch window;
  window.set_window_start_ns(0);
  window.set_window_end_ns(200 * kMs);
  a.Process(200 * kMs, &window);
  ASSERT_EQ(window.collectives_size(), 1);
  EXPECT_TRUE(window.collectives(0).analysis().slow());
  EXPECT_EQ(window.flight_recordings_size(), 0);
  EXPECT_EQ(window.collective_analysis().analyzed_total(), 3u);
  EXPECT_EQ(window.collective_analysis().recordings_dropped_total(), 1u);
  AddCollective(a, Coll(4, 300 * kMs, 400 * kMs));
  v1::Batch next;
  a.Process(500 * kMs, &next, /*close_window=*/false);
  EXPECT_EQ(next.flight_recordings_size(), 1);  // a new window's budget
}

}  // namespace
}  // namespace fabricscope::agent

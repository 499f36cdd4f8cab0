#include "agent/pipeline.h"

#include <gtest/gtest.h>

#include <fstream>
#include <tuple>
#include <vector>

#include "collectors/common/utilization_codec.h"
#include "collectors/sysfs_ports.h"
#include "tests/common/units.h"

namespace fabricscope::agent {
namespace {

using collectors::CounterBehavior;
using collectors::CounterDescriptor;
using collectors::CounterRole;
using collectors::CounterSpec;
using collectors::PortDescriptor;
using collectors::ReadStatus;

constexpr int64_t kSec = 1'000'000'000;

// A netdev-like port: tx_bytes, rx_bytes, tx_packets, rx_packets, rx_errors (64-bit wrapping)
// plus symbol_error (16-bit saturating).
PortDescriptor TestPort(uint64_t rate_bps) {
  PortDescriptor p;
  p.device = "eth9";
  p.line_rate_bytes_per_second = rate_bps;
  auto add = [&](const char* name, CounterRole role, CounterSpec spec) {
    CounterDescriptor c;
    c.name = name;
    c.group = "statistics";
    c.role = role;
    c.spec = spec;
    p.counters.push_back(c);
  };
  add("tx_bytes", CounterRole::kTransmitBytes, {64, CounterBehavior::kWrapping, 1});
  add("rx_bytes", CounterRole::kReceiveBytes, {64, CounterBehavior::kWrapping, 1});
  add("tx_packets", CounterRole::kTransmitPackets, {64, CounterBehavior::kWrapping, 1});
  add("rx_packets", CounterRole::kReceivePackets, {64, CounterBehavior::kWrapping, 1});
  add("rx_errors", CounterRole::kError, {64, CounterBehavior::kWrapping, 1});
  add("symbol_error", CounterRole::kError, {16, CounterBehavior::kSaturating, 1});
  return p;
}

// Drives one TestPort: tick(t, tx) sets tx_bytes to an absolute value; other counters stay.
struct Driver {
  explicit Driver(uint64_t rate, PipelineOptions o = {}) : pipeline({TestPort(rate)}, o) {}
  void Tick(int64_t t, uint64_t tx, ReadStatus tx_status = ReadStatus::kOk) {
    values[0] = tx;
    status[0] = tx_status;
    pipeline.AddTick(t, values, status);
  }
  Pipeline pipeline;
  uint64_t values[6] = {0, 500, 0, 7, 3, 0};
  ReadStatus status[6] = {ReadStatus::kOk, ReadStatus::kOk, ReadStatus::kOk,
                          ReadStatus::kOk, ReadStatus::kOk, ReadStatus::kOk};
};

uint64_t FixtureValue(const std::string& rel) {
  std::ifstream in(std::string(FABRICSCOPE_TESTDATA) + "/sysfs-real/" + rel);
  uint64_t v = 0;
  in >> v;
  return v;
}

TEST(Pipeline, RdmaBytesAreFourTimesTheDataWordsOfTheRealTree) {
  auto r = collectors::DiscoverRdmaPorts(std::string(FABRICSCOPE_TESTDATA) + "/sysfs-real");
  ASSERT_TRUE(r.ok());
  Pipeline p(r->ports, {});
  size_t n = 0;
  for (const auto& port : r->ports) n += port.counters.size();
  std::vector<uint64_t> values;
  for (const auto& port : r->ports) {
    for (const auto& c : port.counters)
      values.push_back(FixtureValue(c.path.substr(c.path.find("class/"))));
  }
  std::vector<ReadStatus> status(n, ReadStatus::kOk);
  p.AddTick(100 * kMs, values.data(), status.data());
  // mlx5_0 (fourth port) sends 1000 more words and receives 10 more.
  const size_t mlx5 = n - r->ports[3].counters.size();
  values[mlx5 + 0] += 1000;  // port_xmit_data
  values[mlx5 + 1] += 10;    // port_rcv_data
  p.AddTick(200 * kMs, values.data(), status.data());
  p.AddTick(kSec, values.data(), status.data());  // closes [0.1 s, 1 s)
  auto batches = p.TakeReady();
  ASSERT_EQ(batches.size(), 1u);
  const v1::PortWindow& w = batches[0].ports(3);
  const uint64_t xmit = FixtureValue("class/infiniband/mlx5_0/ports/1/counters/port_xmit_data");
  const uint64_t rcv = FixtureValue("class/infiniband/mlx5_0/ports/1/counters/port_rcv_data");
  EXPECT_EQ(xmit, 2880761508848u);
  EXPECT_EQ(w.transmit().bytes_total(), 4 * (xmit + 1000));
  EXPECT_EQ(w.receive().bytes_total(), 4 * (rcv + 10));
  EXPECT_EQ(w.transmit().bytes(), 4000u);
  EXPECT_EQ(w.receive().bytes(), 40u);
  EXPECT_EQ(w.transmit().packets_total(),
            FixtureValue("class/infiniband/mlx5_0/ports/1/counters/port_xmit_packets"));
  // hfi1_0 did not move.
  EXPECT_EQ(batches[0].ports(0).transmit().bytes(), 0u);
  EXPECT_EQ(batches[0].ports(0).transmit().bytes_total(),
            4 * FixtureValue("class/infiniband/hfi1_0/ports/1/counters/port_xmit_data"));
}

TEST(Pipeline, UtilizationUsesMeasuredIntervals) {
  Driver d(1'000'000'000);  // 1e9 B/s: 1e6 bytes per ms is 100%
  d.Tick(10 * kMs, 0);
  d.Tick(12 * kMs, 1'000'000);  // 1e6 bytes over 2 ms: 0.5
  d.Tick(13 * kMs, 1'400'000);  // 4e5 over 1 ms: 0.4
  d.Tick(kSec, 1'400'000);
  auto b = d.pipeline.TakeReady();
  ASSERT_EQ(b.size(), 1u);
  const auto& tx = b[0].ports(0).transmit();
  EXPECT_DOUBLE_EQ(tx.peak_utilization(), 0.5);
  EXPECT_EQ(tx.bytes(), 1'400'000u);
  // Mean over the covered time (3 ms): 1.4e6 / (1e9 x 0.003).
  EXPECT_NEAR(tx.mean_utilization(), 1.4e6 / 3e6, 1e-12);
  EXPECT_EQ(tx.samples(), 2u);
  EXPECT_TRUE(b[0].ports(0).utilization_valid());
}

TEST(Pipeline, MicroburstReportedWithStartDurationPeakAndBytes) {
  Driver d(1'000'000'000);
  uint64_t tx = 0;
  d.Tick(100 * kMs, tx);
  // 5 ms at 95%, then idle.
  for (int i = 1; i <= 5; ++i) d.Tick((100 + i) * kMs, tx += 950'000);
  d.Tick(106 * kMs, tx);
  d.Tick(kSec, tx);
  auto b = d.pipeline.TakeReady();
  ASSERT_EQ(b.size(), 1u);
  ASSERT_EQ(b[0].microbursts_size(), 1);
  const v1::Microburst& m = b[0].microbursts(0);
  EXPECT_EQ(m.direction(), v1::DIRECTION_TRANSMIT);
  EXPECT_EQ(m.start_ns(), 100 * kMs);
  EXPECT_EQ(m.duration_ns(), 5 * kMs);
  EXPECT_EQ(m.bytes(), 5 * 950'000u);
  EXPECT_NEAR(m.peak_utilization(), 0.95, 1e-9);
  EXPECT_EQ(b[0].ports(0).transmit().microbursts(), 1u);
  EXPECT_EQ(b[0].ports(0).transmit().microbursts_total(), 1u);
  EXPECT_EQ(b[0].ports(0).transmit().microburst_duration_seconds().count(), 1u);
  EXPECT_EQ(b[0].ports(0).receive().microbursts(), 0u);
}

// The counter observer hears of a microburst when it ends, before its window closes (the
// collective analysis of an early batch needs it).
TEST(Pipeline, ObserverHearsOfABurstWhenItEnds) {
  struct Bursts : CounterDeltaObserver {
    void OnCounterDelta(uint32_t, uint32_t, int64_t, int64_t, uint64_t) override {}
    void OnMicroburst(uint32_t port, int64_t start_ns, int64_t end_ns) override {
      seen.push_back({port, start_ns, end_ns});
    }
    std::vector<std::tuple<uint32_t, int64_t, int64_t>> seen;
  } bursts;
  Driver d(1'000'000'000);
  d.pipeline.set_counter_observer(&bursts);
  uint64_t tx = 0;
  d.Tick(100 * kMs, tx);
  for (int i = 1; i <= 5; ++i) d.Tick((100 + i) * kMs, tx += 950'000);
  EXPECT_TRUE(bursts.seen.empty());  // still open
  d.Tick(106 * kMs, tx);
  ASSERT_EQ(bursts.seen.size(), 1u);
  EXPECT_EQ(bursts.seen[0], std::make_tuple(0u, 100 * kMs, 105 * kMs));
  EXPECT_TRUE(d.pipeline.TakeReady().empty());  // the window is still open
}

TEST(Pipeline, BurstAcrossAWindowBoundaryIsReportedOnceWhereItEnds) {
  Driver d(1'000'000'000);
  uint64_t tx = 0;
  d.Tick(990 * kMs, tx);
  for (int64_t t = 991; t <= 1004; ++t) d.Tick(t * kMs, tx += 1'000'000);  // 14 ms at 100%
  d.Tick(1005 * kMs, tx);                                                  // ends it
  d.Tick(2 * kSec, tx);
  auto b = d.pipeline.TakeReady();
  ASSERT_EQ(b.size(), 2u);
  EXPECT_EQ(b[0].window_end_ns(), kSec);
  EXPECT_EQ(b[0].microbursts_size(), 0);
  EXPECT_EQ(b[0].ports(0).transmit().microbursts(), 0u);
  EXPECT_DOUBLE_EQ(b[0].ports(0).transmit().peak_utilization(), 1.0);
  ASSERT_EQ(b[1].microbursts_size(), 1);
  EXPECT_EQ(b[1].microbursts(0).start_ns(), 990 * kMs);
  EXPECT_EQ(b[1].microbursts(0).duration_ns(), 14 * kMs);
  EXPECT_EQ(b[1].microbursts(0).bytes(), 14'000'000u);
  EXPECT_EQ(b[1].ports(0).transmit().microbursts_total(), 1u);
  // Bytes are split by sample time: 9 samples before 1 s, 5 after.
  EXPECT_EQ(b[0].ports(0).transmit().bytes(), 9'000'000u);
  EXPECT_EQ(b[1].ports(0).transmit().bytes(), 5'000'000u);
}

TEST(Pipeline, UnknownLineRateCountsBytesButNoUtilization) {
  Driver d(0);
  d.Tick(1 * kMs, 0);
  d.Tick(2 * kMs, 50'000'000'000);
  d.Tick(kSec, 50'000'000'000);
  auto b = d.pipeline.TakeReady();
  ASSERT_EQ(b.size(), 1u);
  EXPECT_FALSE(b[0].ports(0).utilization_valid());
  EXPECT_EQ(b[0].ports(0).transmit().bytes(), 50'000'000'000u);
  EXPECT_EQ(b[0].microbursts_size(), 0);
  EXPECT_EQ(b[0].ports(0).transmit().sample_utilization().count(), 0u);
}

TEST(Pipeline, CounterResetKeepsTotalsMonotonicAndIsCounted) {
  Driver d(1'000'000'000);
  d.Tick(1 * kMs, 1'000'000);
  d.Tick(2 * kMs, 1'500'000);
  d.Tick(3 * kMs, 200);  // device re-plugged: restarted from 0, now 200
  d.Tick(kSec, 300);
  auto b = d.pipeline.TakeReady();
  ASSERT_EQ(b.size(), 1u);
  const auto& w = b[0].ports(0);
  EXPECT_EQ(w.counter_resets(), 1u);
  ASSERT_EQ(w.counter_resets_by_group().size(), 1u);
  EXPECT_EQ(w.counter_resets_by_group().at("statistics"), 1u);
  // The tick at 1 s belongs to the next window.
  EXPECT_EQ(w.transmit().bytes(), 500'000u + 200u);
  EXPECT_EQ(w.transmit().bytes_total(), 1'000'000u + 500'000u + 200u);
}

TEST(Pipeline, ThirtyTwoBitWrapUnfoldsWithinTheLineRateBound) {
  Driver d(1'000'000'000);
  d.Tick(1 * kMs, 4'294'967'000u);
  d.Tick(2 * kMs, 704);  // 296 + 704 = 1000 bytes across 2^32: plausible in 1 ms
  d.Tick(kSec, 704);
  auto b = d.pipeline.TakeReady();
  ASSERT_EQ(b.size(), 1u);
  EXPECT_EQ(b[0].ports(0).counter_resets(), 0u);
  EXPECT_EQ(b[0].ports(0).transmit().bytes(), 1000u);
}

TEST(Pipeline, FailedReadsAreSkippedAndTheNextDeltaSpansTheGap) {
  Driver d(1'000'000'000);
  d.Tick(1 * kMs, 0);
  d.Tick(2 * kMs, 0, ReadStatus::kError);
  d.Tick(3 * kMs, 0, ReadStatus::kUnavailable);
  d.Tick(4 * kMs, 600'000);  // 6e5 over 3 ms: 0.2
  d.Tick(kSec, 600'000);
  auto b = d.pipeline.TakeReady();
  ASSERT_EQ(b.size(), 1u);
  EXPECT_EQ(b[0].ports(0).unavailable_reads(), 2u);
  EXPECT_EQ(b[0].ports(0).transmit().bytes(), 600'000u);
  EXPECT_DOUBLE_EQ(b[0].ports(0).transmit().peak_utilization(), 0.2);
}

TEST(Pipeline, SaturatedErrorCounterIsFlaggedNotWrapped) {
  Driver d(1'000'000'000);
  d.values[5] = 65530;
  d.Tick(1 * kMs, 0);
  d.values[5] = 65535;
  d.Tick(2 * kMs, 0);
  d.Tick(3 * kMs, 0);
  d.Tick(kSec, 0);
  auto b = d.pipeline.TakeReady();
  ASSERT_EQ(b.size(), 1u);
  ASSERT_EQ(b[0].ports(0).errors_size(), 2);
  const v1::ErrorCounter& sym = b[0].ports(0).errors(1);
  EXPECT_EQ(sym.kind(), "symbol_error");
  EXPECT_TRUE(sym.saturated());
  EXPECT_EQ(sym.total(), 65535u);
  EXPECT_EQ(sym.delta(), 5u);
  EXPECT_EQ(b[0].ports(0).errors(0).kind(), "rx_errors");
  EXPECT_FALSE(b[0].ports(0).errors(0).saturated());
  EXPECT_EQ(b[0].ports(0).errors(0).total(), 3u);
}

// A 32-bit PortCounters data counter stuck at 2^32 - 1 (counters/ without counters_ext:
// collectors/sysfs_ports.cc marks it): the window names it saturated instead of showing an idle
// link, and a counter that moves on clears it.
TEST(Pipeline, AStuckThirtyTwoBitDataCounterIsFlaggedSaturated) {
  PortDescriptor p = TestPort(1'000'000'000);
  p.counters[0].spec.stuck_at_32_bits_saturates = true;  // tx_bytes
  Pipeline pl({p}, {});
  uint64_t v[6] = {4294967295u, 0, 0, 0, 0, 0};
  ReadStatus ok[6];
  std::fill(std::begin(ok), std::end(ok), ReadStatus::kOk);
  for (int i = 1; i <= 3; ++i) pl.AddTick(i * kMs, v, ok);
  pl.AddTick(kSec, v, ok);
  v[0] = 4294967296u + 1000;  // moving again (a 64-bit counter after all)
  pl.AddTick(kSec + kMs, v, ok);
  pl.AddTick(2 * kSec, v, ok);
  auto b = pl.TakeReady();
  ASSERT_EQ(b.size(), 2u);
  ASSERT_EQ(b[0].ports(0).saturated_counters_size(), 1);
  EXPECT_EQ(b[0].ports(0).saturated_counters(0), "tx_bytes");
  EXPECT_EQ(b[0].ports(0).transmit().bytes(), 0u);
  EXPECT_EQ(b[1].ports(0).saturated_counters_size(), 0);
}

TEST(Pipeline, SamplerStallSkipsEmptyWindows) {
  Driver d(1'000'000'000);
  d.Tick(100 * kMs, 0);
  d.Tick(5 * kSec + 100 * kMs, 1000);  // nothing for 5 s
  d.Tick(6 * kSec, 1000);
  auto b = d.pipeline.TakeReady();
  ASSERT_EQ(b.size(), 2u);
  EXPECT_EQ(b[0].window_end_ns(), kSec);
  EXPECT_EQ(b[1].window_start_ns(), 5 * kSec);
  EXPECT_EQ(b[1].window_end_ns(), 6 * kSec);
  EXPECT_EQ(b[1].ports(0).transmit().bytes(), 1000u);
}

TEST(Pipeline, FlushEndsOpenBurstsAndClosesThePartialWindow) {
  Driver d(1'000'000'000);
  d.Tick(1 * kMs, 0);
  d.Tick(2 * kMs, 990'000);
  d.Tick(3 * kMs, 1'980'000);
  d.pipeline.Flush(3 * kMs);
  auto b = d.pipeline.TakeReady();
  ASSERT_EQ(b.size(), 1u);
  EXPECT_EQ(b[0].window_end_ns(), 3 * kMs);
  ASSERT_EQ(b[0].microbursts_size(), 1);
  EXPECT_EQ(b[0].microbursts(0).duration_ns(), 2 * kMs);
}

TEST(Pipeline, PerPortThresholdOverride) {
  PipelineOptions o;
  o.port_thresholds["eth9"] = MicroburstThresholds{0.3, 0.2};
  Driver d(1'000'000'000, o);
  d.Tick(1 * kMs, 0);
  d.Tick(2 * kMs, 400'000);  // 0.4: a burst only with the override
  d.Tick(3 * kMs, 400'000);
  d.Tick(kSec, 400'000);
  auto b = d.pipeline.TakeReady();
  ASSERT_EQ(b.size(), 1u);
  EXPECT_EQ(b[0].microbursts_size(), 1);
}

}  // namespace
}  // namespace fabricscope::agent

namespace fabricscope::agent {
namespace {

// Two sampler groups feeding one port: bytes on the fast group, an hw counter and link state on
// the slow one.
TEST(PipelineGroups, SlowGroupCountersStateEventsAndDerivedSignals) {
  PortDescriptor p;
  p.device = "mlx5_0";
  p.port = 1;
  p.rdma = true;
  p.line_rate_bytes_per_second = 1'000'000'000;
  auto add = [&](const char* name, const char* group, CounterRole role, CounterSpec spec) {
    CounterDescriptor c;
    c.name = name;
    c.group = group;
    c.role = role;
    c.meaning = collectors::MeaningOf(group, name).meaning;  // as discovery sets it
    c.spec = spec;
    p.counters.push_back(c);
  };
  add("port_rcv_packets", "counters", CounterRole::kReceivePackets,
      {64, CounterBehavior::kWrapping, 1});
  add("out_of_sequence", "hw_counters", CounterRole::kOther, {32, CounterBehavior::kWrapping, 1});
  add("state", "state", CounterRole::kState, {});
  add("rate", "state", CounterRole::kState, {});
  Pipeline pl({p}, {});
  pl.SetGroups({{{0, 0}}, {{0, 1}, {0, 2}, {0, 3}}});
  const ReadStatus ok[3] = {ReadStatus::kOk, ReadStatus::kOk, ReadStatus::kOk};
  uint64_t fast[1] = {1000};
  uint64_t slow[3] = {4294967290u, 4, 3'125'000'000};
  pl.AddTick(0, 10 * kMs, fast, ok);
  pl.AddTick(1, 10 * kMs, slow, ok);
  fast[0] = 11000;  // 10,000 packets received
  slow[0] = 5;      // wrapped: 11 more out of sequence
  slow[1] = 1;      // link went DOWN
  pl.AddTick(0, 20 * kMs, fast, ok);
  pl.AddTick(1, 20 * kMs, slow, ok);
  slow[1] = 4;              // and came back
  slow[2] = 1'250'000'000;  // at a lower rate
  pl.AddTick(1, 30 * kMs, slow, ok);
  pl.AddTick(0, kSec, fast, ok);
  auto b = pl.TakeReady();
  ASSERT_EQ(b.size(), 1u);
  const v1::PortWindow& w = b[0].ports(0);
  EXPECT_EQ(w.receive().packets(), 10'000u);
  ASSERT_EQ(w.counters_size(), 1);
  EXPECT_EQ(w.counters(0).group(), "hw_counters");
  EXPECT_EQ(w.counters(0).total(), uint64_t{4294967290} + 11);
  EXPECT_EQ(w.counters(0).delta(), 11u);
  EXPECT_EQ(w.derived().out_of_sequence_total(), uint64_t{4294967290} + 11);
  EXPECT_DOUBLE_EQ(w.derived().loss_ratio(), 11.0 / 10'000);
  EXPECT_EQ(w.link().state(), 4u);
  EXPECT_EQ(w.link().rate_bytes_per_second(), 1'250'000'000u);
  EXPECT_EQ(w.link().flaps_total(), 1u);
  EXPECT_EQ(w.link().rate_changes_total(), 1u);
  ASSERT_EQ(b[0].link_events_size(), 3);
  EXPECT_EQ(b[0].link_events(0).what(), "state");
  EXPECT_EQ(b[0].link_events(0).time_ns(), 20 * kMs);
  EXPECT_EQ(b[0].link_events(0).old_value(), 4u);
  EXPECT_EQ(b[0].link_events(0).new_value(), 1u);
  EXPECT_EQ(b[0].link_events(2).what(), "rate");
  EXPECT_EQ(b[0].link_events(2).new_value(), 1'250'000'000u);
}

// A link that retrains while the agent runs (400 -> 200 Gb/s here 1 -> 0.5 GB/s): from the next
// sample on, utilization and microbursts are judged at the new rate, and the window says which
// rate was in effect, and the counter observer (the collective analysis) hears of the new rate.
// A --line-rate override (LineRateSource::kConfig) still wins.
TEST(PipelineGroups, ALinkRateChangeAppliesFromTheNextSample) {
  struct Rates : CounterDeltaObserver {
    void OnCounterDelta(uint32_t, uint32_t, int64_t, int64_t, uint64_t) override {}
    void OnLineRate(uint32_t port, int64_t t_ns, uint64_t rate) override {
      seen.push_back({port, t_ns, rate});
    }
    std::vector<std::tuple<uint32_t, int64_t, uint64_t>> seen;
  };
  for (const bool overridden : {false, true}) {
    Rates rates;
    PortDescriptor p = TestPort(1'000'000'000);
    if (overridden) p.line_rate_source = collectors::LineRateSource::kConfig;
    CounterDescriptor rate;
    rate.name = "rate";
    rate.group = "state";
    rate.role = CounterRole::kState;
    p.counters.push_back(rate);
    Pipeline pl({p}, {});
    std::vector<Pipeline::CounterRef> fast;
    for (uint32_t k = 0; k < 6; ++k) fast.push_back({0, k});
    pl.SetGroups({fast, {{0, 6}}});
    pl.set_counter_observer(&rates);
    ReadStatus ok[6];
    std::fill(std::begin(ok), std::end(ok), ReadStatus::kOk);
    uint64_t v[6] = {0, 0, 0, 0, 0, 0};
    uint64_t r[1] = {1'000'000'000};
    pl.AddTick(0, 0, v, ok);
    pl.AddTick(1, 0, r, ok);
    r[0] = 500'000'000;  // retrained at half the rate
    pl.AddTick(1, 10 * kMs, r, ok);
    for (int i = 2; i <= 100; ++i) {  // 0.5 GB/s for 0.5 s: the whole new line rate, then idle
      if (i <= 50) v[0] += 5'000'000;
      pl.AddTick(0, i * 10 * kMs, v, ok);
    }
    pl.AddTick(0, kSec + 10 * kMs, v, ok);
    auto b = pl.TakeReady();
    ASSERT_EQ(b.size(), 1u);
    const v1::PortWindow& w = b[0].ports(0);
    EXPECT_EQ(w.line_rate_bytes_per_second(), overridden ? 1'000'000'000u : 500'000'000u);
    EXPECT_DOUBLE_EQ(w.transmit().peak_utilization(), overridden ? 0.5 : 1.0) << overridden;
    EXPECT_EQ(b[0].microbursts_size(), overridden ? 0 : 1) << overridden;
    ASSERT_EQ(b[0].link_events_size(), 1);
    EXPECT_EQ(b[0].link_events(0).what(), "rate");
    if (overridden) {
      EXPECT_TRUE(rates.seen.empty());
    } else {
      EXPECT_EQ(
          rates.seen,
          (std::vector<std::tuple<uint32_t, int64_t, uint64_t>>{{0u, 10 * kMs, 500'000'000u}}));
    }
  }
}

TEST(PipelineGroups, ShortSampleAfterALateTickIsMergedForUtilization) {
  PipelineOptions o;
  o.nominal_period_ns = 100'000;  // 100 us
  Driver d(1'000'000'000, o);
  d.Tick(1'000'000, 0);
  d.Tick(1'150'000, 150'000);  // late tick: 150 us at 100%
  d.Tick(1'190'000, 174'000);  // short 40 us (24,000 B = 60%): held back
  d.Tick(1'300'000, 280'000);  // merged: 130,000 B over 150 us = 86.7%
  d.Tick(kSec, 280'000);
  auto b = d.pipeline.TakeReady();
  ASSERT_EQ(b.size(), 1u);
  const auto& tx = b[0].ports(0).transmit();
  EXPECT_EQ(tx.bytes(), 280'000u);  // nothing lost
  EXPECT_EQ(tx.sample_utilization().count(), 2u);
  EXPECT_DOUBLE_EQ(tx.peak_utilization(), 1.0);
  // Without the merge, the 50 us sample would have been a separate 60% sample and a burst
  // end; with it, 100% then 86.7% is one open burst.
  EXPECT_EQ(b[0].microbursts_size(), 0);
}

}  // namespace
}  // namespace fabricscope::agent

namespace fabricscope::agent {
namespace {

// Flight recorder and utilization series through the pipeline: 1 ms ticks, 1 GB/s line rate.
TEST(PipelineFlightRecorder, BurstWithLossAttachesTheSamplesAroundIt) {
  PipelineOptions o;
  o.nominal_period_ns = kMs;
  o.flight_margin_ns = 3 * kMs;
  Driver d(1'000'000'000, o);
  uint64_t tx = 0;
  // 1 s window from t = 1 s: idle, then a 5 ms burst at line rate from 1.100 s, with rx_errors
  // (values[4]) rising in the window.
  for (int i = 0; i <= 1000; ++i) {
    const int64_t t = kSec + i * kMs;
    if (i > 100 && i <= 105) tx += 1'000'000;
    if (i == 300) d.values[4] += 2;
    d.Tick(t, tx);
  }
  d.Tick(2 * kSec + kMs, tx);  // closes the window [1 s, 2 s)
  auto ready = d.pipeline.TakeReady();
  ASSERT_GE(ready.size(), 1u);
  const v1::Batch& b = ready.back();
  ASSERT_EQ(b.microbursts_size(), 1);
  ASSERT_EQ(b.flight_recordings_size(), 1);
  const v1::FlightRecording& r = b.flight_recordings(0);
  EXPECT_EQ(r.reason(), "burst_with_loss");
  EXPECT_EQ(r.from_ns(), b.microbursts(0).start_ns() - 3 * kMs);
  // Samples whose end lies in [start - 3 ms, end + 3 ms] = [1.097, 1.108] s: the 5 burst
  // samples, 4 before (the one ending at 1.097 s included) and 3 after.
  EXPECT_EQ(r.time_ns_size(), 12);
  EXPECT_EQ(r.time_ns(0), kSec + 97 * kMs);
  uint64_t burst_bytes = 0;
  for (int i = 0; i < r.transmit_bytes_size(); ++i) burst_bytes += r.transmit_bytes(i);
  EXPECT_EQ(burst_bytes, 5'000'000u);
  EXPECT_FLOAT_EQ(r.transmit_utilization(5), 1.0f);
  EXPECT_EQ(b.flight_recorder().recordings_total(), 1u);
  EXPECT_GT(b.flight_recorder().bytes(), 0u);
  // The utilization series: 1000 buckets of 1 ms, hot exactly at the burst.
  ASSERT_EQ(b.utilization_series_size(), 1);
  const v1::UtilizationSeries& s = b.utilization_series(0);
  EXPECT_EQ(s.bucket_ns(), kMs);
  EXPECT_EQ(s.start_ns(), kSec);
  ASSERT_EQ(s.transmit().size(), 1000u);
  for (int k = 0; k < 999; ++k) {
    const uint8_t code = static_cast<uint8_t>(s.transmit()[static_cast<size_t>(k)]);
    EXPECT_EQ(code, k >= 100 && k < 105 ? 250 : 0) << "bucket " << k;
  }
  // The sample ending at 2 s belongs to the next window: its bucket comes as that window's lead.
  EXPECT_EQ(static_cast<uint8_t>(s.transmit()[999]), common::kUtilizationMissing);
  d.pipeline.Flush(2 * kSec + 2 * kMs);
  const v1::Batch next = d.pipeline.TakeReady().back();
  ASSERT_EQ(next.utilization_series_size(), 1);
  EXPECT_EQ(next.utilization_series(0).start_ns(), 2 * kSec - kMs);
  EXPECT_EQ(static_cast<uint8_t>(next.utilization_series(0).transmit()[0]), 0);
}

TEST(PipelineFlightRecorder, BurstWithoutLossAttachesNothing) {
  PipelineOptions o;
  o.nominal_period_ns = kMs;
  Driver d(1'000'000'000, o);
  uint64_t tx = 0;
  for (int i = 0; i <= 1000; ++i) {
    if (i > 100 && i <= 105) tx += 1'000'000;
    d.Tick(kSec + i * kMs, tx);
  }
  d.Tick(2 * kSec + kMs, tx);
  auto ready = d.pipeline.TakeReady();
  ASSERT_GE(ready.size(), 1u);
  EXPECT_EQ(ready.back().microbursts_size(), 1);
  EXPECT_EQ(ready.back().flight_recordings_size(), 0);
}

TEST(PipelineFlightRecorder, RecordingsPerWindowAreBounded) {
  PipelineOptions o;
  o.nominal_period_ns = kMs;
  o.flight_recordings_per_window = 2;
  o.flight_margin_ns = kMs;
  Driver d(1'000'000'000, o);
  uint64_t tx = 0;
  for (int i = 0; i <= 1000; ++i) {
    if (i % 100 == 50) tx += 1'000'000;  // ten one-sample bursts, 100 ms apart
    if (i == 10) d.values[4] += 1;
    d.Tick(kSec + i * kMs, tx);
  }
  d.Tick(2 * kSec + kMs, tx);
  const v1::Batch b = d.pipeline.TakeReady().back();
  EXPECT_EQ(b.microbursts_size(), 10);
  EXPECT_EQ(b.flight_recordings_size(), 2);
  EXPECT_EQ(b.flight_recorder().recordings_dropped_total(), 8u);
}

}  // namespace
}  // namespace fabricscope::agent

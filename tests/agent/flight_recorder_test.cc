#include "agent/flight_recorder.h"

#include <gtest/gtest.h>

#include "tests/common/units.h"

namespace fabricscope::agent {
namespace {

FlightSample At(int64_t t, uint64_t tx) {
  FlightSample s;
  s.t_ns = t;
  s.interval_ns = kMs;
  s.tx_bytes = tx;
  s.rx_bytes = tx / 2;
  s.tx_utilization = static_cast<float>(tx) / 1000.0f;
  return s;
}

TEST(FlightRecorder, CapacityAndBytesFollowSecondsAndPeriod) {
  FlightRecorder r(3, 10, kMs);
  // ceil(10 s / 1 ms) x 1.25 + 16 samples per port.
  EXPECT_EQ(r.capacity(), 12516u);
  EXPECT_EQ(r.bytes(), 3u * 12516u * sizeof(FlightSample));
  EXPECT_EQ(sizeof(FlightSample), 40u);
  FlightRecorder off(3, 0, kMs);
  EXPECT_EQ(off.capacity(), 0u);
  EXPECT_EQ(off.bytes(), 0u);
  off.Record(0, At(1, 1));  // ignored, no crash
  EXPECT_EQ(off.size(0), 0u);
}

TEST(FlightRecorder, ExtractReturnsTheSamplesInTheClosedInterval) {
  FlightRecorder r(2, 1, 100 * kMs);  // capacity ceil(10) x 1.25 + 16 = 28
  for (int i = 1; i <= 20; ++i) r.Record(1, At(i * kMs, static_cast<uint64_t>(i)));
  r.Record(0, At(5 * kMs, 999));
  std::vector<FlightSample> out;
  EXPECT_EQ(r.Extract(1, 5 * kMs, 8 * kMs, 100, &out), 4u);
  ASSERT_EQ(out.size(), 4u);
  EXPECT_EQ(out.front().tx_bytes, 5u);
  EXPECT_EQ(out.back().tx_bytes, 8u);
  EXPECT_EQ(out[1].rx_bytes, 3u);
  // Bounded: the earliest max_samples, and the count says how many matched.
  out.clear();
  EXPECT_EQ(r.Extract(1, 0, 100 * kMs, 3, &out), 20u);
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[2].tx_bytes, 3u);
  out.clear();
  EXPECT_EQ(r.Extract(1, 9 * kMs, 2 * kMs, 10, &out), 0u);  // empty interval
  EXPECT_EQ(r.Extract(7, 0, 100 * kMs, 10, &out), 0u);      // no such port
}

TEST(FlightRecorder, OldestSamplesAreEvictedWhenFull) {
  FlightRecorder r(1, 1, 100 * kMs);
  const size_t cap = r.capacity();
  for (size_t i = 1; i <= cap + 5; ++i) r.Record(0, At(static_cast<int64_t>(i) * kMs, i));
  EXPECT_EQ(r.size(0), cap);
  std::vector<FlightSample> out;
  EXPECT_EQ(r.Extract(0, 0, 1'000'000 * kMs, cap + 10, &out), cap);
  EXPECT_EQ(out.front().tx_bytes, 6u);  // 1..5 evicted
  EXPECT_EQ(out.back().tx_bytes, cap + 5);
  // Binary search across the wrap point.
  out.clear();
  EXPECT_EQ(
      r.Extract(0, static_cast<int64_t>(cap) * kMs, static_cast<int64_t>(cap + 1) * kMs, 10, &out),
      2u);
  EXPECT_EQ(out[0].tx_bytes, cap);
}

TEST(FlightRecorder, FillWritesParallelArraysAndTruncation) {
  FlightRecorder r(1, 1, 100 * kMs);
  for (int i = 1; i <= 10; ++i) r.Record(0, At(i * kMs, static_cast<uint64_t>(i) * 100));
  v1::FlightRecording rec;
  EXPECT_EQ(r.Fill(0, 2 * kMs, 9 * kMs, 4, &rec), 4u);
  EXPECT_TRUE(rec.truncated());
  EXPECT_EQ(rec.from_ns(), 2 * kMs);
  EXPECT_EQ(rec.to_ns(), 9 * kMs);
  ASSERT_EQ(rec.time_ns_size(), 4);
  EXPECT_EQ(rec.transmit_bytes(0), 200u);
  EXPECT_EQ(rec.receive_bytes(3), 250u);
  EXPECT_FLOAT_EQ(rec.transmit_utilization(1), 0.3f);
  EXPECT_EQ(rec.interval_ns(2), kMs);
}

}  // namespace
}  // namespace fabricscope::agent

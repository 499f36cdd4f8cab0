#include "collectors/counter.h"

#include <gtest/gtest.h>

namespace fabricscope::collectors {
namespace {

TEST(ParseCounterText, ParsesDecimalWithNewline) {
  uint64_t v = 0;
  EXPECT_EQ(ParseCounterText("2880761508848\n", &v), ReadStatus::kOk);
  EXPECT_EQ(v, 2880761508848u);
  EXPECT_EQ(ParseCounterText("  42 \n", &v), ReadStatus::kOk);
  EXPECT_EQ(v, 42u);
}

TEST(ParseCounterText, MaxUint64AndOverflow) {
  uint64_t v = 0;
  EXPECT_EQ(ParseCounterText("18446744073709551615\n", &v), ReadStatus::kOk);
  EXPECT_EQ(v, ~uint64_t{0});
  EXPECT_EQ(ParseCounterText("18446744073709551616\n", &v), ReadStatus::kError);
}

TEST(ParseCounterText, NotAvailableIsNotAnError) {
  uint64_t v = 7;
  EXPECT_EQ(ParseCounterText("N/A (no PMA)\n", &v), ReadStatus::kUnavailable);
  EXPECT_EQ(v, 7u);  // untouched
}

TEST(ParseCounterText, GarbageIsAnError) {
  uint64_t v = 0;
  EXPECT_EQ(ParseCounterText("", &v), ReadStatus::kError);
  EXPECT_EQ(ParseCounterText("\n", &v), ReadStatus::kError);
  EXPECT_EQ(ParseCounterText("-1\n", &v), ReadStatus::kError);
  EXPECT_EQ(ParseCounterText("12abc\n", &v), ReadStatus::kError);
  EXPECT_EQ(ParseCounterText("0x10\n", &v), ReadStatus::kError);
}

TEST(ComputeDelta, NormalIncrement) {
  const CounterSpec spec{64, CounterBehavior::kWrapping, 4};
  const Delta d = ComputeDelta(spec, 100, 250, 0);
  EXPECT_EQ(d.kind, DeltaKind::kNormal);
  EXPECT_EQ(d.raw, 150u);  // scale is applied by the caller
}

TEST(ComputeDelta, ThirtyTwoBitWrap) {
  const CounterSpec spec{32, CounterBehavior::kWrapping, 1};
  const uint64_t prev = 0xFFFFFF00u;
  const Delta d = ComputeDelta(spec, prev, 0x10, /*max_plausible_raw=*/1000);
  EXPECT_EQ(d.kind, DeltaKind::kWrapped);
  EXPECT_EQ(d.raw, 0x100u + 0x10u);
}

TEST(ComputeDelta, ThirtyTwoBitDropTooLargeForAWrapIsAReset) {
  const CounterSpec spec{32, CounterBehavior::kWrapping, 1};
  // Unfolding would mean ~4e9 increments in an interval that allows 1000: a reset.
  const Delta d = ComputeDelta(spec, 5000, 12, 1000);
  EXPECT_EQ(d.kind, DeltaKind::kReset);
  EXPECT_EQ(d.raw, 12u);
}

TEST(ComputeDelta, ThirtyTwoBitWithoutBoundWrapsOnlyFromTheTopQuarter) {
  // mlx5 hw_counters queue counters are 32-bit in firmware and have no rate bound.
  const CounterSpec spec{32, CounterBehavior::kWrapping, 1};
  Delta d = ComputeDelta(spec, 4294967290u, 4, 0);
  EXPECT_EQ(d.kind, DeltaKind::kWrapped);
  EXPECT_EQ(d.raw, 10u);
  d = ComputeDelta(spec, 1000, 3, 0);  // driver reloaded: counts restarted
  EXPECT_EQ(d.kind, DeltaKind::kReset);
  EXPECT_EQ(d.raw, 3u);
}

TEST(ComputeDelta, SixtyFourBitCounterThatWrapsAtThirtyTwoBits) {
  // Old drivers keep 32-bit statistics behind a 64-bit file.
  const CounterSpec spec{64, CounterBehavior::kWrapping, 1};
  const Delta d = ComputeDelta(spec, 4294967000u, 500, 2000);
  EXPECT_EQ(d.kind, DeltaKind::kWrapped);
  EXPECT_EQ(d.raw, 4294967295u - 4294967000u + 500u + 1u);
}

TEST(ComputeDelta, SixtyFourBitDecreaseWithoutBoundIsAReset) {
  const CounterSpec spec{64, CounterBehavior::kWrapping, 1};
  const Delta d = ComputeDelta(spec, 123456789, 1000, 0);
  EXPECT_EQ(d.kind, DeltaKind::kReset);
  EXPECT_EQ(d.raw, 1000u);
}

TEST(ComputeDelta, SixtyFourBitWrapNearMaximum) {
  const CounterSpec spec{64, CounterBehavior::kWrapping, 1};
  const Delta d = ComputeDelta(spec, ~uint64_t{0} - 9, 5, 0);
  EXPECT_EQ(d.kind, DeltaKind::kWrapped);
  EXPECT_EQ(d.raw, 15u);
}

TEST(ComputeDelta, SaturatingCounterSticksAtMaximum) {
  const CounterSpec spec{16, CounterBehavior::kSaturating, 1};
  Delta d = ComputeDelta(spec, 65530, 65535, 0);
  EXPECT_EQ(d.kind, DeltaKind::kSaturated);
  EXPECT_EQ(d.raw, 5u);  // increments up to the maximum, never a wrap
  d = ComputeDelta(spec, 65535, 65535, 0);
  EXPECT_EQ(d.kind, DeltaKind::kSaturated);
  EXPECT_EQ(d.raw, 0u);
}

TEST(ComputeDelta, SaturatingCounterAtTwoToThe32MinusOne) {
  const CounterSpec spec{32, CounterBehavior::kSaturating, 1};
  const Delta d = ComputeDelta(spec, 4294967290u, 4294967295u, 0);
  EXPECT_EQ(d.kind, DeltaKind::kSaturated);
  EXPECT_EQ(d.raw, 5u);
}

TEST(ComputeDelta, SaturatingCounterClearedIsAReset) {
  const CounterSpec spec{16, CounterBehavior::kSaturating, 1};
  const Delta d = ComputeDelta(spec, 65535, 3, 0);
  EXPECT_EQ(d.kind, DeltaKind::kReset);
  EXPECT_EQ(d.raw, 3u);
}

TEST(ComputeDelta, FourBitSaturatingCounter) {
  const CounterSpec spec{4, CounterBehavior::kSaturating, 1};
  EXPECT_EQ(ComputeDelta(spec, 14, 15, 0).kind, DeltaKind::kSaturated);
  EXPECT_EQ(ComputeDelta(spec, 13, 14, 0).kind, DeltaKind::kNormal);
}

// A counters/ data counter that is really the 32-bit PortCounters one stops at 2^32 - 1 (IBTA
// vol. 1 16.1.3.5): read there twice, it is saturated, not an idle link; passing through that
// value once, or anywhere else, is an ordinary 64-bit counter.
TEST(ComputeDelta, AThirtyTwoBitDataCounterStuckAtItsMaximumIsSaturated) {
  CounterSpec s{64, CounterBehavior::kWrapping, 4};
  s.stuck_at_32_bits_saturates = true;
  const uint64_t max32 = CounterMax(32);
  Delta d = ComputeDelta(s, max32, max32, 0);
  EXPECT_EQ(d.kind, DeltaKind::kSaturated);
  EXPECT_EQ(d.raw, 0u);
  d = ComputeDelta(s, max32 - 10, max32, 0);
  EXPECT_EQ(d.kind, DeltaKind::kNormal);
  EXPECT_EQ(d.raw, 10u);
  d = ComputeDelta(s, max32, max32 + 5, 0);  // a 64-bit counter moving on
  EXPECT_EQ(d.kind, DeltaKind::kNormal);
  s.stuck_at_32_bits_saturates = false;
  EXPECT_EQ(ComputeDelta(s, max32, max32, 0).kind, DeltaKind::kNormal);
}

}  // namespace
}  // namespace fabricscope::collectors

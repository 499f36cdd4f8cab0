#include "collectors/spsc_ring.h"

#include <gtest/gtest.h>

#include <cstring>
#include <thread>

namespace fabricscope::collectors {
namespace {

TEST(SpscSlotRing, RoundsCapacityAndSlotSize) {
  SpscSlotRing ring(5, 13);
  EXPECT_EQ(ring.capacity(), 8u);
  EXPECT_EQ(ring.slot_bytes(), 16u);
}

TEST(SpscSlotRing, FullRingDropsAndCounts) {
  SpscSlotRing ring(4, 8);
  for (uint64_t i = 0; i < 4; ++i) {
    void* s = ring.BeginWrite();
    ASSERT_NE(s, nullptr);
    std::memcpy(s, &i, sizeof(i));
    ring.CommitWrite();
  }
  EXPECT_EQ(ring.BeginWrite(), nullptr);
  EXPECT_EQ(ring.BeginWrite(), nullptr);
  EXPECT_EQ(ring.dropped(), 2u);
  uint64_t v = 99;
  std::memcpy(&v, ring.Peek(), sizeof(v));
  EXPECT_EQ(v, 0u);  // oldest first; the drops did not overwrite
  ring.Pop();
  EXPECT_NE(ring.BeginWrite(), nullptr);
}

TEST(SpscSlotRing, EmptyRingPeeksNull) {
  SpscSlotRing ring(4, 8);
  EXPECT_EQ(ring.Peek(), nullptr);
}

// One producer and one consumer on two threads: every value arrives once, in order, or is
// counted as dropped.
TEST(SpscSlotRing, ConcurrentProducerConsumerKeepsOrder) {
  SpscSlotRing ring(64, 16);
  constexpr uint64_t kCount = 200000;
  std::thread producer([&] {
    for (uint64_t i = 1; i <= kCount; ++i) {
      if (void* s = ring.BeginWrite()) {
        std::memcpy(s, &i, sizeof(i));
        std::memcpy(static_cast<char*>(s) + 8, &i, sizeof(i));
        ring.CommitWrite();
      }
    }
  });
  uint64_t received = 0, last = 0;
  bool ordered = true, intact = true;
  while (true) {
    if (const void* s = ring.Peek()) {
      uint64_t a, b;
      std::memcpy(&a, s, 8);
      std::memcpy(&b, static_cast<const char*>(s) + 8, 8);
      intact &= a == b;
      ordered &= a > last;
      last = a;
      ++received;
      ring.Pop();
      if (a == kCount) break;
    } else if (received + ring.dropped() == kCount) {
      break;  // the last value was dropped
    }
  }
  producer.join();
  while (ring.Peek()) {
    ++received;
    ring.Pop();
  }
  EXPECT_TRUE(ordered);
  EXPECT_TRUE(intact);
  EXPECT_EQ(received + ring.dropped(), kCount);
}

}  // namespace
}  // namespace fabricscope::collectors

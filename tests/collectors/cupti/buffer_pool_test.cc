#include "collectors/cupti/buffer_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <set>
#include <thread>
#include <vector>

namespace fabricscope::collectors::cupti {
namespace {

TEST(BufferPoolTest, RejectsBadSizes) {
  EXPECT_EQ(BufferPool::Create(0, 4096), nullptr);
  EXPECT_EQ(BufferPool::Create(65, 4096), nullptr);
  EXPECT_EQ(BufferPool::Create(4, 512), nullptr);
  EXPECT_EQ(BufferPool::Create(4, 4096 + 8), nullptr);  // not a multiple of 64
  EXPECT_NE(BufferPool::Create(64, 1024), nullptr);
}

TEST(BufferPoolTest, HandsOutDistinctAlignedBuffersThenCountsExhaustion) {
  auto pool = BufferPool::Create(3, 8192);
  ASSERT_NE(pool, nullptr);
  EXPECT_EQ(pool->total_bytes(), 3u * 8192);
  std::set<uint8_t*> seen;
  for (int i = 0; i < 3; ++i) {
    uint8_t* b = pool->Acquire();
    ASSERT_NE(b, nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(b) % 8, 0u) << "CUPTI needs 8-byte aligned buffers";
    std::memset(b, i, 8192);  // the whole buffer is usable (ASan checks the bounds)
    seen.insert(b);
  }
  EXPECT_EQ(seen.size(), 3u);
  EXPECT_EQ(pool->in_use(), 3u);
  EXPECT_EQ(pool->exhausted(), 0u);

  // The pool never grows: every further request is declined and counted.
  EXPECT_EQ(pool->Acquire(), nullptr);
  EXPECT_EQ(pool->Acquire(), nullptr);
  EXPECT_EQ(pool->exhausted(), 2u);

  uint8_t* returned = *seen.begin();
  EXPECT_TRUE(pool->Release(returned));
  EXPECT_EQ(pool->in_use(), 2u);
  EXPECT_EQ(pool->Acquire(), returned);
  EXPECT_EQ(pool->exhausted(), 2u);
}

TEST(BufferPoolTest, RefusesForeignInteriorAndDoubleReleases) {
  auto pool = BufferPool::Create(2, 4096);
  ASSERT_NE(pool, nullptr);
  uint8_t* b = pool->Acquire();
  ASSERT_NE(b, nullptr);
  uint8_t foreign[64];
  EXPECT_FALSE(pool->Release(foreign));
  EXPECT_FALSE(pool->Release(b + 8));
  EXPECT_FALSE(pool->Release(nullptr));
  EXPECT_EQ(pool->in_use(), 1u);
  EXPECT_TRUE(pool->Release(b));
  EXPECT_FALSE(pool->Release(b));  // already free
  EXPECT_EQ(pool->invalid_releases(), 4u);
  EXPECT_EQ(pool->in_use(), 0u);
}

// Several threads acquire and release at once, as CUPTI's worker thread and application threads
// do. A buffer handed to two holders at once would show up as a foreign tag.
TEST(BufferPoolTest, ConcurrentHoldersNeverShareABuffer) {
  constexpr int kThreads = 4;
  constexpr int kRounds = 5000;
  auto pool = BufferPool::Create(3, 1024);
  ASSERT_NE(pool, nullptr);
  std::atomic<int> shared_seen{0};
  std::atomic<int> acquired{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kRounds; ++i) {
        uint8_t* b = pool->Acquire();
        if (b == nullptr) continue;
        acquired.fetch_add(1);
        std::memset(b, t + 1, 64);
        for (int k = 0; k < 64; ++k) {
          if (b[k] != t + 1) {
            shared_seen.fetch_add(1);
            break;
          }
        }
        ASSERT_TRUE(pool->Release(b));
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(shared_seen.load(), 0);
  EXPECT_EQ(pool->in_use(), 0u);
  EXPECT_EQ(pool->invalid_releases(), 0u);
  // Every request either got a buffer or was counted as exhausted.
  EXPECT_EQ(static_cast<uint64_t>(acquired.load()) + pool->exhausted(),
            static_cast<uint64_t>(kThreads) * kRounds);
}

}  // namespace
}  // namespace fabricscope::collectors::cupti

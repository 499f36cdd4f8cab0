#include "collectors/cupti/buffer_pool.h"

#include <bit>
#include <new>

namespace fabricscope::collectors::cupti {

std::unique_ptr<BufferPool> BufferPool::Create(size_t count, size_t buffer_bytes) {
  if (count == 0 || count > kMaxBuffers) return nullptr;
  if (buffer_bytes < 1024 || buffer_bytes % kAlignment != 0) return nullptr;
  auto* memory = static_cast<uint8_t*>(
      ::operator new (count* buffer_bytes, std::align_val_t{kAlignment}, std::nothrow));
  if (memory == nullptr) return nullptr;
  return std::unique_ptr<BufferPool>(new BufferPool(memory, count, buffer_bytes));
}

BufferPool::BufferPool(uint8_t* memory, size_t count, size_t buffer_bytes)
    : memory_(memory), count_(count), buffer_bytes_(buffer_bytes) {}

BufferPool::~BufferPool() { ::operator delete (memory_, std::align_val_t{kAlignment}); }

uint8_t* BufferPool::Acquire() {
  const uint64_t all = count_ == 64 ? ~uint64_t{0} : (uint64_t{1} << count_) - 1;
  uint64_t used = used_.load(std::memory_order_relaxed);
  while (true) {
    const uint64_t free = ~used & all;
    if (free == 0) {
      exhausted_.fetch_add(1, std::memory_order_relaxed);
      return nullptr;
    }
    const int index = std::countr_zero(free);
    const uint64_t bit = uint64_t{1} << index;
    // acquire: the previous holder's writes (CUPTI's, then our reads) happen before ours.
    if (used_.compare_exchange_weak(used, used | bit, std::memory_order_acquire,
                                    std::memory_order_relaxed)) {
      return memory_ + static_cast<size_t>(index) * buffer_bytes_;
    }
  }
}

bool BufferPool::Release(const uint8_t* buffer) {
  const auto base = reinterpret_cast<uintptr_t>(memory_);
  const auto address = reinterpret_cast<uintptr_t>(buffer);
  if (address < base || address >= base + total_bytes() || (address - base) % buffer_bytes_ != 0) {
    invalid_releases_.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  const uint64_t bit = uint64_t{1} << ((address - base) / buffer_bytes_);
  const uint64_t before = used_.fetch_and(~bit, std::memory_order_release);
  if ((before & bit) == 0) {
    invalid_releases_.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  return true;
}

size_t BufferPool::in_use() const {
  return static_cast<size_t>(std::popcount(used_.load(std::memory_order_relaxed)));
}

}  // namespace fabricscope::collectors::cupti

#pragma once

// Lock-free building blocks of the NCCL profiler plugin's hot path: an index free list and a
// bounded multi-producer multi-consumer queue. Both are allocated once (at plugin init) and
// never allocate afterwards.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

namespace fabricscope::collectors::nccl {

// Bounded MPMC queue of trivially copyable T (D. Vyukov's array queue: one sequence number per
// cell). TryPush/TryPop never block and never allocate; TryPush fails when the queue is full.
template <typename T>
class MpmcQueue {
 public:
  // `min_capacity` is rounded up to a power of two.
  explicit MpmcQueue(size_t min_capacity) {
    size_t capacity = 2;
    while (capacity < min_capacity) capacity <<= 1;
    mask_ = capacity - 1;
    cells_.reset(new Cell[capacity]);
    for (size_t i = 0; i < capacity; ++i) cells_[i].sequence.store(i, std::memory_order_relaxed);
  }

  bool TryPush(const T& value) {
    size_t pos = tail_.load(std::memory_order_relaxed);
    for (;;) {
      Cell& cell = cells_[pos & mask_];
      const size_t seq = cell.sequence.load(std::memory_order_acquire);
      const intptr_t diff = static_cast<intptr_t>(seq) - static_cast<intptr_t>(pos);
      if (diff == 0) {
        if (tail_.compare_exchange_weak(pos, pos + 1, std::memory_order_relaxed)) {
          cell.value = value;
          cell.sequence.store(pos + 1, std::memory_order_release);
          return true;
        }
      } else if (diff < 0) {
        return false;  // full
      } else {
        pos = tail_.load(std::memory_order_relaxed);
      }
    }
  }

  bool TryPop(T* out) {
    size_t pos = head_.load(std::memory_order_relaxed);
    for (;;) {
      Cell& cell = cells_[pos & mask_];
      const size_t seq = cell.sequence.load(std::memory_order_acquire);
      const intptr_t diff = static_cast<intptr_t>(seq) - static_cast<intptr_t>(pos + 1);
      if (diff == 0) {
        if (head_.compare_exchange_weak(pos, pos + 1, std::memory_order_relaxed)) {
          *out = cell.value;
          cell.sequence.store(pos + mask_ + 1, std::memory_order_release);
          return true;
        }
      } else if (diff < 0) {
        return false;  // empty
      } else {
        pos = head_.load(std::memory_order_relaxed);
      }
    }
  }

  size_t capacity() const { return mask_ + 1; }
  size_t memory_bytes() const { return sizeof(*this) + capacity() * sizeof(Cell); }

 private:
  struct Cell {
    std::atomic<size_t> sequence;
    T value;
  };
  std::unique_ptr<Cell[]> cells_;
  size_t mask_ = 0;
  alignas(64) std::atomic<size_t> tail_{0};
  alignas(64) std::atomic<size_t> head_{0};
};

// The free slot indices 0..capacity-1, handed out oldest-freed first (a FIFO over MpmcQueue).
// FIFO, not a stack: the slot the flush thread closed last is the one whose cache lines sit,
// modified, in the flush thread's core; a LIFO would hand exactly that slot to the next event on
// NCCL's thread. Pop and Push are lock-free and may be called from any thread.
class IndexFreeList {
 public:
  static constexpr uint32_t kNone = UINT32_MAX;

  explicit IndexFreeList(uint32_t capacity) : capacity_(capacity), free_(capacity) {
    for (uint32_t i = 0; i < capacity; ++i) free_.TryPush(i);
  }

  // Returns a free index, or kNone when every index is in use.
  uint32_t Pop() {
    uint32_t index = kNone;
    return free_.TryPop(&index) ? index : kNone;
  }

  // Returns `index` (obtained from Pop) to the list. Never full: at most `capacity` indices exist.
  void Push(uint32_t index) { free_.TryPush(index); }

  uint32_t capacity() const { return capacity_; }
  size_t memory_bytes() const { return sizeof(*this) + free_.memory_bytes(); }

 private:
  const uint32_t capacity_;
  MpmcQueue<uint32_t> free_;
};

}  // namespace fabricscope::collectors::nccl
